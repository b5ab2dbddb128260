// Owns: the Argon2id cost presets of the encrypted file backend.
extension EncryptedFileStore {
    /// The cost of Argon2id (`crypto_pwhash`, ALG_ARGON2ID13) for a passphrase vault.
    ///
    /// The presets are libsodium's. The parameters are recorded in the vault header, so a vault
    /// opens with the cost it was made with.
    public struct KDFParameters: Sendable, Hashable, CustomStringConvertible {
        /// Passes over memory (`opslimit`).
        public var opsLimit: UInt64
        /// Memory in bytes (`memlimit`).
        public var memoryLimit: UInt64

        /// - Precondition: both are within libsodium's bounds (opslimit ≥ 1, memlimit ≥ 8 KiB).
        public init(opsLimit: UInt64, memoryLimit: UInt64) {
            self.opsLimit = opsLimit
            self.memoryLimit = memoryLimit
        }

        /// libsodium's MINIMUM: 1 pass, 8 KiB. Only for tests.
        public static let minimum = KDFParameters(opsLimit: 1, memoryLimit: 8192)
        /// libsodium's INTERACTIVE: 2 passes, 64 MiB.
        public static let interactive = KDFParameters(opsLimit: 2, memoryLimit: 64 << 20)
        /// libsodium's MODERATE: 3 passes, 256 MiB. The default.
        public static let moderate = KDFParameters(opsLimit: 3, memoryLimit: 256 << 20)
        /// libsodium's SENSITIVE: 4 passes, 1 GiB.
        public static let sensitive = KDFParameters(opsLimit: 4, memoryLimit: 1 << 30)

        public var description: String { "Argon2id(opslimit: \(opsLimit), memlimit: \(memoryLimit / 1024) KiB)" }
    }
}
