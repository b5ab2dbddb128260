// Owns: the refresh journal of the PostgreSQL backend: "this refresh token is being presented",
// committed before the token request leaves, apart from the refresh's transaction.
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
import Foundation
import TokenVault
import PostgresNIO

extension LockedView: RefreshJournalWriting {
    /// The journal is the entry itself, as the file vault writes it (a ``StoredEntry`` with its
    /// `refresh_presenting` record), sealed as every row is and committed on another connection of
    /// the pool in one autocommitted statement, so that a `kill -9` of this process during the
    /// token request (which rolls the refresh's transaction back) leaves it behind for the next flight,
    /// on any host. The write is fenced twice: it replaces only the version of the row that this
    /// view read under the lock, and only while this flight's backend still holds the advisory
    /// lock (`pg_locks`), so it never overwrites a newer token and never lands after the lock was
    /// lost. The answer's save in the refresh's transaction then replaces it (its version is higher).
    func commitJournal(_ entry: Data, for key: CredentialKey) async throws {
        try PostgresStore.checkSize(entry, key)
        let what = "record the refresh of \(key) before its request"
        let rowHash = Data(store.current.keys.rowHash(key))
        guard !written.isLost, let read = written.version(read: rowHash), let expected = read else {
            // Not read under the lock, or no row, or the lock is gone with its connection: no request leaves.
            throw VaultError(
                .backendUnavailable,
                "Could not \(what) in \(store.vaultName): the refresh no longer holds what it read under its lock. Run the command again.")
        }
        try held.checkOpen(to: what, vault: store.vaultName)
        let version = try await store.commitJournal(entry, for: key, replacing: expected, lockHolder: backendPID, lockKey: lockKey)
        written.journaled(rowHash, version: version)
    }
}

extension PostgresStore {
    /// Commits the sealed `secret` for `key` as a new version of the row, in one autocommitted
    /// statement on a pooled connection, if the row still has version `expected` and the backend
    /// `lockHolder` still holds the advisory lock `lockKey`. Returns the new version.
    func commitJournal(
        _ secret: Data, for key: CredentialKey, replacing expected: Int64, lockHolder: Int32, lockKey: Int64
    ) async throws -> Int64 {
        let sealing = current
        let rowHash = sealing.keys.rowHash(key)
        let version = try Self.version(after: max(Int64(Date().timeIntervalSince1970 * 1_000_000) - 1, expected), vault: vaultName)
        let sealed = try sealing.keys.seal(
            key, secret: secret, associatedData: Self.associatedData(vaultID: sealing.vaultID, rowHash: rowHash, version: version))
        let vault = vaultName
        let what = "record the refresh of \(key) before its request"
        defer { readCache?.invalidate(rowHashes: [Data(rowHash)]) }
        // One statement, in autocommit: it commits as it ends, so there is no moment at which this
        // host holds the row's lock while the server waits for its COMMIT. With BEGIN … COMMIT, a
        // holder cut off between the UPDATE and the COMMIT kept the row locked on this pooled
        // connection (which has no dead-peer settings) for as long as the cut lasted, after the
        // server had dropped its advisory lock at 24 s: every next host took the lock and then
        // timed out writing its own journal (Scripts/fleet, cut before the request: all 3 hosts
        // exit 6). One round trip instead of three, too.
        // (classid, objid) of pg_locks are the high and low halves of a bigint advisory lock's key.
        let outcome = try await bounded(what) { connection -> (vaultID: Data?, stored: Int64?, held: Bool, written: Bool) in
            let rows = try await connection.query(
                """
                WITH holder AS (
                    SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
                                   AND pid = \(lockHolder) AND ((classid::int8 << 32) | objid::int8) = \(lockKey)) AS held),
                written AS (
                    UPDATE tokenvault_entries SET version = \(version), sealed = \(Data(sealed))
                    WHERE row_hash = \(Data(rowHash)) AND version = \(expected)
                    AND (SELECT held FROM holder)
                    AND EXISTS (SELECT 1 FROM tokenvault_header WHERE id = 1 AND vault_id = \(Data(sealing.vaultID)))
                    RETURNING version),
                notified AS (
                    SELECT pg_notify(\(PostgresReadCache.channel), \(PostgresReadCache.payload(rowHash))) FROM written)
                SELECT h.vault_id, e.version, (SELECT held FROM holder), EXISTS (SELECT 1 FROM written), (SELECT count(*) FROM notified)
                FROM tokenvault_header h LEFT JOIN tokenvault_entries e ON e.row_hash = \(Data(rowHash)) WHERE h.id = 1
                """, logger: PostgresSQL.silent)
            var outcome: (vaultID: Data?, stored: Int64?, held: Bool, written: Bool) = (nil, nil, false, false)
            for try await (vaultID, stored, held, written, _) in rows.decode((Data, Int64?, Bool, Bool, Int64).self) {
                outcome = (vaultID, stored, held, written)
            }
            return outcome
        }
        // A retry after a lost answer finds its own version: written.
        if outcome.written || outcome.stored == version { return version }
        guard let vaultID = outcome.vaultID else { throw headerMissing() }
        try checkVaultID(vaultID, sealing)
        if !outcome.held {
            throw VaultError(
                .backendUnavailable,
                "Lost the refresh lock of \(key) in \(vault) (its connection ended) before the token request could leave; nothing was presented. Run the command again.")
        }
        // The row changed after this flight read it under the lock. That happens when a holder
        // lost the lock (killed, or cut off until the server ended its session) just after
        // its own journal statement had passed the fence and before that statement's COMMIT: the
        // write is committed after the lock changed hands. A writer that does not take the refresh
        // lock is the other way. Either way, what this flight read is stale.
        throw VaultError(
            .backendUnavailable,
            "The entry \(key) in \(vault) changed after this refresh read it under its refresh lock (a process that had just lost that lock finished its write, or a write that does not take it); nothing was presented, and the entry keeps that write. Run the command again.")
    }
}
#endif
