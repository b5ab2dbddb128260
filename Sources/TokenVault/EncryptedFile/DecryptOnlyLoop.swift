// Owns: the crypto floor of opening a vault, for Scripts/bench (issue 17): a loop that only
// authenticates and decrypts every record of a vault file already in memory, as a lookup does
// (``RecordLog/openFrame``), and nothing else: no index, no names, no file reads. With
// `namesOnly` it does the crypto an open does instead (``RecordLog/authenticateFrame``: every
// tag checked, only the names decrypted). Not part of the API: SPI for the Benchmarks package.
internal import FoundationEssentials
internal import TokenVaultSystem

/// Every record of one vault file, held sealed in memory, and the keys to open them.
@_spi(Benchmarks)
public final class DecryptOnlyLoop {
    private let bytes: [UInt8]
    private let header: VaultHeader
    private let keys: VaultKeys
    private let scratch: SecureBuffer

    /// Reads the whole vault at `path` and derives its keys from the key file at `keyFile`
    /// (neither is part of the loop).
    public init(path: String, keyFile: String) throws {
        try Sodium.ensureInitialized()
        guard let (fd, _) = try VaultDisk.open(path) else {
            throw VaultError(.backendUnavailable, "There is no vault file at \(path).")
        }
        defer { VaultIO.closeAfterUse(fd) }
        let status = try VaultIO.fstat(fd, path: path)
        bytes = try VaultIO.read(fd, at: 0, count: Int(status.size), path: path)
        header = try VaultHeader.parse(bytes, fileSize: status.size, path: path)
        keys = try VaultKeys.derive(
            from: try KeyMaterial.load(.keyFile(keyFile), allowInsecurePermissions: false), header: header, path: path)
        try VaultHeader.verify(bytes, keys: keys, header: header, path: path)
        scratch = try SecureBuffer()
    }

    /// The size of the vault file.
    public var fileBytes: Int { bytes.count }

    /// Authenticates and decrypts every record into secure scratch memory (wiped after each, as
    /// an open does); returns how many. Throws if one fails, which a vault that opens never does.
    /// With `namesOnly`, each record is authenticated whole but only its names are decrypted,
    /// as an open does.
    public func run(namesOnly: Bool = false) throws -> Int {
        try bytes.withUnsafeBytes { file in
            var position = VaultHeader.length
            var sequence: UInt64 = 0
            while position + SealedRecord.frameHeaderLength <= file.count {
                let length = Int(UInt32(littleEndian: file.loadUnaligned(fromByteOffset: position, as: UInt32.self)))
                let end = position + SealedRecord.frameHeaderLength + length
                guard end <= file.count else { break }
                let frame = UnsafeRawBufferPointer(rebasing: file[position..<end])
                let opened =
                    namesOnly
                    ? try RecordLog.authenticateFrame(frame, sequence: sequence, fileID: header.fileID, keys: keys, scratch: scratch) { _, _ in true }
                    : try RecordLog.openFrame(frame, sequence: sequence, fileID: header.fileID, keys: keys, scratch: scratch) { _ in true }
                guard opened != nil else {
                    throw VaultError(.integrityFailure, "The record at byte \(position) of the vault file failed authentication.")
                }
                sequence += 1
                position = end
            }
            return Int(sequence)
        }
    }
}

/// One loop runs on one thread: its scratch buffer is not shared.
@available(*, unavailable)
extension DecryptOnlyLoop: Sendable {}
