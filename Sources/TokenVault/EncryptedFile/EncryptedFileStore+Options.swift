// Owns: the options an encrypted vault file is opened with.
extension EncryptedFileStore {
    /// How to open an encrypted vault file.
    public struct Options: Sendable {
        /// Accept a vault, key or passphrase file that group or others can access. Off by default,
        /// as ssh does with private keys.
        public var allowInsecurePermissions: Bool
        /// Create the vault file (`0600`) and its directory (`0700`) if they do not exist. On by default.
        public var createIfMissing: Bool
        /// The Argon2id cost used when a passphrase vault is created or rekeyed. An existing
        /// vault always uses the cost recorded in its header. Default: ``KDFParameters/moderate``.
        public var kdf: KDFParameters
        /// The most memory an existing vault's header may ask Argon2id to use. A header asking
        /// more is refused with `invalidInput` rather than allocated. Default: 1 GiB.
        public var maximumKDFMemoryLimit: UInt64
        /// The most Argon2id passes (opslimit) an existing vault's header may ask for. A header
        /// asking more is refused with `invalidInput` rather than run for minutes or hours.
        /// Default: 32 (libsodium's SENSITIVE is 4).
        public var maximumKDFOpsLimit: UInt64
        /// Compaction runs when dead records outweigh live ones and amount to at least this many
        /// bytes. Default: 64 KiB.
        public var compactionMinimumDeadBytes: Int
        /// The longest an operation waits for the vault's lock file (`<vault>.lock`) while another
        /// process holds it. Past it, the operation fails with `timeout`, naming the lock file and,
        /// where `/proc/locks` tells, the PID of the holder. Default: 10 seconds.
        public var lockTimeout: Duration

        public init(
            allowInsecurePermissions: Bool = false,
            createIfMissing: Bool = true,
            kdf: KDFParameters = .moderate,
            maximumKDFMemoryLimit: UInt64 = 1 << 30,
            maximumKDFOpsLimit: UInt64 = 32,
            compactionMinimumDeadBytes: Int = 64 * 1024,
            lockTimeout: Duration = .seconds(10)
        ) {
            self.allowInsecurePermissions = allowInsecurePermissions
            self.createIfMissing = createIfMissing
            self.kdf = kdf
            self.maximumKDFMemoryLimit = maximumKDFMemoryLimit
            self.maximumKDFOpsLimit = maximumKDFOpsLimit
            self.compactionMinimumDeadBytes = compactionMinimumDeadBytes
            self.lockTimeout = lockTimeout
        }
    }
}
