#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
import TokenVault

internal import TokenVaultSystem

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
            if (try? global.configuration())?.backend == .secretService {
                throw ValidationError("rekey applies to the encrypted file backend; the Secret Service has no key of ours to change.")
            }
            // Here, not in run(), so that the usage shown is rekey's own.
            if newKeyFile == nil, newPassphraseFile == nil {
                guard let terminal = Terminal.openControllingTerminal() else {
                    throw ValidationError("Give --new-key-file or --new-passphrase-file, or run at a terminal to type a new passphrase.")
                }
                SystemCall.closeAfterUse(terminal)
            }
        }

        func run() async throws {
            var configuration = try global.configuration()
            // Only a store sealed with a key of ours can be rekeyed: `auto` means the file here.
            if configuration.backend == .auto { configuration.backend = .file }
            configuration.createIfMissing = false
            let plan = await BackendPlan.make(for: configuration)
            if plan.usesFile && !plan.fileExists {
                throw VaultError(.notFound, "There is no vault file at \(plan.filePath) to rekey.")
            }
            let place = plan.location ?? plan.filePath
            let newSource = try newKeySource(for: place)
            let vault = try await configuration.backend == .file
                ? global.openVault(forcingFile: true, createIfMissing: false) : Vault.open(configuration, plan: plan)
            guard let store = vault.store as? any RekeyableStore else {
                throw VaultError(.backendUnavailable, "rekey needs a backend sealed with a key of ours: the encrypted file or postgres.")
            }
            let count = try await store.rekeyAll(to: newSource, kdf: kdf?.parameters)
            let what = plan.location.map { "the \(vault.selection.backend) vault \($0)" } ?? place
            try Output.note("Rekeyed \(what) (\(count) \(count == 1 ? "entry" : "entries")) to the \(newSource).")
        }

        private func newKeySource(for path: String) throws -> VaultConfiguration.KeySource {
            if let newKeyFile { return .keyFile(newKeyFile) }
            if let newPassphraseFile { return .passphraseFile(newPassphraseFile) }
            guard let terminal = Terminal.openControllingTerminal() else {
                throw ValidationError("Give --new-key-file or --new-passphrase-file, or run at a terminal to type a new passphrase.")
            }
            defer { SystemCall.closeAfterUse(terminal) }
            let passphrase = try Terminal.readNewPassphrase(
                prompt: "New passphrase for \(path): ", repeatPrompt: "Repeat the new passphrase: ",
                ifTheyDiffer: "the vault was not changed", terminal: terminal)
            return .passphrase(passphrase)
        }
    }
}
#endif
