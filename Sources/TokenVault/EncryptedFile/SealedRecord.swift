// Owns: the record frame and plaintext layout (encode, decode, associated data).
/// Where one record of the log lies in the vault file, and its sequence number: what the
/// in-memory index keeps of it (its bytes stay in the file until a lookup reads them).
///
/// A frame on disk is
///
/// ```
/// off len field
///   0   4 L: length of what follows the 8-byte frame header, u32 LE (nonce + ciphertext + tag)
///   4   4 ~L: the bitwise complement of L, so a damaged length is told apart from a torn tail
///   8  24 XChaCha20-Poly1305 nonce, random
///  32 L-40 ciphertext
/// L-8 16 Poly1305 tag
/// ```
///
/// sealed with the record subkey and the associated data `"TVR1" ‖ file id ‖ sequence (u64 LE) ‖ L ‖ ~L`.
/// The plaintext is
///
/// ```
///   0   1 operation: 1 put, 2 delete; bit 0x80 set when more records of the same batch follow
///   1   2 service length S, u16 LE
///   3   2 account length A, u16 LE
///   5   4 secret length N, u32 LE (0 for a delete)
///   9   S service, UTF-8 (NFC)
/// 9+S   A account, UTF-8 (NFC)
/// 9+S+A N secret
/// ```
struct SealedRecord {
    enum Operation: UInt8 {
        case put = 1
        case delete = 2
    }

    static let batchContinues: UInt8 = 0x80
    static let frameHeaderLength = 8
    static let plaintextHeaderLength = 9
    /// Frame header, nonce and tag.
    static let overhead = frameHeaderLength + Sodium.aeadNonceBytes + Sodium.aeadTagBytes
    /// The largest secret the file backend stores.
    static let maximumSecretSize = 4 * 1024 * 1024
    static let minimumSealedLength = Sodium.aeadNonceBytes + plaintextHeaderLength + 2 + Sodium.aeadTagBytes
    static let maximumSealedLength =
        Sodium.aeadNonceBytes + plaintextHeaderLength + 2 * CredentialKey.maximumPartLength + maximumSecretSize
        + Sodium.aeadTagBytes

    /// The record's place in the log: its index since the file's header.
    let sequence: UInt64
    /// The file offset of its frame (length, complement, nonce, ciphertext and tag).
    let offset: Int64
    /// The length of its frame, header included.
    let count: UInt32

    /// The plaintext length of a frame of `frameCount` bytes.
    static func plaintextCount(frameCount: Int) -> Int { frameCount - overhead }

    /// The associated data that binds a record to its vault file and to its place in it:
    /// `"TVR1" ‖ file id (16) ‖ sequence (u64 LE) ‖ frame header (8)`.
    static func associatedData(fileID: [UInt8], sequence: UInt64, frameHeader: UnsafeRawBufferPointer) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: associatedDataLength) { buffer, count in
            writeAssociatedData(
                fileID: fileID, sequence: sequence, frameHeader: frameHeader, into: UnsafeMutableRawBufferPointer(buffer))
            count = associatedDataLength
        }
    }

    static let associatedDataLength = 4 + 16 + 8 + frameHeaderLength

    static func writeAssociatedData(
        fileID: [UInt8], sequence: UInt64, frameHeader: UnsafeRawBufferPointer, into ad: UnsafeMutableRawBufferPointer
    ) {
        precondition(ad.count == associatedDataLength && fileID.count == 16 && frameHeader.count == frameHeaderLength)
        ad.storeBytes(of: UInt32(0x3152_5654).littleEndian, toByteOffset: 0, as: UInt32.self)  // "TVR1"
        fileID.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: ad[4..<20]).copyMemory(from: $0) }
        ad.storeBytes(of: sequence.littleEndian, toByteOffset: 20, as: UInt64.self)
        UnsafeMutableRawBufferPointer(rebasing: ad[28..<36]).copyMemory(from: frameHeader)
    }

    /// Where the secret lies in an opened plaintext, without decoding the names.
    static func secretRange(_ plaintext: UnsafeRawBufferPointer) -> Range<Int>? {
        guard let secretStart = namesEnd(plaintext), secretStart <= plaintext.count else { return nil }
        return secretStart..<plaintext.count
    }

    /// Writes the plaintext of a record into `buffer`, which holds exactly `plaintextCount(...)` bytes.
    static func encodePlaintext(
        operation: Operation, continues: Bool, key: CredentialKey, secret: UnsafeRawBufferPointer,
        into buffer: UnsafeMutableRawBufferPointer
    ) {
        let service = Array(key.service.utf8)
        let account = Array(key.account.utf8)
        buffer[0] = operation.rawValue | (continues ? batchContinues : 0)
        buffer.storeBytes(of: UInt16(service.count).littleEndian, toByteOffset: 1, as: UInt16.self)
        buffer.storeBytes(of: UInt16(account.count).littleEndian, toByteOffset: 3, as: UInt16.self)
        buffer.storeBytes(of: UInt32(secret.count).littleEndian, toByteOffset: 5, as: UInt32.self)
        var offset = plaintextHeaderLength
        for part in [service, account] {
            part.withUnsafeBytes { bytes in
                UnsafeMutableRawBufferPointer(rebasing: buffer[offset..<offset + bytes.count]).copyMemory(from: bytes)
            }
            offset += part.count
        }
        if secret.count > 0 {
            UnsafeMutableRawBufferPointer(rebasing: buffer[offset...]).copyMemory(from: secret)
        }
    }

    static func plaintextCount(key: CredentialKey, secretCount: Int) -> Int {
        plaintextHeaderLength + key.service.utf8.count + key.account.utf8.count + secretCount
    }

    /// The parts of an opened plaintext, or `nil` if its structure is invalid.
    struct Opened {
        var operation: Operation
        var continues: Bool
        var key: CredentialKey
        /// Where the secret lies in the plaintext.
        var secretRange: Range<Int>
    }

    /// `nil` for an unknown operation, lengths that do not add up, a name that is empty, longer
    /// than ``CredentialKey/maximumPartLength`` or not UTF-8, or a delete with a secret.
    static func decodePlaintext(_ plaintext: UnsafeRawBufferPointer) -> Opened? {
        decodePlaintext(prefix: plaintext, count: plaintext.count)
    }

    /// Where the names of a plaintext whose first bytes are `prefix` end (the secret's start), or
    /// `nil` if `prefix` is shorter than the plaintext header.
    static func namesEnd(_ prefix: UnsafeRawBufferPointer) -> Int? {
        guard prefix.count >= plaintextHeaderLength else { return nil }
        let serviceCount = Int(UInt16(littleEndian: prefix.loadUnaligned(fromByteOffset: 1, as: UInt16.self)))
        let accountCount = Int(UInt16(littleEndian: prefix.loadUnaligned(fromByteOffset: 3, as: UInt16.self)))
        return plaintextHeaderLength + serviceCount + accountCount
    }

    /// ``decodePlaintext(_:)`` of a plaintext of `count` bytes of which only the first, `prefix`,
    /// were decrypted: the header and the names must lie in them, the secret need not.
    static func decodePlaintext(prefix plaintext: UnsafeRawBufferPointer, count: Int) -> Opened? {
        guard plaintext.count >= plaintextHeaderLength, plaintext.count <= count,
            let operation = Operation(rawValue: plaintext[0] & ~batchContinues)
        else { return nil }
        let serviceCount = Int(UInt16(littleEndian: plaintext.loadUnaligned(fromByteOffset: 1, as: UInt16.self)))
        let accountCount = Int(UInt16(littleEndian: plaintext.loadUnaligned(fromByteOffset: 3, as: UInt16.self)))
        let secretCount = Int(UInt32(littleEndian: plaintext.loadUnaligned(fromByteOffset: 5, as: UInt32.self)))
        let secretStart = plaintextHeaderLength + serviceCount + accountCount
        let names = 1...CredentialKey.maximumPartLength
        guard names.contains(serviceCount), names.contains(accountCount), secretStart + secretCount == count,
            secretStart <= plaintext.count, operation == .put || secretCount == 0
        else { return nil }
        // Names are taken as they were written: invalid UTF-8 is malformed, not repaired. A repair
        // would rename the entry on the next compaction, and can triple a name's length past
        // what the u16 length field holds (a trap when the record is sealed again).
        guard
            let service = name(UnsafeRawBufferPointer(rebasing: plaintext[plaintextHeaderLength..<plaintextHeaderLength + serviceCount])),
            let account = name(UnsafeRawBufferPointer(rebasing: plaintext[plaintextHeaderLength + serviceCount..<secretStart]))
        else { return nil }
        return Opened(
            operation: operation, continues: plaintext[0] & batchContinues != 0,
            key: CredentialKey(trustedService: service, account: account),
            secretRange: secretStart..<count)
    }
}

extension SealedRecord {
    /// A name as written, or `nil` if it is not valid UTF-8. ASCII, the usual case, takes a fast
    /// path: opening a large vault decodes two names per record.
    fileprivate static func name(_ bytes: UnsafeRawBufferPointer) -> String? {
        let utf8 = bytes.assumingMemoryBound(to: UInt8.self)
        var ascii = true
        for byte in utf8 where byte >= 0x80 {
            ascii = false
            break
        }
        return ascii ? String(decoding: utf8, as: UTF8.self) : String(validating: utf8, as: UTF8.self)
    }
}

extension CredentialKey {
    /// A key read back from an authenticated record: it was validated and normalised when it
    /// was written, so it is not checked again (this keeps opening a large vault fast).
    init(trustedService service: String, account: String) {
        self.service = service
        self.account = account
    }
}
