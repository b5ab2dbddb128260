// Owns: the status of the database vault and the rekey of every row in one transaction.
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
public import TokenVault
import Foundation
import PostgresNIO
import Synchronization

extension PostgresStore {
    /// What `vault status` shows about the database.
    public struct Status: Sendable {
        /// The server's version, such as `15.18 (Debian 15.18-0+deb12u1)`.
        public var serverVersion: String
        /// The TLS version and cipher of this connection, or `nil` without TLS.
        public var tls: String?
        /// The schema version of the vault.
        public var schemaVersion: Int
        /// How many entries the vault holds.
        public var entries: Int
    }

    /// Asks the server its version, this connection's TLS, the schema version and the entry count.
    public func status() async throws -> Status {
        let sealing = current
        return try await bounded("read the status") { connection in
            let rows = try await connection.query(
                """
                SELECT current_setting('server_version'),
                       (SELECT CASE WHEN ssl THEN version || ' ' || cipher END FROM pg_stat_ssl WHERE pid = pg_backend_pid()),
                       h.schema_version, h.vault_id, (SELECT count(*) FROM tokenvault_entries)
                FROM tokenvault_header h WHERE h.id = 1
                """, logger: PostgresSQL.silent)
            var status: Status?
            for try await (version, tls, schema, vaultID, count) in rows.decode((String, String?, Int32, Data, Int64).self) {
                try self.checkVaultID(vaultID, sealing)
                status = Status(serverVersion: version, tls: tls, schemaVersion: Int(schema), entries: Int(count))
            }
            guard let status else { throw self.headerMissing() }
            return status
        }
    }

    /// Changes the key or passphrase: in one transaction, with both tables locked against
    /// writers, every row is opened with the old keys and sealed again under the new ones (new
    /// salt, new vault id, new row hashes), and the header row is replaced. Other processes that
    /// have the vault open get `authenticationFailed` on their next call and must open it again.
    ///
    /// - Parameter kdf: the Argon2id cost for a passphrase; `nil` means ``Options/kdf``.
    /// - Returns: how many entries were sealed again.
    @discardableResult
    public func rekey(to newSource: VaultConfiguration.KeySource, kdf: EncryptedFileStore.KDFParameters? = nil) async throws -> Int {
        let secret = try RowSealingSecret.load(newSource, allowInsecurePermissions: options.allowInsecurePermissions)
        try secret.checkNewPassphrase(rekeying: true)
        let newSealing = try PostgresSchema.newHeader(secret: secret, kdf: kdf ?? options.kdf, vault: vaultName)
        let old = current
        // Within the call's own bound, so that a lock held too long says so (`timeout`).
        let waitMilliseconds = max(1, Int(options.operationTimeout.components.seconds * 750))
        let count = try await bounded("rekey the vault") { connection in
            try await PostgresSQL.transaction(on: connection) {
                // The refresh lock of every entry first, in one order (a refresh holds one only):
                // a refresh in flight commits its answer under the old keys, and is sealed again
                // below with the rest; one that starts now waits, then finds the vault rekeyed
                // before it sends anything. Before the table lock, which a refresh's write waits
                // for: the other order would deadlock with it.
                try await connection.run(
                    "SELECT set_config('lock_timeout', \("\(waitMilliseconds)ms"), true)", logger: PostgresSQL.silent)
                var locked = Set<Int64>()
                let existing = try await connection.query("SELECT row_hash FROM tokenvault_entries", logger: PostgresSQL.silent)
                for try await (rowHash) in existing.decode(Data.self) { locked.insert(Self.lockKey(rowHash: rowHash)) }
                for lockKey in locked.sorted() {
                    try await connection.run("SELECT pg_advisory_xact_lock(\(lockKey))", logger: PostgresSQL.silent)
                }
                try await connection.run(
                    "LOCK TABLE tokenvault_header, tokenvault_entries IN EXCLUSIVE MODE", logger: PostgresSQL.silent)
                try await self.checkHeader(on: connection, old)
                // A row made since the first read: its refresh lock too, or the rekey waits for another try.
                let now = try await connection.query("SELECT row_hash FROM tokenvault_entries", logger: PostgresSQL.silent)
                var late: [Int64] = []
                for try await (rowHash) in now.decode(Data.self) where !locked.contains(Self.lockKey(rowHash: rowHash)) {
                    late.append(Self.lockKey(rowHash: rowHash))
                }
                for lockKey in late {
                    let taken = try await connection.query("SELECT pg_try_advisory_xact_lock(\(lockKey))", logger: PostgresSQL.silent)
                    var got = false
                    for try await (value) in taken.decode(Bool.self) { got = value }
                    guard got else {
                        throw VaultError(
                            .timeout,
                            "A refresh of an entry made during the rekey of \(self.vaultName) is in flight; nothing was changed. Run the rekey again.")
                    }
                }
                let rows = try await connection.query(
                    """
                    SELECT row_hash, version, CASE WHEN octet_length(sealed) <= \(Int32(Self.maximumRowLength)) THEN sealed END,
                           octet_length(sealed)
                    FROM tokenvault_entries
                    """, logger: PostgresSQL.silent)
                var resealed: [(rowHash: [UInt8], serviceHash: [UInt8], version: Int64, sealed: [UInt8])] = []
                for try await (rowHash, version, kept, length) in rows.decode((Data, Int64, Data?, Int32).self) {
                    guard let sealed = kept else { throw self.rowTooLarge(length, key: nil) }
                    let (key, secret) = try self.openRow(Array(sealed), rowHash: Array(rowHash), version: version, sealing: old)
                    let newRowHash = newSealing.1.keys.rowHash(key)
                    let newVersion = try Self.version(after: version, vault: self.vaultName)
                    let newSealed = try newSealing.1.keys.seal(
                        key, secret: secret,
                        associatedData: Self.associatedData(vaultID: newSealing.1.vaultID, rowHash: newRowHash, version: newVersion))
                    resealed.append((newRowHash, newSealing.1.keys.serviceHash(key.service), newVersion, newSealed))
                }
                try await connection.run("DELETE FROM tokenvault_entries", logger: PostgresSQL.silent)
                for row in resealed {
                    try await connection.run(
                        """
                        INSERT INTO tokenvault_entries (row_hash, service_hash, version, sealed)
                        VALUES (\(Data(row.rowHash)), \(Data(row.serviceHash)), \(row.version), \(Data(row.sealed)))
                        """, logger: PostgresSQL.silent)
                }
                try await connection.run("DELETE FROM tokenvault_header", logger: PostgresSQL.silent)
                try await PostgresSchema.insert(newSealing.0, on: connection)
                // Every row changed: every process's read cache forgets everything at the commit.
                try await connection.run(
                    "SELECT pg_notify(\(PostgresReadCache.channel), \(PostgresReadCache.everyRow))", logger: PostgresSQL.silent)
                return resealed.count
            }
        }
        sealing.withLock { $0 = newSealing.1 }
        readCache?.invalidateAll()
        return count
    }
}
#endif
