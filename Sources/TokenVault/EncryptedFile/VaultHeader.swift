// Owns: the vault header (build, parse, verify) and the keys derived for it.
/// The fixed 168-byte header of a version-1 vault file. See the FileFormat article.
///
/// ```
/// off len field
///   0   8 magic 89 54 56 41 55 4C 54 0A ("\x89TVAULT\n")
///   8   2 format version, u16 LE (1)
///  10   2 header length, u16 LE (168)
///  12   4 prefix check: BLAKE2b-256(bytes 0..<12)[0..<4]
///  16   1 key kind: 1 key file, 2 passphrase (Argon2id13)
///  17   7 reserved, zero
///  24   8 Argon2id opslimit, u64 LE (0 for a key file)
///  32   8 Argon2id memlimit in bytes, u64 LE (0 for a key file)
///  40  16 salt
///  56  16 file id
///  72  32 key check: BLAKE2b-256 keyed with subkey 2 of "TokenVault key check v1" ‖ salt
/// 104  32 header MAC: BLAKE2b-256 keyed with subkey 3 of bytes 0..<104
/// 136  32 header checksum: BLAKE2b-256 (unkeyed) of bytes 0..<136
/// ```
struct VaultHeader: Equatable {
    enum KeyKind: UInt8 {
        case keyFile = 1
        case passphrase = 2
    }

    static let magic: [UInt8] = [0x89, 0x54, 0x56, 0x41, 0x55, 0x4C, 0x54, 0x0A]
    static let currentVersion: UInt16 = 1
    static let length = 168
    static let prefixLength = 16

    var kind: KeyKind
    var opsLimit: UInt64
    var memLimit: UInt64
    var salt: [UInt8]
    var fileID: [UInt8]

    /// The parameters that decide the master key: equal parameters and equal secret give equal keys.
    func sameKeyDerivation(as other: VaultHeader) -> Bool {
        kind == other.kind && opsLimit == other.opsLimit && memLimit == other.memLimit
            && Sodium.constantTimeEqual(salt, other.salt)
    }

    /// A header for a new file (or a rewrite) with a fresh file id.
    static func new(kind: KeyKind, kdf: EncryptedFileStore.KDFParameters?, salt: [UInt8]) -> VaultHeader {
        VaultHeader(
            kind: kind,
            opsLimit: kind == .passphrase ? kdf?.opsLimit ?? 0 : 0,
            memLimit: kind == .passphrase ? kdf?.memoryLimit ?? 0 : 0,
            salt: salt,
            fileID: Sodium.randomBytes(16))
    }

    /// This header with a new file id, as a compaction writes it.
    func withNewFileID() -> VaultHeader {
        var copy = self
        copy.fileID = Sodium.randomBytes(16)
        return copy
    }

    // MARK: Encoding

    func encoded(keys: VaultKeys) -> [UInt8] {
        var bytes = Self.magic
        bytes.appendLE(Self.currentVersion)
        bytes.appendLE(UInt16(Self.length))
        bytes += Sodium.hash(bytes)[0..<4]
        bytes.append(kind.rawValue)
        bytes += [UInt8](repeating: 0, count: 7)
        bytes.appendLE(opsLimit)
        bytes.appendLE(memLimit)
        bytes += salt
        bytes += fileID
        bytes += Self.keyCheck(salt: salt, keys: keys)
        bytes += Sodium.hash(bytes, key: keys.headerKey)
        bytes += Sodium.hash(bytes)
        assert(bytes.count == Self.length)
        return bytes
    }

    static func keyCheck(salt: [UInt8], keys: VaultKeys) -> [UInt8] {
        Sodium.hash(Array("TokenVault key check v1".utf8) + salt, key: keys.keyCheckKey)
    }

    // MARK: Decoding

    /// Parses and checks the structure of a header: everything that needs no key.
    ///
    /// - Throws: `emptyFile`, `truncated`, `notAVault`, `unsupportedVersion` or `integrityFailure`.
    static func parse(_ file: [UInt8], fileSize: Int64, path: String) throws -> VaultHeader {
        if fileSize == 0 {
            throw VaultError(
                .emptyFile,
                "The vault file \(path) is empty (0 bytes). A vault is never empty on disk, so it is not a vault; move it aside or delete it to start a new vault."
            )
        }
        let prefixMatch = zip(file.prefix(magic.count), magic).allSatisfy { $0 == $1 }
        if file.count < prefixLength {
            if prefixMatch {
                throw VaultError(
                    .truncated, "The vault file \(path) ends after \(file.count) bytes, inside its header: it was cut short.")
            }
            throw notAVault(path)
        }
        guard prefixMatch else { throw notAVault(path) }
        guard Sodium.constantTimeEqual(Array(Sodium.hash(Array(file[0..<12]))[0..<4]), Array(file[12..<16])) else {
            throw damaged(path, "its version field is damaged")
        }
        let version = file.readLE(UInt16.self, at: 8)
        guard version == currentVersion else {
            throw VaultError(
                .unsupportedVersion,
                "The vault file \(path) uses format version \(version); this TokenVault reads only version \(currentVersion). Upgrade TokenVault to open it."
            )
        }
        guard Int(file.readLE(UInt16.self, at: 10)) == length else {
            throw damaged(path, "its header length is wrong")
        }
        guard file.count >= length else {
            throw VaultError(
                .truncated, "The vault file \(path) ends after \(file.count) bytes, inside its \(length)-byte header: it was cut short.")
        }
        let checksum = Sodium.hash(Array(file[0..<136]))
        guard Sodium.constantTimeEqual(checksum, Array(file[136..<168])) else {
            throw damaged(path, "its header checksum does not match")
        }
        guard let kind = KeyKind(rawValue: file[16]), file[17..<24].allSatisfy({ $0 == 0 }) else {
            throw damaged(path, "its header holds an unknown key kind")
        }
        let header = VaultHeader(
            kind: kind,
            opsLimit: file.readLE(UInt64.self, at: 24),
            memLimit: file.readLE(UInt64.self, at: 32),
            salt: Array(file[40..<56]),
            fileID: Array(file[56..<72]))
        switch kind {
        case .keyFile:
            guard header.opsLimit == 0, header.memLimit == 0 else { throw damaged(path, "its key parameters are invalid") }
        case .passphrase:
            guard Sodium.opsLimitRange.contains(header.opsLimit), Sodium.memLimitRange.contains(header.memLimit) else {
                throw damaged(path, "its Argon2id parameters are out of range")
            }
        }
        return header
    }

    /// Checks the key against the key-check value, then the header MAC.
    ///
    /// - Throws: `authenticationFailed` for a wrong key or passphrase, `integrityFailure` if the
    ///   key is right but the header was altered.
    static func verify(_ file: [UInt8], keys: VaultKeys, header: VaultHeader, path: String) throws {
        guard Sodium.constantTimeEqual(keyCheck(salt: header.salt, keys: keys), Array(file[72..<104])) else {
            let what = header.kind == .passphrase ? "passphrase" : "key"
            throw VaultError(.authenticationFailed, "The \(what) is wrong for the vault file \(path).")
        }
        guard Sodium.constantTimeEqual(Sodium.hash(Array(file[0..<104]), key: keys.headerKey), Array(file[104..<136])) else {
            throw damaged(path, "its header was altered")
        }
    }

    static func notAVault(_ path: String) -> VaultError {
        VaultError(.notAVault, "The file \(path) is not a TokenVault vault file (its first bytes are not the vault signature).")
    }

    static func damaged(_ path: String, _ detail: String) -> VaultError {
        VaultError(
            .integrityFailure,
            "The vault file \(path) is damaged or was tampered with: \(detail). Restore it from a backup.")
    }
}

/// The master key and the subkeys derived from it with `crypto_kdf_derive_from_key`.
final class VaultKeys: Sendable {
    enum Purpose: UInt64 {
        case record = 1
        case keyCheck = 2
        case header = 3
    }

    let master: SecretBytes
    let recordKey: SecretBytes
    let keyCheckKey: SecretBytes
    let headerKey: SecretBytes

    init(master: SecretBytes) throws {
        self.master = master
        recordKey = try Sodium.deriveSubkey(from: master, id: Purpose.record.rawValue)
        keyCheckKey = try Sodium.deriveSubkey(from: master, id: Purpose.keyCheck.rawValue)
        headerKey = try Sodium.deriveSubkey(from: master, id: Purpose.header.rawValue)
    }

    /// Derives the master key for `header` from `secret`: Argon2id for a passphrase, the key
    /// itself for a key file. Runs the KDF; call it once per open.
    static func derive(from secret: KeyMaterial.Secret, header: VaultHeader, path: String) throws -> VaultKeys {
        switch (secret, header.kind) {
        case (.key(let key), .keyFile):
            return try VaultKeys(master: key)
        case (.passphrase(let passphrase), .passphrase):
            guard Sodium.opsLimitRange.contains(header.opsLimit), Sodium.memLimitRange.contains(header.memLimit) else {
                throw VaultError(
                    .invalidInput,
                    "The Argon2id parameters (opslimit \(header.opsLimit), memlimit \(header.memLimit) bytes) are outside libsodium's bounds (opslimit ≥ 1, memlimit ≥ 8 KiB)."
                )
            }
            return try VaultKeys(
                master: Sodium.argon2id(
                    passphrase: passphrase, salt: header.salt, opsLimit: header.opsLimit, memLimit: header.memLimit))
        case (.key, .passphrase):
            throw VaultError(
                .authenticationFailed, "The vault file \(path) is locked with a passphrase, but a key file was given.")
        case (.passphrase, .keyFile):
            throw VaultError(
                .authenticationFailed, "The vault file \(path) is locked with a key file, but a passphrase was given.")
        }
    }
}

extension Array where Element == UInt8 {
    mutating func appendLE<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.littleEndian) { append(contentsOf: $0) }
    }

    func readLE<T: FixedWidthInteger>(_ type: T.Type, at offset: Int) -> T {
        var value: T = 0
        for index in (0..<MemoryLayout<T>.size).reversed() {
            value = value << 8 | T(self[offset + index])
        }
        return value
    }
}
