import ArgumentParser
import Foundation
import TokenVault

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension VaultCommand {
    struct Rekey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rekey",
            abstract: "Change the key or passphrase of an encrypted file vault or a PostgreSQL vault.",
            discussion: """
                Opens the vault with the current key (the global --key-file or \
                --passphrase-file, or a passphrase typed at the terminal) and rewrites the whole \
                file atomically under the new one: a temporary file in the same directory, \
                fsync, rename. If anything fails, the old file stays as it was. With neither \
                --new-key-file nor --new-passphrase-file, the new passphrase is asked for twice \
                at the terminal. With --backend postgres, every row is sealed again in one \
                transaction. The Secret Service has no key of ours to change.
                """
        )

        @OptionGroup var global: GlobalOptions

        @Option(help: ArgumentHelp("A file holding the new 32-byte key (raw, hex or base64).", valueName: "path"),
            completion: .file())
        var newKeyFile: String?

        @Option(help: ArgumentHelp("A file holding the new passphrase.", valueName: "path"), completion: .file())
        var newPassphraseFile: String?

        @Option(help: ArgumentHelp("Argon2id cost for a new passphrase (default moderate).", valueName: "cost"))
        var kdf: KDFCost?

        func validate() throws {
            if newKeyFile != nil && newPassphraseFile != nil {
                throw ValidationError("Give --new-key-file or --new-passphrase-file, not both.")
            }
            if kdf != nil, newKeyFile != nil {
                throw ValidationError("--kdf applies to a new passphrase, not to a key file.")
            }
            if !global.usesPostgres(), (try? global.configuration())?.backend == .secretService {
                throw ValidationError("rekey applies to the encrypted file backend; the Secret Service has no key of ours to change.")
            }
            // Here, not in run(), so that the usage shown is rekey's own.
            if newKeyFile == nil, newPassphraseFile == nil {
                guard let terminal = Terminal.openControllingTerminal() else {
                    throw ValidationError("Give --new-key-file or --new-passphrase-file, or run at a terminal to type a new passphrase.")
                }
                close(terminal)
            }
        }

        func run() async throws {
            if global.usesPostgres() {
                // Every row sealed again in one transaction (PostgresStore.rekey).
                let store = try await global.openPostgres(createIfMissing: false)
                let newSource = try newKeySource(for: store.location)
                let count = try await store.rekey(to: newSource, kdf: kdf?.parameters)
                try Output.note("Rekeyed the PostgreSQL vault \(store.location) (\(count) \(count == 1 ? "entry" : "entries")) to the \(newSource).")
                return
            }
            var configuration = try global.configuration()
            configuration.backend = .file
            let path = configuration.resolvedFilePath
            guard FileManager.default.fileExists(atPath: path) else {
                throw VaultError(.notFound, "There is no vault file at \(path) to rekey.")
            }
            let newSource = try newKeySource(for: path)
            let vault = try await global.openVault(forcingFile: true, createIfMissing: false)
            guard let store = vault.store as? EncryptedFileStore else {
                throw VaultError(.backendUnavailable, "rekey needs the encrypted file backend.")
            }
            try await store.rekey(to: newSource, kdf: kdf?.parameters)
            let count = try await store.keys().count
            try Output.note("Rekeyed \(path) (\(count) \(count == 1 ? "entry" : "entries")) to the \(newSource).")
        }

        private func newKeySource(for path: String) throws -> VaultConfiguration.KeySource {
            if let newKeyFile { return .keyFile(newKeyFile) }
            if let newPassphraseFile { return .passphraseFile(newPassphraseFile) }
            guard let terminal = Terminal.openControllingTerminal() else {
                throw ValidationError("Give --new-key-file or --new-passphrase-file, or run at a terminal to type a new passphrase.")
            }
            defer { SystemCall.close(terminal) }
            let passphrase = try Terminal.readNewPassphrase(
                prompt: "New passphrase for \(path): ", repeatPrompt: "Repeat the new passphrase: ",
                ifTheyDiffer: "the vault was not changed", terminal: terminal)
            return .passphrase(passphrase)
        }
    }
}
