#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import Foundation
import TokenVault
import TokenVaultMigration

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
            if let domain {
                do { _ = try DefaultsLocation.plistURL(forDomain: domain) } catch let error as VaultError {
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
            let url: URL
            if let plist {
                url = URL(fileURLWithPath: plist)
            } else {
                url = try DefaultsLocation.plistURL(forDomain: domain!)
            }
            let options = MigrationOptions(
                service: service ?? domain, account: account, keys: keys.isEmpty ? nil : keys, overwrite: overwrite,
                removeSource: !keepSource, dryRun: dryRun)
            let vault: Vault
            switch try await global.openExistingVault() {
            case .opened(let opened, _):
                vault = opened
            case .noVaultYet:
                // No vault yet, so nothing in it to collide with: plan against an empty one in
                // memory. A dry run, a plist with no tokens or one that fails validation then
                // ends here, and no vault file is created for nothing.
                var plan = options
                plan.dryRun = true
                let report = try await Vault(store: MemoryStore(), reason: "no vault yet").migrateDefaults(
                    plistAt: url, options: plan)
                if options.dryRun || report.isEmpty {
                    try show(report)
                    return
                }
                vault = try await global.openVault()
            }
            try show(try await vault.migrateDefaults(plistAt: url, options: options))
        }

        private func show(_ report: MigrationReport) throws {
            for warning in report.warnings { try Output.warning(warning) }
            if json {
                try Output.json(encoding: report)
            } else {
                try Output.line(Self.text(report, keepSource: keepSource))
            }
        }

        static func text(_ report: MigrationReport, keepSource: Bool) -> String {
            var lines = ["\(report.dryRun ? "Dry run: nothing was changed. " : "")Plist: \(report.source) (\(report.format))"]
            if !report.items.isEmpty {
                let rows = report.items.map { item in
                    [
                        "  \(item.key)", item.role.rawValue, item.value,
                        item.fate.rawValue + (item.entry.map { item.fate == .leftAlone || item.fate == .notPresent ? "" : " -> \($0)" } ?? "")
                            + (item.note.map { " (\($0))" } ?? ""),
                    ]
                }
                lines.append(Output.table(rows))
            }
            guard let entry = report.entries.first else {
                lines.append("No tokens found; nothing changed.")
                return lines.joined(separator: "\n")
            }
            let moved = report.items.filter { [.migrated, .copied, .alreadyInVault, .wouldMigrate].contains($0.fate) }.count
            if report.dryRun {
                lines.append(
                    "Would write \(entry) and \(keepSource ? "leave the plist as it is" : "remove \(moved) key(s) from the plist").")
            } else {
                // A token the vault already held exactly is not written again: say so.
                let written = report.items.contains { [.migrated, .copied].contains($0.fate) }
                let stored = written ? "Wrote \(entry) and read it back" : "The vault already held \(entry) (nothing written)"
                lines.append(
                    report.sourceRewritten
                        ? "\(stored); removed \(moved) key(s) from the plist; \(report.untouchedKeys.count) other key(s) unchanged."
                        : "\(stored); the plist was left as it is (--keep-source).")
            }
            return lines.joined(separator: "\n")
        }
    }
}
#endif
