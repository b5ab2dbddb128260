// Owns: writing a set of entries into a vault all or nothing, the one engine behind
// `vault copy` and the defaults migration (as Valet's `migrateObjects` is one engine behind each
// of its migrations): compare with what the vault holds, refuse other values unless told to,
// write in one batch, read each back and compare, let the caller finish (the migration rewrites
// its plist), and put back what was there if any step fails.
package import FoundationEssentials

/// Entries to write into a vault, all or nothing.
package struct EntryTransfer {
    /// One entry to write: what a store's batch write takes.
    package typealias Item = CredentialWrite

    /// What the destination holds for the items, compared: what is to be written (with what it
    /// replaces), what is already there, and what would be replaced by another value.
    package struct Plan: Sendable {
        package var toWrite: [(item: Item, previous: Data?)] = []
        package var alreadyThere: [CredentialKey] = []
        /// Keys the destination holds with another value. ``apply(to:then:)`` refuses a plan
        /// with any unless it was made with `overwrite`.
        package var conflicts: [CredentialKey] = []
        fileprivate var overwrite = false
    }

    package let vault: Vault
    /// The destination as a person knows it ("the file backend", "the vault"), for messages.
    package let destinationName: String

    package init(into vault: Vault, destinationName: String) {
        self.vault = vault
        self.destinationName = destinationName
    }

    /// Step 1: reads what the destination holds for each item. `same` says whether a stored
    /// value already is the item's (byte equality unless the caller knows better: the migration
    /// compares tokens, not their stored forms).
    package func plan(
        _ items: [Item], overwrite: Bool, same: (_ stored: Data, _ item: Item) -> Bool = { $0 == $1.secret }
    ) async throws -> Plan {
        var plan = Plan(overwrite: overwrite)
        for item in items {
            let existing = try await vault.store.load(item.key)
            if let existing, same(existing, item) {
                plan.alreadyThere.append(item.key)
                continue
            }
            if existing != nil { plan.conflicts.append(item.key) }
            plan.toWrite.append((item, existing))
        }
        return plan
    }

    /// Steps 2–4: writes `plan.toWrite` in one batch (one transaction, one `fsync`), reads each
    /// entry back and compares it with what was written, then runs `commit`. If any of them
    /// fails, every entry written is put back as it was and the error is thrown; if putting back
    /// fails too, the error says so and names the entry to check.
    /// - Throws: `alreadyExists` for a plan with conflicts made without `overwrite` (nothing is
    ///   written); `integrityFailure` when an entry reads back different; the store's errors;
    ///   `commit`'s.
    package func apply(_ plan: Plan, then commit: () async throws -> Void = {}) async throws {
        if !plan.conflicts.isEmpty && !plan.overwrite {
            let shown = plan.conflicts.prefix(5).map(\.description).joined(separator: ", ")
            throw VaultError(
                .alreadyExists,
                "\(destinationName.prefix(1).uppercased() + destinationName.dropFirst()) already holds \(plan.conflicts.count == 1 ? "an entry" : "\(plan.conflicts.count) entries") with other values (\(shown)\(plan.conflicts.count > 5 ? ", …" : "")); nothing was changed."
            )
        }
        do {
            if !plan.toWrite.isEmpty {
                try await vault.store.saveAll(plan.toWrite.map { CredentialWrite(key: $0.item.key, secret: $0.item.secret, contentType: $0.item.contentType) })
                for (item, _) in plan.toWrite {
                    guard try await vault.store.load(item.key) == item.secret else {
                        throw VaultError(
                            .integrityFailure, "The entry \(item.key) read back from \(destinationName) differs from what was written; nothing was changed.")
                    }
                }
            }
            try await commit()
        } catch {
            try await undo(plan.toWrite, after: error)
            throw error
        }
    }

    /// Puts back what the destination held before each write (or removes what it did not hold).
    private func undo(_ written: [(item: Item, previous: Data?)], after error: any Error) async throws {
        var failed: [(CredentialKey, any Error)] = []
        for (item, previous) in written {
            do {
                if let previous {
                    try await vault.store.save(previous, for: item.key, contentType: Self.contentType(of: previous))
                } else {
                    _ = try await vault.store.delete(item.key)
                }
            } catch {
                failed.append((item.key, error))
            }
        }
        guard let (key, undoError) = failed.first else { return }
        let reason = (error as? VaultError)?.message ?? "\(type(of: error))"
        let others = failed.count > 1 ? " and \(failed.count - 1) other entries" : ""
        throw VaultError(
            (error as? VaultError)?.code ?? .io,
            "\(reason) Restoring \(key)\(others) in \(destinationName) also failed (\((undoError as? VaultError)?.message ?? "\(type(of: undoError))")); check it with `vault get`.",
            underlying: undoError
        )
    }

    /// A stored value's content type, as the backends label it: JSON for an object, else binary.
    package static func contentType(of secret: Data) -> SecretContentType {
        (try? JSONDecoder().decode([String: JSONValue].self, from: secret)) != nil ? .json : .binary
    }
}
