#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
import TokenVault

extension VaultCommand {
    struct Copy: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "copy",
            abstract: "Copy every entry from one backend to another, all or nothing; the source is left untouched.",
            discussion: """
                Reads every entry of --from (all must read), refuses entries that the \
                destination already holds with another value (unless --overwrite), writes the \
                rest in one batch (one transaction for postgres, one fsync for the file), reads \
                each back and compares. If anything fails, what was written is undone and the \
                destination is as it was. Entries the destination already holds with the same \
                value are left alone, so a second run changes nothing.

                The file vault is the global --file, sealed with the global key; the postgres \
                vault is TOKEN_VAULT_DATABASE_URL, sealed with the global key unless \
                --to-key-file or --to-passphrase-file gives the destination its own.
                """
        )

        enum Side: String, CaseIterable, ExpressibleByArgument {
            case secretService = "secret-service"
            case file
            case postgres

            var backend: VaultConfiguration.Backend {
                switch self {
                case .secretService: .secretService
                case .file: .file
                case .postgres: .postgres
                }
            }
        }

        @OptionGroup var global: GlobalOptions

        @Option(help: ArgumentHelp("The backend to copy from.", valueName: "backend"))
        var from: Side

        @Option(help: ArgumentHelp("The backend to copy to.", valueName: "backend"))
        var to: Side

        @Option(help: ArgumentHelp("A file holding the destination's 32-byte key, if it differs from the global key.", valueName: "path"),
            completion: .file())
        var toKeyFile: String?

        @Option(help: ArgumentHelp("A file holding the destination's passphrase, if it differs from the global key.", valueName: "path"),
            completion: .file())
        var toPassphraseFile: String?

        @Flag(help: "Replace entries the destination holds with other values.")
        var overwrite = false

        func validate() throws {
            guard from != to else { throw ValidationError("--from and --to name the same backend (\(from.rawValue)); nothing to copy.") }
            if toKeyFile != nil && toPassphraseFile != nil {
                throw ValidationError("Give --to-key-file or --to-passphrase-file, not both.")
            }
            try global.validateConfiguration()
        }

        func run() async throws {
            let source = try await open(from, creating: false, keySource: nil)
            let override: VaultConfiguration.KeySource? =
                toKeyFile.map { .keyFile($0) } ?? toPassphraseFile.map { .passphraseFile($0) }
            // 1. Validate: every entry of the source reads.
            var entries: [CredentialWrite] = []
            for key in try await source.keys() {
                guard let secret = try await source.secret(for: key) else {
                    throw VaultError(.notFound, "The entry \(key) vanished from the \(from.rawValue) backend while it was read; nothing was copied.")
                }
                entries.append(CredentialWrite(key: key, secret: secret, contentType: EntryTransfer.contentType(of: secret)))
            }
            let destination = try await open(to, creating: true, keySource: override)
            // 2. Collisions: equal values are already copied; other values need --overwrite.
            // 3. Write, 4. read back and compare; undo on any failure: the engine the migration uses.
            let transfer = EntryTransfer(into: destination, destinationName: "the \(to.rawValue) backend")
            let plan = try await transfer.plan(entries, overwrite: overwrite)
            guard plan.conflicts.isEmpty || overwrite else {
                let shown = plan.conflicts.prefix(5).map(\.description).joined(separator: ", ")
                throw VaultError(
                    .alreadyExists,
                    "The \(to.rawValue) backend already holds \(plan.conflicts.count) of these entries with other values (\(shown)\(plan.conflicts.count > 5 ? ", …" : "")); nothing was copied. Give --overwrite to replace them.")
            }
            try await transfer.apply(plan)
            let written = plan.toWrite.count
            let same = plan.alreadyThere.count
            try Output.note(
                "Copied \(written) \(written == 1 ? "entry" : "entries") from \(from.rawValue) to \(to.rawValue)"
                    + (same > 0 ? "; \(same) already there with the same value" : "") + ". The source is unchanged.")
        }

        /// The configuration of one side: the global options, with the side's backend.
        func configuration(_ side: Side, creating: Bool, keySource: VaultConfiguration.KeySource?) throws -> VaultConfiguration {
            var configuration = try global.configuration()
            configuration.backend = side.backend
            configuration.createIfMissing = creating
            if let keySource { configuration.keySource = keySource }
            return configuration
        }

        private func open(_ side: Side, creating: Bool, keySource: VaultConfiguration.KeySource?) async throws -> Vault {
            let configuration = try configuration(side, creating: creating, keySource: keySource)
            let plan = await BackendPlan.make(for: configuration)
            if plan.usesFile && !creating && !plan.fileExists {
                throw VaultError(.notFound, "There is no vault file at \(plan.filePath) to copy from.")
            }
            return try await Vault.open(configuration, plan: plan)
        }
    }
}
#endif
