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
        Self.lockKey(rowHash: current.keys.rowHash(key))
    }

    /// The advisory lock key of the row at `rowHash` (its first 8 bytes, little-endian).
    static func lockKey(rowHash: some Collection<UInt8>) -> Int64 {
        var value: UInt64 = 0
        for byte in rowHash.prefix(8).reversed() { value = value << 8 | UInt64(byte) }
        return Int64(bitPattern: value)
    }

    /// The protocol, step by step (the spin model in Models/ follows these steps). Every step
    /// that talks to the database is bounded (``Options/operationTimeout``; the lock wait by
    /// `timeout` on top): a connection that dies or stops answering ends in a clear error, never
    /// a hang.
    ///
    /// 1. A connection from the pool; `BEGIN`; `lock_timeout` set for this transaction to
    ///    `timeout`; `idle_in_transaction_session_timeout` set so that a holder that hangs
    ///    (stopped, not dead) loses the lock, and its commit fails, instead of blocking everyone;
    ///    keepalives and the client check (``deadPeerSettings``) so that a holder or waiter that
    ///    is cut off or dead without a word loses the lock in about 24 s.
    /// 2. `SELECT pg_advisory_xact_lock(k)`: waits at most `timeout` (then `timeout`, SQLSTATE 55P03).
    ///    2a. If the entry holds the journal of a flight that a database restart cut off from this
    ///    lock while its request may still be at the server, `ROLLBACK`, wait outside the lock
    ///    until its answer is committed or its time is over, and start again
    ///    (``flightCutOffByRestart(_:on:)``).
    /// 3. `body` (``Vault``'s locked flight) reads the row again through the view, on this
    ///    connection, and if it is still stale commits the refresh journal on another connection
    ///    (``LockedView/commitJournal(_:for:)``: fenced by the version read here and by this
    ///    backend's hold on the lock), POSTs the refresh to the token endpoint, then writes the new
    ///    token (or the stored `invalid_grant` verdict) through the view.
    /// 4. `COMMIT`, which releases the lock.
    ///
    /// Steps 1 and 2 are retried on a new connection when the connection fails. After the lock,
    /// the token request is never repeated; what the view writes is: when the connection is lost
    /// (a restart, `pg_terminate_backend`, a statement past its bound) between the re-read and
    /// the commit, the transaction is gone with it, and each write of the view is made again on a
    /// new connection, under the same advisory lock, fenced by the version the row had when the
    /// view read it (``replay(_:lockKey:flight:)``). So a refresh answer already received is
    /// committed unless another writer changed the row since (then that writer's token stays,
    /// and the caller gets `backendUnavailable` saying so) or the database stays unreachable past
    /// the bound (`backendUnavailable`, exit 6, naming what was lost).
    package func withRefreshLock<Result: Sendable>(
        on key: CredentialKey, timeout: Duration, _ body: (any CredentialStore) async throws -> Result
    ) async throws -> Result {
        let lockKey = lockKey(for: key)
        let waitMilliseconds = max(1, Int(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000))
        // Long enough for a token request with its retries; a stopped holder is cut off after it.
        let idleMilliseconds = waitMilliseconds + 60_000
        let bound = options.operationTimeout
        let vault = vaultName
        var pause = Duration.milliseconds(20)
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: bound + timeout)
        while true {
            // Steps 1 and 2: a connection in a transaction that holds the lock, or an error.
            let held: HeldConnection
            let backendPID: Int32
            var cutOff: CutOffFlight?
            do {
                held = try await holdConnection(within: bound, what: "take the refresh lock of \(key)")
            } catch {
                guard PostgresSQL.isConnectionFailure(error), clock.now < deadline else {
                    throw PostgresSQL.vaultError(error, what: "take the refresh lock of \(key)", vault: vault)
                }
                try await Task.sleep(for: pause)
                pause = min(pause * 2, .milliseconds(500))
                continue
            }
            do {
                let connection = held.connection
                try await Self.withDeadline(bound, what: "begin the refresh of \(key)", vault: vault) {
                    // Read committed (whatever the server's default): the answer's save must see the
                    // journal that another connection committed during the flight.
                    try await connection.run("BEGIN ISOLATION LEVEL READ COMMITTED", logger: PostgresSQL.silent)
                    try await connection.run(
                        """
                        SELECT set_config('lock_timeout', \("\(waitMilliseconds)ms"), true),
                               set_config('idle_in_transaction_session_timeout', \("\(idleMilliseconds)ms"), true)
                        """, logger: PostgresSQL.silent)
                    try await connection.run(PostgresQuery(unsafeSQL: Self.deadPeerSettings), logger: PostgresSQL.silent)
                }
                // The backend's pid names the lock's holder in pg_locks (the journal's fence).
                backendPID = try await Self.withDeadline(bound + timeout, what: "take the refresh lock of \(key)", vault: vault) {
                    let rows = try await connection.query(
                        "SELECT pg_advisory_xact_lock(\(lockKey))::text, pg_backend_pid()", logger: PostgresSQL.silent)
                    var pid: Int32?
                    for try await (_, backend) in rows.decode((String?, Int32).self) { pid = backend }
                    guard let pid else { throw VaultError(.io, "PostgreSQL answered no row to the refresh lock of \(key) in \(vault).") }
                    return pid
                }
                cutOff = try await Self.withDeadline(bound, what: "read \(key) under the refresh lock", vault: vault) { [self] in
                    try await self.flightCutOffByRestart(key, on: connection)
                }
            } catch {
                // The server rolls the transaction back when its connection ends.
                held.abandon()
                held.release()
                if let psql = error as? PSQLError, psql.serverInfo?[.sqlState] == "55P03" {
                    throw VaultError(
                        .timeout,
                        "Another host or process held the refresh lock of \(key) in \(vault) for longer than \(timeout); gave up waiting.")
                }
                guard PostgresSQL.isConnectionFailure(error), clock.now < deadline else {
                    throw PostgresSQL.vaultError(error, what: "take the refresh lock of \(key)", vault: vault)
                }
                try await Task.sleep(for: pause)
                pause = min(pause * 2, .milliseconds(500))
                continue
            }
            if let cutOff {
                // Step 2a: the lock goes back (this transaction wrote nothing) and the cut-off
                // flight is waited for outside it, since its answer is committed under this lock.
                let connection = held.connection
                do {
                    try await Self.withDeadline(bound, what: "end the refresh transaction of \(key)", vault: vault) {
                        try await connection.run("ROLLBACK", logger: PostgresSQL.silent)
                    }
                } catch {
                    held.abandon()
                }
                held.release()
                await waitForCutOffFlight(cutOff, key: key)
                continue
            }
            defer { held.release() }
            return try await lockedFlight(key, lockKey: lockKey, backendPID: backendPID, timeout: timeout, on: held, body)
        }
    }

    /// How long after its journal was written a flight may still be waiting for its token
    /// endpoint's answer: the default deadline of a whole refresh (``TokenEndpointClient/defaultDeadline``,
    /// 20 s) and 5 s for the answer's commit and the hosts' clocks.
    static let cutOffFlightWait: Double = 25

    /// A flight whose journal the new lock holder finds, and whose lock a database restart ended
    /// while its token request may still be at the server (``flightCutOffByRestart(_:on:)``).
    struct CutOffFlight: Sendable {
        let rowHash: Data
        /// The row's version with the flight's journal.
        let version: Int64
        /// How long the flight may still be waiting for its answer.
        let remaining: Duration
    }

    /// Step 2a of ``withRefreshLock(on:timeout:_:)``. A restart (or a crash) of the database
    /// ends every session, and with the holder's the advisory lock, while the holder may be alive
    /// with its token request at the server: its answer is then committed on a new connection
    /// (``replay(_:lockKey:flight:timeout:)``). Presenting the journal's refresh token again now
    /// would overtake that request, and a server that rotates strictly revokes the grant (Scripts/fleet,
    /// strict rotation, a restart during the flight). So when the entry holds a journal written
    /// before the server's last start (`pg_postmaster_start_time()`), less than
    /// ``cutOffFlightWait`` ago by the server's clock, the flight is waited for. A journal left by a
    /// holder that died (`kill -9`, no restart) is presented again at once, as before, so that a
    /// server's reuse interval still covers it.
    func flightCutOffByRestart(_ key: CredentialKey, on connection: PostgresConnection) async throws -> CutOffFlight? {
        let sealing = current
        let rowHash = sealing.keys.rowHash(key)
        // A row that does not open is the body's to report, as it reads the row again.
        guard let row = try await loadRow(rowHash, sealing: sealing, on: connection, inTransaction: true),
            let secret = try? self.open(row.sealed, key: key, rowHash: rowHash, version: row.version, sealing: sealing),
            let entry = try? StoredEntry(storedForm: secret), let presenting = (try? entry.wasInterrupted()) ?? nil
        else { return nil }
        let rows = try await connection.query(
            "SELECT extract(epoch FROM pg_postmaster_start_time())::float8, extract(epoch FROM clock_timestamp())::float8",
            logger: PostgresSQL.silent)
        var times: (started: Double, now: Double)?
        for try await (started, now) in rows.decode((Double, Double).self) { times = (started, now) }
        guard let times else { return nil }
        // The restart came after the journal (by the presenting host's clock: hosts whose clocks
        // differ by more than the time between the two are not told apart, and the journal's
        // token is presented again as after a holder that died).
        guard times.started > presenting.latestStart else { return nil }
        let remaining = presenting.latestStart + Self.cutOffFlightWait - times.now
        guard remaining > 0 else { return nil }
        return CutOffFlight(rowHash: Data(rowHash), version: row.version, remaining: .milliseconds(Int64(remaining * 1000)))
    }

    /// Waits, holding no lock, until the row of a cut-off flight changes (its holder committed
    /// the answer, or a verdict) or the flight's time is over. A read that fails (the database
    /// still restarting) is tried again at the next poll.
    private func waitForCutOffFlight(_ flight: CutOffFlight, key: CredentialKey) async {
        logger.notice(
            "a database restart ended the refresh lock of a flight whose token request may still be at the server; waiting for its answer instead of presenting its refresh token again",
            metadata: ["key": "\(key)", "at_most_ms": "\(flight.remaining.components.seconds * 1000 + flight.remaining.components.attoseconds / 1_000_000_000_000_000)"])
        let clock = ContinuousClock()
        let end = clock.now.advanced(by: flight.remaining)
        let rowHash = Array(flight.rowHash)
        while clock.now < end {
            do {
                try await Task.sleep(for: .milliseconds(200))
                let version = try await bounded("read \(key) while a cut-off refresh finishes", within: min(options.operationTimeout, end - clock.now)) {
                    [self] connection in
                    try await self.loadRow(rowHash, sealing: self.current, on: connection)?.version
                }
                if version != flight.version { return }
            } catch {
                if Task.isCancelled { return }
            }
        }
    }

    /// How the server notices that the host holding (or waiting for) a refresh lock is gone,
    /// for this transaction only (`set_config(…, true)`; every setting is one a plain user may
    /// change). A host that is cut off from the network or loses power sends no FIN or RST: its
    /// backend would sit idle in the transaction, holding the advisory lock, until the kernel's
    /// default keepalive (two hours) or `idle_in_transaction_session_timeout` (the lock wait plus
    /// 60 s) ends it, and every other host would wait that long.
    /// - `tcp_keepalives_idle` 18 s, `_interval` 2 s, `_count` 3: the backend of a silent peer
    ///   ends about 24 s after the last packet it sent, which rolls the transaction back and
    ///   frees the lock (measured by Scripts/fleet, see Backends.md).
    /// - `tcp_user_timeout` 24 s (PostgreSQL 12 and later): the same when the server has data
    ///   in flight that the peer never acknowledges (keepalives are not sent then).
    /// - `client_connection_check_interval` 2 s (PostgreSQL 14 and later, on Linux): a backend
    ///   still waiting in `pg_advisory_xact_lock` for a client that has gone notices within 2 s,
    ///   instead of taking the lock for nobody once it is free.
    /// Why 24 s and not less: the lock must outlive the holder's token request. A holder cut off
    /// before its request reached the token endpoint goes on trying until its deadline (20 s by
    /// default, `TokenEndpointClient.defaultDeadline`); with the lock dropped at 10 s, another
    /// host refreshed, and the cut-off holder's retry then reached the server once the link was
    /// back and presented the spent refresh token (Scripts/fleet found it). So the lock is dropped
    /// after the default deadline and before the waiters' 30 s lock wait runs out.
    /// A setting the server does not know is skipped (`current_setting(…, true)` is NULL).
    /// Over a Unix socket the TCP settings do nothing, and nothing is needed.
    static let deadPeerSettings = """
        SELECT set_config('tcp_keepalives_idle', '18', true),
               set_config('tcp_keepalives_interval', '2', true),
               set_config('tcp_keepalives_count', '3', true),
               CASE WHEN current_setting('tcp_user_timeout', true) IS NOT NULL
                    THEN set_config('tcp_user_timeout', '24000', true) END,
               CASE WHEN current_setting('client_connection_check_interval', true) IS NOT NULL
                    THEN set_config('client_connection_check_interval', '2000', true) END
        """

    /// Steps 3 and 4 of ``withRefreshLock(on:timeout:_:)``, on a connection that holds the lock.
    private func lockedFlight<Result: Sendable>(
        _ key: CredentialKey, lockKey: Int64, backendPID: Int32, timeout: Duration, on held: HeldConnection,
        _ body: (any CredentialStore) async throws -> Result
    ) async throws -> Result {
        let connection = held.connection
        let vault = vaultName
        // Step 3.
        let outcome: Swift.Result<Result, any Error>
        let view = LockedView(store: self, held: held, lockKey: lockKey, backendPID: backendPID, flight: key, timeout: timeout)
        // The read cache forgets what the view wrote once the commit is over (other processes
        // hear the NOTIFY that commits with it).
        defer { readCache?.invalidate(rowHashes: view.written.rows) }
        do {
            outcome = .success(try await body(view))
        } catch {
            outcome = .failure(error)
        }
        // A view whose connection was lost has made its writes durable on another one already.
        if view.written.isLost { return try outcome.get() }
        // Step 4: commit on both paths, so that a stored verdict outlives its error.
        do {
            try held.checkOpen(to: "commit the refresh of \(key)", vault: vault)
            try await Self.withDeadline(options.operationTimeout, what: "commit the refresh of \(key)", vault: vault) {
                try await connection.run("COMMIT", logger: PostgresSQL.silent)
            }
        } catch {
            let pending = view.written.writes
            if Self.isLoss(error) {
                held.abandon()
                // The transaction went with its connection (or its COMMIT's answer did): what it
                // wrote is written again, fenced, on a new connection.
                if !pending.isEmpty {
                    logger.notice(
                        "the refresh transaction lost its connection before its commit was confirmed; writing its result again",
                        metadata: ["key": "\(key)"])
                    do {
                        try await replay(pending, lockKey: lockKey, flight: key, timeout: timeout)
                    } catch {
                        // A refusal (a stored verdict that did not stay) still says what the user must do.
                        if case .failure(let refusal) = outcome { throw refusal }
                        throw error
                    }
                }
                return try outcome.get()
            }
            let failure = PostgresSQL.vaultError(error, what: "commit the refresh of \(key)", vault: vault)
            logger.error(
                "the refresh transaction could not commit; what it wrote is lost",
                metadata: ["key": "\(key)", "code": "\(failure.code)"])
            if case .failure(let error) = outcome { throw error }
            if pending.isEmpty { return try outcome.get() }
            throw VaultError(
                .backendUnavailable,
                "The refresh of \(key) could not be committed to \(vault) (\(failure.message)); if the server rotated the refresh token, the new one is lost and a new login may be needed.",
                underlying: failure)
        }
        return try outcome.get()
    }

    /// Whether `error` means the connection (and so the transaction on it) is gone or unusable:
    /// a lost connection, or a statement past its bound (``withDeadline(_:what:vault:watch:_:)``).
    static func isLoss(_ error: any Error) -> Bool {
        if let error = error as? VaultError { return error.code == .backendUnavailable }
        return PostgresSQL.isConnectionFailure(error)
    }

    /// Makes the writes of a refresh transaction whose connection was lost again, in one new
    /// transaction under the same advisory lock, each fenced by the version its row had when the
    /// lost transaction read it: a row that another writer changed since is left as that writer
    /// left it (`backendUnavailable`, naming what was not written). A write the lost `COMMIT`
    /// did make (its version is in the row) is not made twice. Retried on a new connection within
    /// ``Options/operationTimeout`` plus the flight's lock `timeout`: an answer already received
    /// waits for a restarting database as long as a refresh waits for its lock.
    @discardableResult
    func replay(_ writes: [LockedView.Write], lockKey: Int64, flight key: CredentialKey, timeout: Duration) async throws -> [Data: Int64?] {
        do {
            return try await replayOnce(writes, lockKey: lockKey, flight: key, within: options.operationTimeout + timeout)
        } catch let error as VaultError where error.underlying is ReplayConflict {
            throw error
        } catch {
            let failure = PostgresSQL.vaultError(error, what: "save the refresh of \(key) again", vault: vaultName)
            logger.error(
                "the refresh answer could not be committed after the connection was lost",
                metadata: ["key": "\(key)", "code": "\(failure.code)"])
            throw VaultError(
                .backendUnavailable,
                "The token endpoint answered the refresh of \(key), but the connection to \(vaultName) was lost before the answer was committed, and it could not be committed on a new connection either (\(failure.message)). The entry keeps the refresh token it had: the next refresh presents it again, which a server with a reuse interval accepts; a server that rotates strictly refuses it, and then a new login is needed.",
                underlying: failure)
        }
    }

    private func replayOnce(
        _ writes: [LockedView.Write], lockKey: Int64, flight key: CredentialKey, within limit: Duration
    ) async throws -> [Data: Int64?] {
        let waitMilliseconds = max(1, Int(options.operationTimeout.components.seconds * 1000))
        let vault = vaultName
        return try await bounded("save the refresh of \(key) again after its connection was lost", within: limit) { connection in
            try await PostgresSQL.transaction(on: connection) { () async throws -> [Data: Int64?] in
                var versions: [Data: Int64?] = [:]
                try await connection.run("SELECT set_config('lock_timeout', \("\(waitMilliseconds)ms"), true)", logger: PostgresSQL.silent)
                try await connection.run(PostgresQuery(unsafeSQL: Self.deadPeerSettings), logger: PostgresSQL.silent)
                try await connection.run("SELECT pg_advisory_xact_lock(\(lockKey))", logger: PostgresSQL.silent)
                for write in writes {
                    let sealing = self.current
                    let stored = try await self.loadRow(Array(write.rowHash), sealing: sealing, on: connection, inTransaction: true)?.version
                    if let ours = write.ours, stored == ours {  // the lost COMMIT went through
                        versions[write.rowHash] = .some(ours)
                        continue
                    }
                    if write.secret == nil, stored == nil {  // deleted, by it or by another
                        versions[write.rowHash] = .some(nil)
                        continue
                    }
                    if case .some(let expected) = write.expected, stored != expected {
                        throw VaultError(
                            .backendUnavailable,
                            "The connection to \(vault) was lost during the refresh of \(write.key), and another host or process wrote the entry before this one could save the token endpoint's answer again; the entry keeps that write, and this answer was not saved. Run the command again.",
                            underlying: ReplayConflict())
                    }
                    if let secret = write.secret {
                        versions[write.rowHash] = .some(try await self.save(secret, for: write.key, on: connection))
                    } else {
                        _ = try await self.delete(write.key, on: connection)
                        versions[write.rowHash] = .some(nil)
                    }
                }
                return versions
            }
        }
    }
}

/// The store as seen inside a refresh transaction: loads and saves on its connection, under its
/// lock, each bounded. It keeps what it read (each row's version) and wrote, so that writes can be
/// made again, fenced, when the connection is lost (``PostgresStore/replay(_:lockKey:flight:)``);
/// a save that meets the loss makes its write durable that way before it returns.
struct LockedView: CredentialStore {
    /// A write of the view: a secret, or a delete (`secret` nil).
    struct Write: Sendable {
        let key: CredentialKey
        let rowHash: Data
        let secret: Data?
        /// The row's version when the view first read it (`.some(nil)`: no row); `nil` when the
        /// view never read it (the write is then not fenced).
        let expected: Int64??
        /// The version this write gave the row in the lost transaction, if it got that far.
        let ours: Int64?
    }

    let store: PostgresStore
    let held: HeldConnection
    let lockKey: Int64
    /// The backend (`pg_backend_pid()`) whose transaction holds the advisory lock.
    let backendPID: Int32
    let flight: CredentialKey
    /// The flight's lock wait, which also bounds a replay (with the operation's bound).
    let timeout: Duration
    /// What the view read and wrote, shared by its copies.
    let written = ViewRecord()

    init(store: PostgresStore, held: HeldConnection, lockKey: Int64, backendPID: Int32, flight: CredentialKey, timeout: Duration) {
        self.store = store
        self.held = held
        self.lockKey = lockKey
        self.backendPID = backendPID
        self.flight = flight
        self.timeout = timeout
    }

    var backend: BackendKind { store.backend }
    private var connection: PostgresConnection { held.connection }
    private var bound: Duration { store.options.operationTimeout }

    func load(_ key: CredentialKey) async throws -> Data? {
        // After a loss the lock is gone with its connection: a read goes to the store as any read.
        if written.isLost { return try await store.load(key) }
        let sealing = store.current
        let rowHash = sealing.keys.rowHash(key)
        let (store, connection) = (self.store, self.connection)
        do {
            try held.checkOpen(to: "read \(key) under the refresh lock", vault: store.vaultName)
            let row = try await PostgresStore.withDeadline(bound, what: "read \(key) under the refresh lock", vault: store.vaultName) {
                try await store.loadRow(rowHash, sealing: sealing, on: connection, inTransaction: true)
            }
            written.read(Data(rowHash), version: row?.version)
            guard let row else { return nil }
            return try store.open(row.sealed, key: key, rowHash: rowHash, version: row.version, sealing: sealing)
        } catch {
            throw PostgresSQL.vaultError(error, what: "read \(key) under the refresh lock", vault: store.vaultName)
        }
    }

    func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) async throws {
        try PostgresStore.checkSize(secret, key)
        try await write(secret, key)
    }

    func delete(_ key: CredentialKey) async throws -> Bool {
        let existed = written.isLost ? true : (try await load(key)) != nil
        try await write(nil, key)
        return existed
    }

    /// A save (`secret`) or a delete (`nil`) in the transaction; when its connection is lost, made
    /// durable on a new one before returning.
    private func write(_ secret: Data?, _ key: CredentialKey) async throws {
        let rowHash = Data(store.current.keys.rowHash(key))
        let what = secret == nil ? "delete \(key) under the refresh lock" : "save \(key) under the refresh lock"
        if !written.isLost {
            let (store, connection) = (self.store, self.connection)
            do {
                try held.checkOpen(to: what, vault: store.vaultName)
                let version = try await PostgresStore.withDeadline(bound, what: what, vault: store.vaultName) { () async throws -> Int64? in
                    if let secret { return try await store.save(secret, for: key, on: connection) }
                    _ = try await store.delete(key, on: connection)
                    return nil
                }
                written.wrote(key, rowHash, secret, ours: version)
                return
            } catch {
                guard PostgresStore.isLoss(error) else { throw PostgresSQL.vaultError(error, what: what, vault: store.vaultName) }
                // The transaction is gone (or is ended now): its lock and what it wrote with it.
                held.abandon()
                written.lose()
                store.logger.notice(
                    "the refresh transaction lost its connection; writing its result on a new one",
                    metadata: ["key": "\(key)"])
            }
        }
        written.wrote(key, rowHash, secret, ours: nil)
        written.madeDurable(try await store.replay(written.writes, lockKey: lockKey, flight: flight, timeout: timeout))
    }

    func keys(service: String?) async throws -> [CredentialKey] {
        if written.isLost { return try await store.keys(service: service) }
        let (store, connection) = (self.store, self.connection)
        do {
            try held.checkOpen(to: "list under the refresh lock", vault: store.vaultName)
            return try await PostgresStore.withDeadline(bound, what: "list under the refresh lock", vault: store.vaultName) {
                try await store.keys(service: service, on: connection)
            }
        } catch {
            throw PostgresSQL.vaultError(error, what: "list under the refresh lock", vault: store.vaultName)
        }
    }
}

/// Marks the error of a replayed write whose row another writer changed (the fence held).
struct ReplayConflict: Error, Sendable {}

/// What a ``LockedView`` read and wrote, shared by its copies.
final class ViewRecord: Sendable {
    private struct State {
        /// Every row hash written or deleted (for the read cache).
        var rows: [Data] = []
        /// The version each row had when first read (nil: no row).
        var seen: [Data: Int64?] = [:]
        /// The last write of each row not yet durable, in the order of first write.
        var writes: [LockedView.Write] = []
        var lost = false
    }

    private let state = Mutex(State())

    var rows: [Data] { state.withLock { $0.rows } }
    var writes: [LockedView.Write] { state.withLock { $0.writes } }
    var isLost: Bool { state.withLock { $0.lost } }

    func read(_ rowHash: Data, version: Int64?) {
        state.withLock { state in
            if state.seen[rowHash] == nil { state.seen[rowHash] = .some(version) }
        }
    }

    func wrote(_ key: CredentialKey, _ rowHash: Data, _ secret: Data?, ours: Int64?) {
        state.withLock { state in
            state.rows.append(rowHash)
            let write = LockedView.Write(key: key, rowHash: rowHash, secret: secret, expected: state.seen[rowHash], ours: ours)
            if let index = state.writes.firstIndex(where: { $0.rowHash == rowHash }) {
                state.writes[index] = write
            } else {
                state.writes.append(write)
            }
        }
    }

    func lose() { state.withLock { $0.lost = true } }

    /// The version `rowHash` had when first read (`.some(nil)`: no row), or nil when never read.
    func version(read rowHash: Data) -> Int64?? {
        state.withLock { $0.seen[rowHash] }
    }

    /// The refresh journal was committed apart (``LockedView/commitJournal(_:for:)``), leaving the
    /// row at `version`: later writes, and their replay, are fenced by that version.
    func journaled(_ rowHash: Data, version: Int64) {
        state.withLock { state in
            state.rows.append(rowHash)
            state.seen[rowHash] = .some(version)
        }
    }

    /// The pending writes are committed, leaving the rows at `versions`: later writes are fenced by those.
    func madeDurable(_ versions: [Data: Int64?]) {
        state.withLock { state in
            state.writes.removeAll()
            for (rowHash, version) in versions { state.seen[rowHash] = .some(version) }
        }
    }
}
#endif
