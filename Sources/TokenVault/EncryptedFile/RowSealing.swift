// Owns: the file vault's record crypto, offered (with `package` access) to the package's other
// sealed backends, such as TokenVaultPostgres. Nothing here is public, and no crypto is
// duplicated: keys come from KeyMaterial and VaultKeys, records are SealedRecord plaintexts sealed
// with Sodium's XChaCha20-Poly1305, exactly as in the file.
package import FoundationEssentials
internal import Synchronization

/// A key or passphrase read from a ``VaultConfiguration/KeySource``, in secure memory.
package struct RowSealingSecret: Sendable {
    let secret: KeyMaterial.Secret

    /// Reads the key file or passphrase file behind `source` (its permissions checked as the file
    /// vault checks them).
    package static func load(_ source: VaultConfiguration.KeySource, allowInsecurePermissions: Bool) throws -> RowSealingSecret {
        RowSealingSecret(secret: try KeyMaterial.load(source, allowInsecurePermissions: allowInsecurePermissions))
    }

    /// Whether this is a passphrase (stretched with Argon2id) rather than a 32-byte key.
    package var isPassphrase: Bool {
        if case .passphrase = secret { return true }
        return false
    }

    /// Lends the raw bytes (a key, or a passphrase as read) to `body`; for a password file read
    /// with the same checks. Do not let them escape.
    package func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        switch secret {
        case .key(let bytes), .passphrase(let bytes): try bytes.withUnsafeBytes(body)
        }
    }

    /// Refuses a passphrase too short for a new vault (a key passes), as the file vault does.
    package func checkNewPassphrase(rekeying: Bool = false) throws {
        try KeyMaterial.checkNewPassphrase(secret, rekeying: rekeying)
    }
}

extension KeyMaterial.Secret: @unchecked Sendable {}  // holds only SecretBytes, which are immutable and Sendable

/// The keys of one sealed vault and the operations on its rows: keyed hashes of names, the key
/// check, the header MAC, and sealing and opening of records.
///
/// Subkeys of the master key (`crypto_kdf_derive_from_key`, context `TokVault`): 1 records,
/// 2 key check, 3 header (as in the file vault), 4 row hashes, 5 service hashes.
///
/// The hashes of names are scoped to one vault when a `hashScope` (its vault id) is given: two
/// vaults sealed with the same key file then hash the same name differently, so nobody who reads
/// both tables can tell which entries they share. Without a scope (vaults made before scoping),
/// the hashes depend on the key alone.
package final class RowSealingKeys: Sendable {
    private let keys: VaultKeys
    private let rowHashKey: SecretBytes
    private let serviceHashKey: SecretBytes
    /// `[]` for unscoped (version 1) hashes, else the vault id the hashes are bound to.
    private let hashScope: [UInt8]
    /// Secure scratch memory for plaintexts, reused: a new `sodium_malloc` buffer (guard pages,
    /// `mlock`) costs half a dozen system calls, which a read served from PostgresStore's cache
    /// would otherwise pay on every hit. Each buffer is wiped after every use.
    private let scratch = ScratchPool()

    /// The size of a salt, of a keyed hash, and of the sealing overhead (nonce and tag).
    package static let saltBytes = Sodium.saltBytes
    package static let hashBytes = 32
    package static let sealingOverhead = Sodium.aeadNonceBytes + Sodium.aeadTagBytes
    /// The largest secret a sealed record carries (4 MiB, as in the file vault).
    package static let maximumSecretSize = SealedRecord.maximumSecretSize
    /// The longest sealed record (the largest secret and the longest names, sealed).
    package static let maximumSealedLength = SealedRecord.maximumSealedLength
    /// libsodium's bounds for Argon2id.
    package static var opsLimitRange: ClosedRange<UInt64> { Sodium.opsLimitRange }
    package static var memLimitRange: ClosedRange<UInt64> { Sodium.memLimitRange }

    /// The keys for `secret`: the key itself, or Argon2id of the passphrase with `salt` and the
    /// given cost (which the caller has checked against its limits).
    ///
    /// - Throws: `authenticationFailed` when the vault was made with the other kind of secret.
    package init(
        secret: RowSealingSecret, passphraseVault: Bool, salt: [UInt8], opsLimit: UInt64, memLimit: UInt64, vaultName: String,
        hashScope: [UInt8]
    ) throws {
        switch (secret.secret, passphraseVault) {
        case (.key(let key), false):
            keys = try VaultKeys(master: key)
        case (.passphrase(let passphrase), true):
            guard Sodium.opsLimitRange.contains(opsLimit), Sodium.memLimitRange.contains(memLimit) else {
                throw VaultError(
                    .integrityFailure,
                    "The Argon2id parameters of \(vaultName) (opslimit \(opsLimit), memlimit \(memLimit) bytes) are outside libsodium's bounds; its header is damaged.")
            }
            keys = try VaultKeys(master: Sodium.argon2id(passphrase: passphrase, salt: salt, opsLimit: opsLimit, memLimit: memLimit))
        case (.key, true):
            throw VaultError(.authenticationFailed, "\(vaultName) is locked with a passphrase, but a key file was given.")
        case (.passphrase, false):
            throw VaultError(.authenticationFailed, "\(vaultName) is locked with a key file, but a passphrase was given.")
        }
        rowHashKey = try Sodium.deriveSubkey(from: keys.master, id: 4)
        serviceHashKey = try Sodium.deriveSubkey(from: keys.master, id: 5)
        self.hashScope = hashScope
    }

    package static func randomBytes(_ count: Int) -> [UInt8] { Sodium.randomBytes(count) }
    package static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool { Sodium.constantTimeEqual(a, b) }

    /// The key-check value: BLAKE2b keyed with subkey 2 of `"TokenVault key check v1" ‖ salt`,
    /// the file vault's. Equal for the right key, different for any other.
    package func keyCheck(salt: [UInt8]) -> [UInt8] {
        VaultHeader.keyCheck(salt: salt, keys: keys)
    }

    /// BLAKE2b keyed with subkey 3 (the header subkey) of `bytes`.
    package func headerMAC(_ bytes: [UInt8]) -> [UInt8] {
        Sodium.hash(bytes, key: keys.headerKey)
    }

    /// The row's keyed hash: BLAKE2b keyed with subkey 4 of
    /// `"TVK1" ‖ service length (u16 LE) ‖ service ‖ account` (UTF-8, NFC), or with a scope
    /// `"TVK2" ‖ vault id (16) ‖ …` likewise.
    package func rowHash(_ key: CredentialKey) -> [UInt8] {
        var input = hashScope.isEmpty ? Array("TVK1".utf8) : Array("TVK2".utf8) + hashScope
        let service = Array(key.service.utf8)
        input.appendLE(UInt16(service.count))
        input += service
        input += Array(key.account.utf8)
        return Sodium.hash(input, key: rowHashKey)
    }

    /// The service's keyed hash: BLAKE2b keyed with subkey 5 of `"TVS1" ‖ service`, or with a
    /// scope `"TVS2" ‖ vault id (16) ‖ service`.
    package func serviceHash(_ service: String) -> [UInt8] {
        let prefix = hashScope.isEmpty ? Array("TVS1".utf8) : Array("TVS2".utf8) + hashScope
        return Sodium.hash(prefix + Array(service.utf8), key: serviceHashKey)
    }

    /// Seals a put record of `key` and `secret` (the file vault's plaintext layout) with the
    /// record subkey and `associatedData`: `nonce ‖ ciphertext ‖ tag`. The plaintext exists only
    /// in secure memory, wiped afterwards.
    package func seal(_ key: CredentialKey, secret: Data, associatedData: [UInt8]) throws -> [UInt8] {
        let count = SealedRecord.plaintextCount(key: key, secretCount: secret.count)
        return try scratch.withBytes(count: count) { plaintext in
            secret.withUnsafeBytes { bytes in
                SealedRecord.encodePlaintext(operation: .put, continues: false, key: key, secret: bytes, into: plaintext)
            }
            var output: [UInt8] = []
            output.reserveCapacity(count + Self.sealingOverhead)
            Sodium.seal(UnsafeRawBufferPointer(plaintext), associatedData: associatedData, key: keys.recordKey, appendingTo: &output)
            return output
        }
    }

    /// Opens what ``seal(_:secret:associatedData:)`` made. `nil` when authentication fails (a
    /// wrong key, other associated data, a flipped byte) or the plaintext is malformed.
    package func open(_ sealed: [UInt8], associatedData: [UInt8]) throws -> (key: CredentialKey, secret: Data)? {
        guard sealed.count >= Self.sealingOverhead + SealedRecord.plaintextHeaderLength else { return nil }
        let count = sealed.count - Self.sealingOverhead
        return try scratch.withBytes(count: count) { plaintext in
            let opened = sealed.withUnsafeBytes { sealedBytes in
                associatedData.withUnsafeBytes { ad in
                    Sodium.open(sealedBytes, associatedData: ad, key: keys.recordKey, into: plaintext)
                }
            }
            guard opened == count,
                let record = SealedRecord.decodePlaintext(UnsafeRawBufferPointer(plaintext)),
                record.operation == .put, !record.continues
            else { return nil }
            return (record.key, Data(plaintext[record.secretRange]))
        }
    }
}

/// A few ``SecureBuffer``s lent out one caller at a time: a caller takes one (or makes one when
/// all are lent), uses it, and gives it back wiped. At most ``kept`` stay allocated; a buffer that
/// grew past ``keptCapacity`` (a large secret) is freed instead of kept.
private final class ScratchPool: Sendable {
    /// The buffers not lent out; a buffer taken from here is used by one caller until given back.
    private let idle = Mutex<[SecureBuffer]>([])
    private static let kept = 4
    private static let keptCapacity = 64 * 1024

    func withBytes<Result>(count: Int, _ body: (UnsafeMutableRawBufferPointer) throws -> Result) throws -> Result {
        let taken = idle.withLock { $0.popLast() }
        let buffer = try taken ?? SecureBuffer(capacity: max(count, 1024))
        defer {
            if buffer.capacity <= Self.keptCapacity {
                idle.withLock { if $0.count < Self.kept { $0.append(buffer) } }
            }
        }
        // SecureBuffer.withBytes wipes the bytes it lent before it returns.
        return try buffer.withBytes(count: count, body)
    }
}

extension Array where Element == UInt8 {
    /// Appends `value` in little-endian order (for associated data built by other modules).
    package mutating func appendLittleEndian<T: FixedWidthInteger>(_ value: T) {
        appendLE(value)
    }
}
