// Owns: the public PostgreSQL store: the CredentialStore API over sealed rows.
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
public import Foundation
public import Logging
public import TokenVault
import PostgresNIO
import Synchronization

/// A ``CredentialStore`` in a PostgreSQL database, for a fleet of hosts that share one vault
/// without trusting the database with a secret.
///
/// - **Sealed on the client.** Each entry is one row holding the file vault's record (service,
///   account and secret) sealed with XChaCha20-Poly1305 under the vault's record subkey. The
///   associated data is `"TVP1" ‖ vault id ‖ row hash ‖ row version`, so a ciphertext moved to
///   another row, swapped with another row's or replayed under another version fails as an
///   `integrityFailure`.
/// - **No names in clear.** Rows are found by a keyed BLAKE2b hash of (service, account) and
///   listed by a keyed hash of the service; the names are inside the ciphertext.
/// - **Keys.** A 32-byte key file, or a passphrase stretched with Argon2id whose parameters and
///   salt live in the header row with a key-check value: a wrong key is `authenticationFailed`,
///   a damaged header `integrityFailure`.
/// - **Schema.** Created on first use (`tokenvault_header`, `tokenvault_entries`) and
///   versioned; a newer schema is refused with `unsupportedVersion`.
/// - **Connections.** A pool of postgres-nio connections; with `sslmode=verify-full` (the
///   default) each one's TLS is set up by the store and the URL's host checked against the
///   server certificate's names as libpq checks them, before postgres-nio sends the login.
///   Every call is bounded by
///   ``Options/operationTimeout``: an unreachable server is `backendUnavailable`, never a hang. A
///   call that meets a dropped connection (a server restart, `pg_terminate_backend`) retries
///   on a new one within that bound.
/// - **Refresh across hosts.** ``Vault/freshToken(for:leeway:timeout:refresh:)`` on this store
///   takes `pg_advisory_xact_lock` on the entry's row hash in a transaction, reads the entry
///   again, refreshes only if it is still stale, writes and commits. A host that dies releases
///   the lock with its connection.
/// - **Read cache (optional, off by default).** With ``Options/readCache`` (the `vault` command:
///   `TOKEN_VAULT_DATABASE_CACHE=1`), a get is served from the process's memory when it can be:
///   every write (save, delete, rekey, refresh) sends `NOTIFY tokenvault_changes` with the keyed
///   row hash in the same transaction, and the store listens on a connection of its own. The
///   cache keeps sealed rows, opened again on every hit, and serves them only while its
///   listener is known alive (its `LISTEN` holds and a heartbeat every
///   ``Options/readCacheHeartbeat`` answers); when the listener drops, the cache is emptied and
///   every get reads the database until `LISTEN` is back. A write by another process is seen
///   within the notification's delivery (milliseconds); this process sees its own writes at
///   once. **Limitation:** a row changed in SQL behind the store's back, without
///   `NOTIFY tokenvault_changes`, is not seen by a cache that holds it until that row is
///   written again, the listener reconnects or the process restarts. Refreshes never read from
///   the cache: the re-read under the advisory lock goes to the database.
///
/// Close the store with ``close()`` when done with it; the `vault` command's process just exits.
public final class PostgresStore: CredentialStore, Sendable {
    /// How the store connects and what it accepts.
    public struct Options: Sendable {
        /// The longest one call may take, connecting and reconnecting included. Default 10 s.
        public var operationTimeout: Duration
        /// The longest one connection attempt may take. Default 5 s.
        public var connectTimeout: Duration
        /// The Argon2id cost when a passphrase vault is created or rekeyed.
        public var kdf: EncryptedFileStore.KDFParameters
        /// The most memory / passes an existing vault's header may ask Argon2id for.
        public var maximumKDFMemoryLimit: UInt64
        public var maximumKDFOpsLimit: UInt64
        /// Accept a key, passphrase or password file that group or others can read.
        public var allowInsecurePermissions: Bool
        /// Create the schema and the vault's header row when they are missing. On by default.
        public var createIfMissing: Bool
        /// Keep read rows in memory, invalidated by LISTEN/NOTIFY (see ``PostgresStore``). Off by default.
        public var readCache: Bool
        /// How often the cache's listener proves its connection alive; the cache serves nothing
        /// once three heartbeats have gone unanswered. Default 1 s.
        public var readCacheHeartbeat: Duration
        /// The most rows the cache holds; past it, the cache starts again from empty. Default 100,000.
        public var readCacheMaximumEntries: Int
        /// The header version a new vault is made with; tests make version 1 vaults with it to
        /// check that they still open and that a rekey brings them to the current version.
        var newVaultSchemaVersion: Int32 = PostgresSchema.currentVersion

        public init(
            operationTimeout: Duration = .seconds(10),
            connectTimeout: Duration = .seconds(5),
            kdf: EncryptedFileStore.KDFParameters = .moderate,
            maximumKDFMemoryLimit: UInt64 = 1 << 30,
            maximumKDFOpsLimit: UInt64 = 32,
            allowInsecurePermissions: Bool = false,
            createIfMissing: Bool = true,
            readCache: Bool = false,
            readCacheHeartbeat: Duration = .seconds(1),
            readCacheMaximumEntries: Int = 100_000
        ) {
            self.operationTimeout = operationTimeout
            self.connectTimeout = connectTimeout
            self.kdf = kdf
            self.maximumKDFMemoryLimit = maximumKDFMemoryLimit
            self.maximumKDFOpsLimit = maximumKDFOpsLimit
            self.allowInsecurePermissions = allowInsecurePermissions
            self.createIfMissing = createIfMissing
            self.readCache = readCache
            self.readCacheHeartbeat = readCacheHeartbeat
            self.readCacheMaximumEntries = readCacheMaximumEntries
        }
    }

    /// The read cache as `TOKEN_VAULT_DATABASE_CACHE` asks: `1` (or `true`, `yes`, `on`) turns it
    /// on; unset, empty, `0` (or `false`, `no`, `off`) leaves it off.
    /// - Throws: `invalidInput` for any other value.
    package static func readCacheFromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Bool {
        let value = (environment["TOKEN_VAULT_DATABASE_CACHE"] ?? "").lowercased()
        switch value {
        case "", "0", "false", "no", "off": return false
        case "1", "true", "yes", "on": return true
        default:
            throw VaultError(.invalidInput, "TOKEN_VAULT_DATABASE_CACHE must be 1 or 0, not \(value.debugDescription).")
        }
    }

    /// The largest secret this backend stores (4 MiB, as the file vault).
    public static let maximumSecretSize = RowSealingKeys.maximumSecretSize

    public var backend: BackendKind { .postgres }

    /// Hosts meet at the store's own lock (`pg_advisory_xact_lock`, ``withRefreshLock(on:timeout:_:)``).
    public func refreshLockPlacement() throws -> RefreshLockPlacement { .storeLock(self) }

    /// Where the vault is (no password).
    public let configuration: Configuration
    let options: Options
    let client: PostgresPool
    let logger: Logger
    /// The read cache and its listener, with ``Options/readCache``.
    let readCache: PostgresReadCache?
    private let listener: Task<Void, Never>?
    /// The keys and the vault id; replaced by a rekey.
    let sealing: Mutex<Sealing>
    /// Whether lone saves and deletes CALL the schema's procedures; cleared when the database
    /// user may not create them in a vault made before them.
    let proceduresUsable = Atomic(true)
    var usesProcedures: Bool { proceduresUsable.load(ordering: .relaxed) }
    /// How each statement runs on each connection it has run on (see
    /// ``execute(_:on:inTransaction:mayRunTwice:)``):
    /// `true`, prepared; `false`, unprepared for good (it failed there).
    let statementUse = Mutex<[PreparedOnConnection: Bool]>([:])

    struct Sealing: Sendable {
        var keys: RowSealingKeys
        var vaultID: [UInt8]
    }

    init(configuration: Configuration, options: Options, client: PostgresPool, sealing: Sealing, logger: Logger) {
        self.configuration = configuration
        self.vaultName = Self.vaultName(configuration)
        self.options = options
        self.client = client
        self.sealing = Mutex(sealing)
        self.logger = logger
        if options.readCache {
            let cache = PostgresReadCache(heartbeat: options.readCacheHeartbeat, maximumRows: max(1, options.readCacheMaximumEntries))
            let vault = vaultName
            readCache = cache
            listener = Task { await PostgresReadCache.listen(cache, client: client, vault: vault, logger: logger) }
        } else {
            readCache = nil
            listener = nil
        }
    }

    deinit {
        listener?.cancel()
        client.close()
    }

    /// Opens the vault in the database `configuration` names, creating its schema and header row
    /// on first use. The key or passphrase file is read here; a passphrase is stretched once.
    ///
    /// - Throws: ``VaultError`` with code `backendUnavailable` (unreachable, refused login, TLS
    ///   failure), `timeout`, `authenticationFailed`
    ///   (wrong key or passphrase), `integrityFailure` (a damaged header row), `notFound` (no vault
    ///   in the database and `createIfMissing` off),
    ///   `unsupportedVersion` (a newer schema), `keyFileMissing`, `insecurePermissions` or `invalidInput`.
    public static func open(
        _ configuration: Configuration,
        keySource: VaultConfiguration.KeySource,
        options: Options = Options(),
        logger: Logger = Vault.noopLogger
    ) async throws -> PostgresStore {
        let secret = try RowSealingSecret.load(keySource, allowInsecurePermissions: options.allowInsecurePermissions)
        let connector: PostgresConnector
        do {
            connector = try PostgresConnector(configuration, connectTimeout: options.connectTimeout)
        } catch {
            throw PostgresSQL.vaultError(error, what: "open the vault", vault: vaultName(configuration))
        }
        let client = PostgresPool(connector)
        do {
            let sealing = try await PostgresSchema.openVault(
                client: client, configuration: configuration, secret: secret, options: options, logger: logger)
            return PostgresStore(configuration: configuration, options: options, client: client, sealing: sealing, logger: logger)
        } catch {
            client.close()
            throw error
        }
    }

    /// Closes the pool's connections. Calls after this fail with `backendUnavailable`.
    public func close() {
        listener?.cancel()
        readCache?.setListening(false)
        client.close()
    }

    /// Whether the read cache serves gets now: it is on, its listener holds `LISTEN`, and its
    /// last heartbeat is recent. `false` without ``Options/readCache``.
    @_spi(Benchmarks)
    public var isReadCacheListening: Bool { readCache?.isServing ?? false }

    /// How many gets the read cache has served (0 without ``Options/readCache``). For the
    /// benchmark (Benchmarks/Postgres) and the tests, not an application.
    @_spi(Benchmarks)
    public var readCacheHits: Int { readCache?.hits ?? 0 }

    var current: Sealing { sealing.withLock { $0 } }

    /// The vault's name in messages (built once: a call builds a message only when it fails).
    let vaultName: String

    static func vaultName(_ configuration: Configuration) -> String {
        "the PostgreSQL vault \(configuration)"
    }

    // MARK: CredentialStore

    public func load(_ key: CredentialKey) async throws -> Data? {
        guard let cache = readCache else {
            return try await bounded("read \(key)") { connection in
                try await self.load(key, on: connection)
            }
        }
        let sealing = current
        let rowHash = sealing.keys.rowHash(key)
        let cacheKey = Data(rowHash)
        if let hit = cache.lookup(cacheKey) {
            guard let row = hit else { return nil }
            return try open(row.sealed, key: key, rowHash: rowHash, version: row.version, sealing: sealing)
        }
        let ticket = cache.ticket()
        let row = try await bounded("read \(key)") { connection in
            try await self.loadRow(rowHash, sealing: sealing, on: connection)
        }
        guard let row else {
            if let ticket { cache.fill(cacheKey, nil, ticket: ticket) }
            return nil
        }
        let secret = try open(row.sealed, key: key, rowHash: rowHash, version: row.version, sealing: sealing)
        if let ticket { cache.fill(cacheKey, row, ticket: ticket) }  // only rows that opened
        return secret
    }

    public func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) async throws {
        try Self.checkSize(secret, key)
        defer { readCache?.invalidate(rowHashes: [Data(current.keys.rowHash(key))]) }
        // Acknowledged only once committed: a lone upsert's own reply comes before its commit
        // (the extended protocol commits at Sync), and a server that dies in between has sent a
        // reply for a write it never committed. So one CALL of a procedure that commits before
        // it returns (one round trip), or, without the procedure, BEGIN, upsert, COMMIT (three).
        _ = try await bounded("save \(key)") { connection in
            try await self.committedAlone(
                on: connection,
                { try await self.save(secret, for: key, on: connection, alone: true) },
                orInTransaction: { try await self.save(secret, for: key, on: connection) })
        }
    }

    /// Saves every entry in one transaction: all of them or none.
    public func saveAll(_ entries: [CredentialWrite]) async throws {
        guard !entries.isEmpty else { return }
        for entry in entries { try Self.checkSize(entry.secret, entry.key) }
        let items = entries.map { ($0.key, $0.secret) }
        defer { readCache?.invalidate(rowHashes: items.map { Data(current.keys.rowHash($0.0)) }) }
        try await bounded("save \(entries.count) entries") { connection in
            try await PostgresSQL.transaction(on: connection) {
                for (key, secret) in items {
                    try await self.save(secret, for: key, on: connection)
                }
            }
        }
    }

    @discardableResult
    public func delete(_ key: CredentialKey) async throws -> Bool {
        defer { readCache?.invalidate(rowHashes: [Data(current.keys.rowHash(key))]) }
        return try await bounded("delete \(key)") { connection in
            try await self.committedAlone(
                on: connection,
                { try await self.delete(key, on: connection, alone: true) },
                orInTransaction: { try await self.delete(key, on: connection) })
        }
    }

    public func keys(service: String?) async throws -> [CredentialKey] {
        try await bounded("list the entries") { connection in
            try await self.keys(service: service, on: connection)
        }
    }

    /// `alone` (one CALL of a procedure of ``PostgresSchema/procedureStatements``, which
    /// commits before it replies) when the vault has the procedures, creating them first in a
    /// vault made before them; `inTransaction` between BEGIN and COMMIT when the database user
    /// may not create them. Either way the call returns only once the write is committed.
    func committedAlone<Result>(
        on connection: PostgresConnection, _ alone: () async throws -> Result, orInTransaction inTransaction: () async throws -> Result
    ) async throws -> Result {
        if proceduresUsable.load(ordering: .relaxed) {
            do {
                return try await alone()
            } catch let error as PSQLError where error.serverInfo?[.sqlState] == "42883" {
                // undefined_function: a vault from before the procedures.
                do {
                    try await PostgresSchema.createProcedures(on: connection)
                    return try await alone()
                } catch let error as PSQLError where error.serverInfo?[.sqlState] == "42501" {
                    logger.debug("the procedures cannot be created here; saves and deletes use BEGIN and COMMIT")
                    proceduresUsable.store(false, ordering: .relaxed)
                }
            }
        }
        return try await PostgresSQL.transaction(on: connection) { try await inTransaction() }
    }

    static func checkSize(_ secret: Data, _ key: CredentialKey) throws {
        guard secret.count <= maximumSecretSize else {
            throw VaultError(
                .tooLarge,
                "The secret for \(key) is \(secret.count) bytes; the PostgreSQL backend stores at most \(maximumSecretSize) bytes per entry.")
        }
    }

    // MARK: Rows, on one connection (the pool's, or a refresh transaction's)

    /// The version after `version`. Versions come from the database, where an administrator can
    /// set any value: one at `Int64.max` (which no write of TokenVault makes) is damage
    /// (`integrityFailure`, exit 5), never an arithmetic trap.
    static func version(after version: Int64, vault: String) throws -> Int64 {
        let (next, overflow) = version.addingReportingOverflow(1)
        guard !overflow else {
            throw VaultError(
                .integrityFailure,
                "A row of \(vault) has the highest possible version (\(Int64.max)), which no write of TokenVault makes: the table was changed behind its back. Restore the row from a backup, or delete it in SQL and save the entry again.")
        }
        return next
    }

    /// `"TVP1" ‖ vault id (16) ‖ row hash (32) ‖ version (u64 LE)`.
    static func associatedData(vaultID: [UInt8], rowHash: [UInt8], version: Int64) -> [UInt8] {
        var ad = Array("TVP1".utf8) + vaultID + rowHash
        ad.appendLittleEndian(UInt64(bitPattern: version))
        return ad
    }

    /// `inTransaction`: `connection` is in the caller's transaction (a refresh's).
    func load(_ key: CredentialKey, on connection: PostgresConnection, inTransaction: Bool = false) async throws -> Data? {
        let sealing = current
        let rowHash = sealing.keys.rowHash(key)
        guard let row = try await loadRow(rowHash, sealing: sealing, on: connection, inTransaction: inTransaction) else { return nil }
        return try open(row.sealed, key: key, rowHash: rowHash, version: row.version, sealing: sealing)
    }

    /// The row at `rowHash` as stored (not opened), after checking the vault's identity.
    func loadRow(
        _ rowHash: [UInt8], sealing: Sealing, on connection: PostgresConnection, inTransaction: Bool = false
    ) async throws -> PostgresReadCache.Row? {
        // A read may run again: outside a transaction, a failed prepared read is retried unprepared.
        let found = try await execute(
            LoadRowStatement(rowHash: Data(rowHash)), on: connection, inTransaction: inTransaction, mayRunTwice: true
        ).last
        guard let found else { throw headerMissing() }
        try checkVaultID(found.0, sealing)
        guard let version = found.1 else { return nil }
        guard let sealed = found.2 else {
            // The server sent the row's length, not the row: it is larger than any row TokenVault writes.
            if let length = found.3 { throw rowTooLarge(length, key: nil) }
            return nil
        }
        return PostgresReadCache.Row(version: version, sealed: Array(sealed))
    }

    func open(_ sealed: [UInt8], key: CredentialKey, rowHash: [UInt8], version: Int64, sealing: Sealing) throws -> Data {
        let (opened, secret) = try openRow(sealed, rowHash: rowHash, version: version, sealing: sealing, expected: key)
        guard opened == key else { throw tampered(key) }
        return secret
    }

    /// Opens a row: its key and secret, checked against the row's hash, version and vault.
    func openRow(
        _ sealed: [UInt8], rowHash: [UInt8], version: Int64, sealing: Sealing, expected: CredentialKey? = nil
    ) throws -> (key: CredentialKey, secret: Data) {
        let ad = Self.associatedData(vaultID: sealing.vaultID, rowHash: rowHash, version: version)
        guard let opened = try sealing.keys.open(sealed, associatedData: ad),
            RowSealingKeys.constantTimeEqual(sealing.keys.rowHash(opened.key), rowHash)
        else { throw tampered(expected) }
        return opened
    }

    /// The longest sealed row TokenVault writes (the largest secret, the longest names, the
    /// sealing overhead), with room to spare; a longer row is damage and is never read whole.
    static let maximumRowLength = RowSealingKeys.maximumSealedLength + 4096

    func rowTooLarge(_ length: Int32, key: CredentialKey?) -> VaultError {
        VaultError(
            .integrityFailure,
            "A row\(key.map { " for \($0)" } ?? "") in \(vaultName) is \(length) bytes, more than any row TokenVault writes (at most \(Self.maximumRowLength)): it was changed behind TokenVault's back, and it was not read. Restore it from a backup, or delete it in SQL and save the entry again.")
    }

    func tampered(_ key: CredentialKey?) -> VaultError {
        VaultError(
            .integrityFailure,
            "The row\(key.map { " for \($0)" } ?? "") in \(vaultName) is damaged or was tampered with: it does not authenticate for its place (vault, row and version). Restore it from a backup, or delete it and save it again.")
    }

    /// Writes the entry on `connection`: in the caller's transaction, or, `alone`, as one CALL
    /// of `tokenvault_save_v1` that commits before it replies (never inside a transaction block).
    /// Returns the version the row now has.
    @discardableResult
    func save(_ secret: Data, for key: CredentialKey, on connection: PostgresConnection, alone: Bool = false) async throws -> Int64 {
        let sealing = current
        let rowHash = sealing.keys.rowHash(key)
        let serviceHash = sealing.keys.serviceHash(key.service)
        // Versions rise with every write of a row: the time in microseconds, or one past the
        // stored version when that is higher (another writer's clock, or a write this microsecond).
        var version = Int64(Date().timeIntervalSince1970 * 1_000_000)
        for _ in 0..<8 {
            let sealed = try sealing.keys.seal(
                key, secret: secret, associatedData: Self.associatedData(vaultID: sealing.vaultID, rowHash: rowHash, version: version))
            // One statement (or one procedure), so one transaction (or the caller's): the row and
            // its NOTIFY (for the read caches of every process) commit together.
            var written = false
            if alone {
                let call = SaveCallStatement(
                    rowHash: Data(rowHash), serviceHash: Data(serviceHash), version: version, sealed: Data(sealed),
                    vaultID: Data(sealing.vaultID), payload: PostgresReadCache.payload(rowHash))
                written = try await execute(call, on: connection, inTransaction: false, mayRunTwice: false).last.flatMap { $0 } ?? false
            } else {
                let rows = try await connection.query(
                    """
                    WITH written AS (
                        INSERT INTO tokenvault_entries (row_hash, service_hash, version, sealed)
                        SELECT \(Data(rowHash)), \(Data(serviceHash)), \(version), \(Data(sealed))
                        FROM tokenvault_header WHERE id = 1 AND vault_id = \(Data(sealing.vaultID))
                        ON CONFLICT (row_hash) DO UPDATE SET service_hash = EXCLUDED.service_hash, version = EXCLUDED.version, sealed = EXCLUDED.sealed
                        WHERE tokenvault_entries.version < EXCLUDED.version
                        RETURNING version)
                    SELECT version, pg_notify(\(PostgresReadCache.channel), \(PostgresReadCache.payload(rowHash))) FROM written
                    """, logger: logger)
                for try await _ in rows { written = true }
            }
            if written { return version }
            // Nothing written: the vault was rekeyed, or the stored version is not lower.
            let check = try await connection.query(
                """
                SELECT h.vault_id, e.version FROM tokenvault_header h
                LEFT JOIN tokenvault_entries e ON e.row_hash = \(Data(rowHash)) WHERE h.id = 1
                """, logger: logger)
            var state: (Data, Int64?)?
            for try await row in check.decode((Data, Int64?).self) { state = row }
            guard let state else { throw headerMissing() }
            try checkVaultID(state.0, sealing)
            version = try Self.version(after: max(version, state.1 ?? 0), vault: vaultName)
        }
        throw VaultError(.timeout, "Other writers kept replacing \(key) in \(vaultName); the save was given up after 8 tries.")
    }

    /// Deletes the entry on `connection`: in the caller's transaction, or, `alone`, as one CALL
    /// of `tokenvault_delete_v1` that commits before it replies.
    func delete(_ key: CredentialKey, on connection: PostgresConnection, alone: Bool = false) async throws -> Bool {
        let sealing = current
        let rowHash = sealing.keys.rowHash(key)
        if alone {
            let rows = try await connection.query(
                """
                CALL tokenvault_delete_v1(\(Data(rowHash)), \(Data(sealing.vaultID)), \(PostgresReadCache.channel),
                                          \(PostgresReadCache.payload(rowHash)), NULL)
                """, logger: logger)
            var deleted = false
            for try await (done) in rows.decode(Bool?.self) { deleted = done ?? false }
            if !deleted { try await checkHeader(on: connection, sealing) }
            return deleted
        }
        let rows = try await connection.query(
            """
            WITH deleted AS (
                DELETE FROM tokenvault_entries WHERE row_hash = \(Data(rowHash))
                AND EXISTS (SELECT 1 FROM tokenvault_header WHERE id = 1 AND vault_id = \(Data(sealing.vaultID)))
                RETURNING 1)
            SELECT pg_notify(\(PostgresReadCache.channel), \(PostgresReadCache.payload(rowHash))) FROM deleted
            """, logger: logger)
        var deleted = false
        for try await _ in rows { deleted = true }
        if !deleted { try await checkHeader(on: connection, sealing) }
        return deleted
    }

    func keys(service: String?, on connection: PostgresConnection) async throws -> [CredentialKey] {
        let sealing = current
        let serviceHash = service.map { Data(sealing.keys.serviceHash($0)) }
        let rows = try await connection.query(
            """
            SELECT h.vault_id, e.row_hash, e.version,
                   CASE WHEN octet_length(e.sealed) <= \(Int32(Self.maximumRowLength)) THEN e.sealed END, octet_length(e.sealed)
            FROM tokenvault_header h
            LEFT JOIN tokenvault_entries e ON (\(serviceHash)::bytea IS NULL OR e.service_hash = \(serviceHash)::bytea)
            WHERE h.id = 1
            """, logger: logger)
        var keys: [CredentialKey] = []
        var sawHeader = false
        for try await (vaultID, rowHash, version, sealed, length) in rows.decode((Data, Data?, Int64?, Data?, Int32?).self) {
            if !sawHeader {
                try checkVaultID(vaultID, sealing)
                sawHeader = true
            }
            if sealed == nil, let length { throw rowTooLarge(length, key: nil) }
            guard let rowHash, let version, let sealed else { continue }
            let key = try openRow(Array(sealed), rowHash: Array(rowHash), version: version, sealing: sealing).key
            if let service, key.service != service {
                throw VaultError(
                    .integrityFailure, "A row listed under another service in \(vaultName) was tampered with (its service hash was changed).")
            }
            keys.append(key)
        }
        guard sawHeader else { throw headerMissing() }
        return keys.sorted()
    }

    // MARK: The header's identity

    func checkVaultID(_ stored: Data, _ sealing: Sealing) throws {
        guard RowSealingKeys.constantTimeEqual(Array(stored), sealing.vaultID) else {
            throw VaultError(
                .authenticationFailed,
                "\(vaultName) was rekeyed (or replaced) since this process opened it; open it again with its current key.")
        }
    }

    func checkHeader(on connection: PostgresConnection, _ sealing: Sealing) async throws {
        let rows = try await connection.query("SELECT vault_id FROM tokenvault_header WHERE id = 1", logger: logger)
        var stored: Data?
        for try await (vaultID) in rows.decode(Data.self) { stored = vaultID }
        guard let stored else { throw headerMissing() }
        try checkVaultID(stored, sealing)
    }

    func headerMissing() -> VaultError {
        VaultError(
            .integrityFailure,
            "The header row of \(vaultName) is missing (tokenvault_header is empty): it was deleted. Restore it from a backup; without it no entry can be opened.")
    }
}

/// A prepared statement's name and a connection it ran on.
struct PreparedOnConnection: Hashable, Sendable {
    let name: String
    let connection: PostgresConnection.ID
}

extension PostgresStore {
    /// The rows of `statement`: unprepared the first time it runs on `connection`, prepared the
    /// second time, and only bound and executed after that.
    ///
    /// Preparing costs a round trip of its own (postgres-nio waits for the statement's
    /// description before it binds), so a connection that runs a statement once (the `vault`
    /// command's, say) never prepares it; one that runs it again pays that round trip once.
    ///
    /// postgres-nio keeps a failed preparation for the life of its connection and answers every
    /// later use of that statement there with the same error. So when the statement fails with
    /// an error from the server (it may have failed to prepare: a procedure not created yet, a
    /// table being altered, a pooler that does not keep prepared statements), it runs unprepared
    /// on that connection from then on: slower, never stuck. Outside a transaction it also runs
    /// again unprepared at once when that is safe, so the caller gets the statement's own answer:
    /// when `mayRunTwice` (a read), or when the server says the prepared statement never ran
    /// (SQLSTATE 26000 or 42P05, what a pooler that lost or mixed up prepared statements
    /// answers). Otherwise the error is thrown as it is.
    static let statementUseLimit = 1024

    func execute<Statement: PostgresPreparedStatement>(
        _ statement: Statement, on connection: PostgresConnection, inTransaction: Bool, mayRunTwice: Bool
    ) async throws -> [Statement.Row] {
        let key = PreparedOnConnection(name: Statement.name, connection: connection.id)
        var result: [Statement.Row] = []
        let prepare = statementUse.withLock { use in
            guard let prepare = use[key] else {
                // The pool replaces idle connections, each with a new id: forgetting them all
                // now and then bounds the table (a forgotten connection runs each statement
                // unprepared once more; postgres-nio still knows what it prepared there).
                if use.count >= Self.statementUseLimit { use.removeAll(keepingCapacity: true) }
                use[key] = true  // the next time
                return false
            }
            return prepare
        }
        if prepare {
            do {
                for try await row in try await connection.execute(statement, logger: logger) { result.append(row) }
                return result
            } catch let error as PSQLError where error.serverInfo != nil {
                statementUse.withLock { $0[key] = false }
                let neverRan = ["26000", "42P05"].contains(error.serverInfo?[.sqlState])
                guard !inTransaction, mayRunTwice || neverRan else { throw error }
                logger.debug(
                    "a prepared statement failed; it runs unprepared on this connection from now on",
                    metadata: ["statement": "\(Statement.name)", "sqlstate": "\(error.serverInfo?[.sqlState] ?? "")"])
                result = []
            }
        }
        let rows = try await connection.query(PostgresQuery(unsafeSQL: Statement.sql, binds: try statement.makeBindings()), logger: logger)
        for try await row in rows { result.append(try statement.decodeRow(row)) }
        return result
    }
}

/// A get's one statement, prepared by a connection that runs it twice: each later get sends only
/// Bind and Execute, where an unnamed statement is parsed and planned every time (a third of a get's
/// time against a loopback server, measured with `Scripts/bench-postgres`).
///
/// The vault's identity comes with the row, so a rekeyed or replaced vault is noticed in the
/// same round trip.
///
/// A row larger than any TokenVault writes (an administrator's, or an attacker's with the table's
/// rights) is not sent: only its length (``PostgresStore/maximumRowLength``), so that a 200 MB row
/// costs a get neither the transfer nor the memory.
struct LoadRowStatement: PostgresPreparedStatement {
    static let name = "tokenvault_load_row_v2"
    static let sql = """
        SELECT h.vault_id, e.version, CASE WHEN octet_length(e.sealed) <= $2 THEN e.sealed END, octet_length(e.sealed)
        FROM tokenvault_header h LEFT JOIN tokenvault_entries e ON e.row_hash = $1 WHERE h.id = 1
        """
    static let bindingDataTypes: [PostgresDataType] = [.bytea, .int4]
    typealias Row = (Data, Int64?, Data?, Int32?)

    let rowHash: Data

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 2)
        try bindings.append(rowHash)
        bindings.append(Int32(PostgresStore.maximumRowLength))
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try row.decode(Row.self)
    }
}

/// A lone save's one statement: a CALL of the procedure that writes the row, notifies the read
/// caches and commits before it replies (``PostgresSchema/procedureStatements``).
struct SaveCallStatement: PostgresPreparedStatement {
    static let name = "tokenvault_save_call_v1"
    static let sql = "CALL tokenvault_save_v1($1, $2, $3, $4, $5, $6, $7, NULL)"
    static let bindingDataTypes: [PostgresDataType] = [.bytea, .bytea, .int8, .bytea, .bytea, .text, .text]
    typealias Row = Bool?

    let rowHash: Data
    let serviceHash: Data
    let version: Int64
    let sealed: Data
    let vaultID: Data
    let payload: String

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 7)
        try bindings.append(rowHash)
        try bindings.append(serviceHash)
        bindings.append(version)
        try bindings.append(sealed)
        try bindings.append(vaultID)
        bindings.append(PostgresReadCache.channel)
        bindings.append(payload)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try row.decode(Bool?.self)
    }
}
#endif
