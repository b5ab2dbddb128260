// Owns: the limits an existing vault's header must keep to before its KDF runs (memory and
// passes), and how those figures are written in messages.
extension VaultFile {
    /// Refuses a header that asks Argon2id for more memory or time than `options` allow: its
    /// checksum is unkeyed, so an edited header could ask for gigabytes or 2^32 passes.
    static func checkKDFCost(_ header: VaultHeader, options: EncryptedFileStore.Options, path: String) throws {
        guard header.kind == .passphrase else { return }
        guard header.memLimit <= options.maximumKDFMemoryLimit else {
            throw VaultError(
                .invalidInput,
                "The vault file \(path) asks Argon2id for \(Self.memory(header.memLimit)) of memory, more than the \(Self.memory(options.maximumKDFMemoryLimit)) this process allows (Options.maximumKDFMemoryLimit)."
            )
        }
        guard header.opsLimit <= options.maximumKDFOpsLimit else {
            throw VaultError(
                .invalidInput,
                "The vault file \(path) asks Argon2id for \(header.opsLimit) passes, more than the \(options.maximumKDFOpsLimit) this process allows (Options.maximumKDFOpsLimit)."
            )
        }
    }

    /// `n MiB`, or the exact bytes when that would round (so two different limits never read alike).
    static func memory(_ bytes: UInt64) -> String {
        bytes % 1_048_576 == 0 ? "\(bytes / 1_048_576) MiB" : "\(bytes) bytes"
    }
}
