// Owns: one refresh across hosts: the transaction-scoped advisory lock and the view of the store
// that reads and writes inside it.
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
import Foundation
package import TokenVault
import PostgresNIO
import Synchronization

extension PostgresStore: StoreRefreshLocking {
    package var refreshIdentity: String {
        "postgres:" + current.vaultID.map { String(format: "%02x", $0) }.joined()
    }

    /// The advisory lock key of an entry: the first 8 bytes of its keyed row hash, so the lock
    /// names no entry either. Two entries (or two vaults in one database) that share a key only
    /// wait for each other.
    func lockKey(for key: CredentialKey) -> Int64 {
        let hash = current.keys.rowHash(key)
        var value: UInt64 = 0
        for byte in hash.prefix(8).reversed() { value = value << 8 | UInt64(byte) }
        return Int64(bitPattern: value)
    }

    /// The protocol, step by step (the spin model in Models/ follows these steps):
    ///
    /// 1. `BEGIN` on a pooled connection; `lock_timeout` set for this transaction to `timeout`;
    ///    `idle_in_transaction_session_timeout` set so that a holder that hangs (stopped, not
    ///    dead) loses the lock, and its commit fails, instead of blocking everyone.
    /// 2. `SELECT pg_advisory_xact_lock(k)`: waits at most `timeout` (then `timeout`, SQLSTATE 55P03).
    /// 3. `body` (``Vault``'s locked flight) reads the row again through the view, on this
    ///    connection, and if it is still stale POSTs the refresh to the token endpoint, then
    ///    writes the new token (or the stored `invalid_grant` verdict) through the view.
    /// 4. `COMMIT`, which releases the lock. A connection lost before the commit (a crash, a
    ///    terminated backend) rolls the write back and releases the lock; the caller gets
    ///    `backendUnavailable`.
    ///
    /// Steps 1 and 2 are retried on a new connection when the connection fails; nothing after
    /// the lock is retried.
    package func withRefreshLock<Result: Sendable>(
        on key: CredentialKey, timeout: Duration, _ body: (any CredentialStore) async throws -> Result
    ) async throws -> Result {
        let lockKey = lockKey(for: key)
        let waitMilliseconds = max(1, Int(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000))
        // Long enough for a token request with its retries; a stopped holder is cut off after it.
        let idleMilliseconds = waitMilliseconds + 60_000
        var pause = Duration.milliseconds(20)
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: options.operationTimeout + timeout)
        while true {
            var locked = false
            do {
                return try await client.withConnection { connection in
                    // Step 1.
                    try await connection.run("BEGIN", logger: PostgresSQL.silent)
                    try await connection.run(
                        """
                        SELECT set_config('lock_timeout', \("\(waitMilliseconds)ms"), true),
                               set_config('idle_in_transaction_session_timeout', \("\(idleMilliseconds)ms"), true)
                        """, logger: PostgresSQL.silent)
                    // Step 2.
                    do {
                        try await connection.run("SELECT pg_advisory_xact_lock(\(lockKey))", logger: PostgresSQL.silent)
                    } catch {
                        _ = try? await connection.run("ROLLBACK", logger: PostgresSQL.silent)
                        if let psql = error as? PSQLError, psql.serverInfo?[.sqlState] == "55P03" {
                            throw VaultError(
                                .timeout,
                                "Another host or process held the refresh lock of \(key) in \(vaultName) for longer than \(timeout); gave up waiting.")
                        }
                        throw error
                    }
                    locked = true
                    // Step 3.
                    let outcome: Swift.Result<Result, any Error>
                    let view = LockedView(store: self, connection: connection)
                    // The read cache forgets what the view wrote once the commit is over (other
                    // processes hear the NOTIFY that commits with it).
                    defer { readCache?.invalidate(rowHashes: view.written.rows.withLock { $0 }) }
                    do {
                        outcome = .success(try await body(view))
                    } catch {
                        outcome = .failure(error)
                    }
                    // Step 4: commit on both paths, so that a stored verdict outlives its error.
                    do {
                        try await connection.run("COMMIT", logger: PostgresSQL.silent)
                    } catch {
                        let failure = PostgresSQL.vaultError(error, what: "commit the refresh of \(key)", vault: vaultName)
                        logger.error(
                            "the refresh transaction could not commit; what it wrote is lost",
                            metadata: ["key": "\(key)", "code": "\(failure.code)"])
                        if case .failure(let error) = outcome { throw error }
                        throw VaultError(
                            .backendUnavailable,
                            "The refresh of \(key) could not be committed to \(vaultName) (\(failure.message)); if the server rotated the refresh token, the new one is lost and a new login may be needed.",
                            underlying: failure)
                    }
                    return try outcome.get()
                }
            } catch {
                // Only the steps before the lock are retried, and only for a lost connection.
                guard !locked, PostgresSQL.isConnectionFailure(error), clock.now < deadline else {
                    throw PostgresSQL.vaultError(error, what: "take the refresh lock of \(key)", vault: vaultName)
                }
                try await Task.sleep(for: pause)
                pause = min(pause * 2, .milliseconds(500))
            }
        }
    }
}

/// The store as seen inside a refresh transaction: loads and saves on its connection, under its lock.
struct LockedView: CredentialStore {
    let store: PostgresStore
    let connection: PostgresConnection
    /// The row hashes written or deleted through the view (for the read cache).
    let written = WrittenRows()

    init(store: PostgresStore, connection: PostgresConnection) {
        self.store = store
        self.connection = connection
    }

    var backend: BackendKind { store.backend }

    func load(_ key: CredentialKey) async throws -> Data? {
        do {
            return try await store.load(key, on: connection, inTransaction: true)
        } catch {
            throw PostgresSQL.vaultError(error, what: "read \(key) under the refresh lock", vault: store.vaultName)
        }
    }

    func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) async throws {
        try PostgresStore.checkSize(secret, key)
        written.rows.withLock { $0.append(Data(store.current.keys.rowHash(key))) }
        do {
            try await store.save(secret, for: key, on: connection)
        } catch {
            throw PostgresSQL.vaultError(error, what: "save \(key) under the refresh lock", vault: store.vaultName)
        }
    }

    func delete(_ key: CredentialKey) async throws -> Bool {
        written.rows.withLock { $0.append(Data(store.current.keys.rowHash(key))) }
        do {
            return try await store.delete(key, on: connection)
        } catch {
            throw PostgresSQL.vaultError(error, what: "delete \(key) under the refresh lock", vault: store.vaultName)
        }
    }

    func keys(service: String?) async throws -> [CredentialKey] {
        do {
            return try await store.keys(service: service, on: connection)
        } catch {
            throw PostgresSQL.vaultError(error, what: "list under the refresh lock", vault: store.vaultName)
        }
    }
}

/// What a ``LockedView`` wrote, shared by its copies.
final class WrittenRows: Sendable {
    let rows = Mutex<[Data]>([])
}
#endif
