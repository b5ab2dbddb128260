public import TokenVault
public import Foundation
import Logging

extension Vault {
    /// Moves the OAuth tokens that an app left in a plain defaults plist into this vault.
    ///
    /// It is all or nothing, in this order:
    /// 1. read the plist and find the token values (see <doc:Migrating>); nothing found means
    ///    nothing changes;
    /// 2. refuse if the vault already holds a different token under the target key, unless
    ///    ``MigrationOptions/overwrite``;
    /// 3. write the token;
    /// 4. read it back and compare the bytes;
    /// 5. only then, if ``MigrationOptions/removeSource``, rewrite the plist without the migrated
    ///    keys: atomically, in the same format (XML or binary), with the same permissions, owner
    ///    and every other key and value.
    ///
    /// If a step fails, the vault entries written are restored to what they were, the plist is
    /// untouched, and the error is thrown. Once the rewritten plist has been renamed into place
    /// nothing is rolled back: a directory that cannot be synced afterwards is a warning in the
    /// report. A dry run stops after step 2 and reports the plan.
    /// Running the migration again after it succeeded finds nothing and changes nothing.
    ///
    /// - Returns: A report naming each key found and what became of it, with values redacted.
    /// - Throws: ``VaultError``: `notFound` for a missing plist; `invalidInput` for a plist that
    ///   is corrupt, not a dictionary, or holds tokens that cannot be grouped unambiguously;
    ///   `alreadyExists` for a different token in the vault; `permissionDenied`, `io` or
    ///   `diskFull` when the plist cannot be rewritten; and any error of the store.
    public func migrateDefaults(plistAt url: URL, options: MigrationOptions) async throws -> MigrationReport {
        let service = options.service ?? url.deletingPathExtension().lastPathComponent
        return try await DefaultsMigration(vault: self, options: options, service: service).run(url)
    }

    /// Migrates the defaults suite `suiteName`, reading the plist where `UserDefaults` keeps it
    /// on this platform (``DefaultsLocation``). The default service is the suite name.
    ///
    /// Call this at start-up before the app reads the suite through `UserDefaults`. If this
    /// process has already loaded the suite, its cached copy still holds the tokens; after the
    /// plist is rewritten they are also removed from that cache, so that it cannot write them back.
    public func migrateDefaults(
        suiteName: String, options: MigrationOptions,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) async throws -> MigrationReport {
        let url = try DefaultsLocation.plistURL(forDomain: suiteName, environment: environment)
        var options = options
        if options.service == nil { options.service = suiteName }
        let report = try await migrateDefaults(plistAt: url, options: options)
        if report.sourceRewritten, let defaults = UserDefaults(suiteName: suiteName) {
            var rewritten: [String: Any]?
            for item in report.items where item.fate == .migrated || item.fate == .alreadyInVault {
                if let keyPath = item.keyPath, let top = keyPath.first {
                    // A nested token: the cached top-level value still holds it. Put the
                    // rewritten value (which no longer does) in its place.
                    if rewritten == nil { rewritten = try PlistDocument.read(url).dictionary }
                    if defaults.object(forKey: top) != nil, let value = rewritten?[top] {
                        defaults.set(value, forKey: top)
                    }
                } else if defaults.object(forKey: item.key) != nil {
                    defaults.removeObject(forKey: item.key)
                }
            }
        }
        return report
    }
}

/// The migration engine behind ``Vault/migrateDefaults(plistAt:options:)``.
struct DefaultsMigration {
    let vault: Vault
    let options: MigrationOptions
    let service: String

    static let warnings = [
        "An app that still has this defaults domain open may write its cached copy of the tokens back; quit it first, and run the migration again afterwards to check.",
        "Copies of the old plist may remain in backups, snapshots or synced folders; revoke the tokens if that matters.",
    ]

    func run(_ url: URL) async throws -> MigrationReport {
        // 1. Read and validate everything.
        let entry = try CredentialKey(service: service, account: options.account)
        let document = try PlistDocument.read(url)
        let detection = try TokenDetector(now: Date()).detect(in: document.dictionary, only: options.keys, entry: entry)
        var report = MigrationReport(
            source: document.path, format: document.formatName, dryRun: options.dryRun, sourceRewritten: false,
            items: detection.items, entries: [], untouchedKeys: detection.untouchedKeys, warnings: [])
        guard let group = detection.groups.first else {
            vault.logger.debug("defaults migration found no tokens", metadata: ["plist": "\(document.path)"])
            return report
        }
        report.entries = [entry]
        report.warnings = Self.warnings

        // 2. Refuse to replace a different token unless told to. The comparison is of tokens,
        // not of stored forms: the same token saved by another version compares equal.
        let stored = try group.token.storedForm()
        let transfer = EntryTransfer(into: vault, destinationName: "the vault")
        let plan = try await transfer.plan(
            [EntryTransfer.Item(key: entry, secret: stored, contentType: .json)], overwrite: options.overwrite
        ) { existing, _ in
            guard let existing = try? OAuthToken(storedForm: existing) else { return false }
            return existing.accessToken == group.token.accessToken && existing.refreshToken == group.token.refreshToken
                && existing.idToken == group.token.idToken
        }
        let alreadyThere = !plan.alreadyThere.isEmpty
        if !plan.conflicts.isEmpty && !options.overwrite {
            throw VaultError(
                .alreadyExists,
                "The vault already holds a different entry for \(entry); nothing was changed. To replace it, migrate with MigrationOptions.overwrite (vault migrate --overwrite)."
            )
        }
        if options.dryRun {
            if alreadyThere { report.mark(group.keys, .alreadyInVault) }
            return report
        }

        // 3. Write, 4. read back and compare, and 5. only then rewrite the plist without the
        // migrated keys; the engine puts the entry back if any of them fails.
        try await transfer.apply(plan) {
            guard options.removeSource else { return }
            let data = try document.serialized(removing: group.paths)
            // Once this returns, the plist no longer holds the tokens: from here on nothing
            // may throw into the rollback. A late problem comes back as a warning.
            let warning = try document.replace(with: data)
            report.sourceRewritten = true
            if let warning { report.warnings.append(warning) }
        }
        report.mark(group.keys, alreadyThere ? .alreadyInVault : (options.removeSource ? .migrated : .copied))
        vault.logger.info(
            "migrated defaults tokens", metadata: ["plist": "\(document.path)", "entry": "\(entry)", "keys": "\(group.keys)"])
        return report
    }
}

extension MigrationReport {
    fileprivate mutating func mark(_ keys: [String], _ fate: Fate) {
        for index in items.indices where keys.contains(items[index].key) {
            items[index].fate = fate
        }
    }
}
