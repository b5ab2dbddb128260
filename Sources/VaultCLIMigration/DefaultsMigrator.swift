// Owns: `vault migrate`'s work in `vault-full`: TokenVaultMigration (which reads and rewrites
// plists with Foundation) behind VaultCLI's `DefaultsMigrating`, and the report's text.
#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import Foundation
package import TokenVault
import TokenVaultMigration
package import VaultCLI

/// TokenVaultMigration, as `vault migrate` asks for it.
package struct DefaultsMigrator: DefaultsMigrating {
    package init() {}

    package func plistPath(forDomain domain: String) throws -> String {
        try DefaultsLocation.plistURL(forDomain: domain).path
    }

    package func migrate(_ request: MigrationRequest, into vault: Vault) async throws -> MigrationOutcome {
        let options = MigrationOptions(
            service: request.service, account: request.account, keys: request.keys, overwrite: request.overwrite,
            removeSource: request.removeSource, dryRun: request.dryRun)
        let report = try await vault.migrateDefaults(plistAt: URL(fileURLWithPath: request.plist), options: options)
        return MigrationOutcome(
            warnings: report.warnings, isEmpty: report.isEmpty, text: Self.text(report, keepSource: !request.removeSource),
            report: report)
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
#endif
