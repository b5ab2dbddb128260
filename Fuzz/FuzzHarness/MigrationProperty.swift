import Foundation
public import TokenVault
import TokenVaultMigration

/// The property of FuzzMigrationDetector: arbitrary bytes as a defaults plist, migrated into a
/// ``MemoryStore`` vault through the public API.
///
/// - No input crashes, hangs or allocates without bound.
/// - A dry run either reports or throws a ``VaultError``, and changes neither the vault nor
///   the plist.
/// - When the dry run finds a token, the real migration (removing the source) either throws a
///   ``VaultError`` and changes nothing (all or nothing), or stores exactly that entry as a
///   readable token and rewrites the plist into one that still parses, without the migrated
///   keys. Running it again then finds nothing and changes nothing.
public final class MigrationProperty: Sendable {
    public enum Outcome: Sendable, Equatable {
        /// The plist parsed and holds no token to migrate.
        case noTokens
        /// The token was migrated and the plist rewritten.
        case migrated
        /// The dry run threw (the plist is bad or its tokens are ambiguous).
        case rejected(VaultError.Code)
        /// The dry run found a token, but the real migration threw, changing nothing.
        case migrationRefused(VaultError.Code)
    }

    public let directory: String
    let plistURL: URL

    /// Uses `directory` (which must exist and be private) for the plist.
    public init(directory: String) {
        self.directory = directory
        plistURL = URL(fileURLWithPath: directory + "/fuzz.plist")
    }

    /// - Throws: ``PropertyViolation`` only.
    public func check(_ input: [UInt8]) async throws -> Outcome {
        do {
            try VaultFileProperty.write(input, to: plistURL.path)
        } catch {
            throw PropertyViolation("the harness could not write the plist: \(error)")
        }
        let vault = Vault(store: MemoryStore())

        // A dry run changes nothing, whatever it finds.
        let plan: MigrationReport
        do {
            plan = try await vault.migrateDefaults(plistAt: plistURL, options: MigrationOptions(removeSource: true, dryRun: true))
        } catch let error as VaultError {
            try await expectUnchanged(vault, input, after: "a dry run that threw \(error.code)")
            return .rejected(error.code)
        } catch {
            throw PropertyViolation("a dry run threw \(type(of: error)), not a VaultError")
        }
        try await expectUnchanged(vault, input, after: "a dry run")
        guard plan.dryRun, !plan.sourceRewritten else {
            throw PropertyViolation("a dry run reported a rewritten plist")
        }
        guard let entry = plan.entries.first else { return .noTokens }
        guard plan.entries.count == 1 else { throw PropertyViolation("a migration planned \(plan.entries.count) entries") }

        // The real migration: all or nothing.
        let report: MigrationReport
        do {
            report = try await vault.migrateDefaults(plistAt: plistURL, options: MigrationOptions(removeSource: true))
        } catch let error as VaultError {
            try await expectUnchanged(vault, input, after: "a migration that threw \(error.code)")
            return .migrationRefused(error.code)
        } catch {
            throw PropertyViolation("a migration threw \(type(of: error)), not a VaultError")
        }
        guard report.entries == [entry], report.sourceRewritten else {
            throw PropertyViolation("the migration did not do what its dry run planned")
        }
        let migratedKeys = Set(report.items.filter { $0.fate == .migrated }.map(\.key))
        guard migratedKeys == Set(plan.items.filter { $0.fate == .wouldMigrate }.map(\.key)), !migratedKeys.isEmpty else {
            throw PropertyViolation("the keys migrated are not the keys planned")
        }
        do {
            guard try await vault.keys() == [entry], try await vault.token(for: entry) != nil else {
                throw PropertyViolation("after the migration the vault does not hold exactly the token")
            }
        } catch let violation as PropertyViolation {
            throw violation
        } catch {
            throw PropertyViolation("the migrated token does not read back: \(error)")
        }
        let rewritten: Data
        do {
            rewritten = try Data(contentsOf: plistURL)
            var format = PropertyListSerialization.PropertyListFormat.xml
            guard let dictionary = try PropertyListSerialization.propertyList(from: rewritten, format: &format) as? [String: Any]
            else { throw PropertyViolation("the rewritten plist is no longer a dictionary") }
            guard migratedKeys.isDisjoint(with: dictionary.keys) else {
                throw PropertyViolation("the rewritten plist still holds a migrated key")
            }
        } catch let violation as PropertyViolation {
            throw violation
        } catch {
            throw PropertyViolation("the rewritten plist does not parse: \(type(of: error))")
        }

        // Again: nothing left to find, nothing changes.
        do {
            let again = try await vault.migrateDefaults(plistAt: plistURL, options: MigrationOptions(removeSource: true))
            guard again.entries.isEmpty, !again.sourceRewritten else {
                throw PropertyViolation("a second migration found tokens again")
            }
        } catch let violation as PropertyViolation {
            throw violation
        } catch {
            throw PropertyViolation("a second migration threw: \(error)")
        }
        guard (try? Data(contentsOf: plistURL)) == rewritten, try await vault.keys() == [entry] else {
            throw PropertyViolation("a second migration changed the plist or the vault")
        }
        return .migrated
    }

    private func expectUnchanged(_ vault: Vault, _ input: [UInt8], after what: String) async throws {
        let keys: [CredentialKey]
        do {
            keys = try await vault.keys()
        } catch {
            throw PropertyViolation("the memory vault failed after \(what)")
        }
        guard keys.isEmpty else { throw PropertyViolation("\(what) left entries in the vault") }
        guard let bytes = try? Data(contentsOf: plistURL), bytes == Data(input) else {
            throw PropertyViolation("\(what) changed the plist")
        }
    }
}
