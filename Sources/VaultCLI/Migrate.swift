#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
package import TokenVault
import Synchronization

extension VaultCommand {
    struct Migrate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "migrate",
            abstract: "Move OAuth tokens out of a plain UserDefaults plist into the vault.",
            discussion: """
                Finds token values in the plist (string keys such as accessToken and refreshToken, \
                or a JSON or plist token model stored as Data), writes them to the vault as one \
                token, reads them back, and only then rewrites the plist without them: atomically, \
                in the same format, with the same permissions and every other key unchanged. If \
                any step fails, the vault is rolled back and the plist is left as it was. Running \
                it again finds nothing and changes nothing.

                --domain NAME reads the plist UserDefaults keeps for NAME: \
                $XDG_CONFIG_HOME/NAME.plist (default ~/.config) on Linux, \
                ~/Library/Preferences/NAME.plist on macOS. Quit the app that owns the domain first.
                """
        )

        @OptionGroup var global: GlobalOptions

        @Option(help: ArgumentHelp("The plist file to migrate.", valueName: "path"), completion: .file(extensions: ["plist"]))
        var plist: String?

        @Option(help: ArgumentHelp("The defaults domain (suite name) whose plist to migrate.", valueName: "name"))
        var domain: String?

        @Option(help: "The vault service for the token (default: the domain, or the plist's name without .plist).")
        var service: String?

        @Option(help: "The vault account for the token.")
        var account: String = CredentialKey.defaultAccount

        @Option(name: .customLong("key"), help: ArgumentHelp(
            "Take exactly this plist key (repeat for the keys of one token) instead of detecting them.", valueName: "name"))
        var keys: [String] = []

        @Flag(help: "Replace a different token already stored under the same service and account.")
        var overwrite = false

        @Flag(help: "Copy the tokens into the vault but leave the plist as it is.")
        var keepSource = false

        @Flag(help: "Show what would happen, with values redacted, and change nothing.")
        var dryRun = false

        @Flag(help: "Print the report as JSON.")
        var json = false

        func validate() throws {
            try global.validateConfiguration()
            switch (plist, domain) {
            case (nil, nil): throw ValidationError("Give the plist to migrate with --plist PATH or --domain NAME.")
            case (_?, _?): throw ValidationError("Give --plist or --domain, not both.")
            default: break
            }
            // `vault` has no migrator and hands the command over to `vault-full`, which checks it.
            if let domain, let migrator = DefaultsMigrators.current {
                do { _ = try migrator.plistPath(forDomain: domain) } catch let error as VaultError {
                    throw ValidationError(error.message)
                }
            }
            do {
                _ = try CredentialKey(service: service ?? "placeholder", account: account)
            } catch let error as VaultError {
                throw ValidationError(error.message)
            }
            if keys.contains(where: \.isEmpty) { throw ValidationError("--key must name a key.") }
        }

        func run() async throws {
            guard let migrator = DefaultsMigrators.current else {
                // BackendHandoff hands `migrate` over before it runs.
                throw VaultError(.backendUnavailable, "vault migrate is served by vault-full, which this program could not hand it to.")
            }
            let path = try plist ?? migrator.plistPath(forDomain: domain!)
            let request = MigrationRequest(
                plist: path, service: service ?? domain, account: account, keys: keys.isEmpty ? nil : keys, overwrite: overwrite,
                removeSource: !keepSource, dryRun: dryRun)
            let vault: Vault
            switch try await global.openExistingVault() {
            case .opened(let opened, _):
                vault = opened
            case .noVaultYet:
                // No vault yet, so nothing in it to collide with: plan against an empty one in
                // memory. A dry run, a plist with no tokens or one that fails validation then
                // ends here, and no vault file is created for nothing.
                var plan = request
                plan.dryRun = true
                let outcome = try await migrator.migrate(plan, into: Vault(store: MemoryStore(), reason: "no vault yet"))
                if request.dryRun || outcome.isEmpty {
                    try show(outcome)
                    return
                }
                vault = try await global.openVault()
            }
            try show(try await migrator.migrate(request, into: vault))
        }

        private func show(_ outcome: MigrationOutcome) throws {
            for warning in outcome.warnings { try Output.warning(warning) }
            if json {
                try Output.json(encoding: outcome.report)
            } else {
                try Output.line(outcome.text)
            }
        }
    }
}

/// What `vault migrate` asks of the migrator.
package struct MigrationRequest: Sendable {
    /// The plist file.
    package var plist: String
    package var service: String?
    package var account: String
    /// The plist keys to take, or nil to detect them.
    package var keys: [String]?
    package var overwrite: Bool
    package var removeSource: Bool
    package var dryRun: Bool
}

/// What the migrator did, for `vault migrate` to print.
package struct MigrationOutcome: Sendable {
    package var warnings: [String]
    /// Whether no token was found.
    package var isEmpty: Bool
    /// The report as text.
    package var text: String
    /// The report as `--json` prints it.
    package var report: any Encodable & Sendable

    package init(warnings: [String], isEmpty: Bool, text: String, report: any Encodable & Sendable) {
        (self.warnings, self.isEmpty, self.text, self.report) = (warnings, isEmpty, text, report)
    }
}

/// `vault migrate`'s work: TokenVaultMigration, which reads and rewrites plists with Foundation.
/// `vault` does not link Foundation (a cold `vault get` would load and initialize it), so only
/// `vault-full` registers a migrator, and `vault` hands `migrate` over to it (BackendHandoff).
package protocol DefaultsMigrating: Sendable {
    /// The plist that UserDefaults keeps for `domain`.
    func plistPath(forDomain domain: String) throws -> String
    /// Migrates as `request` says into `vault`.
    func migrate(_ request: MigrationRequest, into vault: Vault) async throws -> MigrationOutcome
}

/// The migrator `vault-full` registered, if any.
enum DefaultsMigrators {
    static let installed = Mutex<(any DefaultsMigrating)?>(nil)
    static var current: (any DefaultsMigrating)? { installed.withLock { $0 } }
}
#endif
