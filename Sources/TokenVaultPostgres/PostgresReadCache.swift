// Owns: the optional read cache: sealed rows kept in process, invalidated by LISTEN/NOTIFY on a
// connection of its own, and served only while that connection is known alive.
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
import Foundation
import Logging
import PostgresNIO
import Synchronization
import TokenVault

/// What ``PostgresStore`` keeps when ``PostgresStore/Options/readCache`` is on.
///
/// - It keeps **sealed rows** (version and ciphertext), not secrets: a hit is opened (authenticated
///   and decrypted) again on every read, as a read from the database is, so no plaintext outlives
///   the call that asked for it and a row can never be served under another row's place. Opening
///   a 1 KiB row costs about a microsecond, far below a round trip.
/// - It is filled only while the listener is **known alive**: its `LISTEN` succeeded and its
///   last heartbeat (`SELECT 1` on the same connection, every ``heartbeat``) answered less than
///   three heartbeats ago. When the listener's connection drops, or a heartbeat fails or hangs,
///   the cache is emptied and bypassed until `LISTEN` is established again on a new connection:
///   a write missed while nobody listened can therefore never be served.
/// - A fill races with invalidations: every invalidation (and every change of the listener)
///   bumps `epoch`, and a read from the database is put in the cache only if the epoch it saw
///   before the read is still current.
final class PostgresReadCache: Sendable {
    /// The channel every write notifies, in the same transaction; the payload is the hex of the
    /// keyed row hash (never a name), or `*` for a change of every row (a rekey).
    static let channel = "tokenvault_changes"
    static let everyRow = "*"

    struct Row: Sendable {
        var version: Int64
        var sealed: [UInt8]
    }

    private struct State {
        var listening = false
        var lastConfirmed = ContinuousClock.now
        var epoch: UInt64 = 0
        /// By row hash; a `nil` row records an entry known to be absent.
        var rows: [Data: Row?] = [:]
        var hits = 0
        /// How many times `LISTEN` was established (1 for the first listener).
        var listens = 0
    }

    private let state = Mutex(State())
    let heartbeat: Duration
    let maximumRows: Int

    init(heartbeat: Duration, maximumRows: Int) {
        self.heartbeat = heartbeat
        self.maximumRows = maximumRows
    }

    /// Whether hits are served now: listening, and the last heartbeat is recent.
    var isServing: Bool {
        let now = ContinuousClock.now
        return state.withLock { $0.listening && now - $0.lastConfirmed < heartbeat * 3 }
    }

    var hits: Int { state.withLock { $0.hits } }
    var listens: Int { state.withLock { $0.listens } }

    /// The cached row (`.some(nil)`: known absent), or `nil` for a miss or a cache not serving.
    func lookup(_ rowHash: Data) -> Row?? {
        let now = ContinuousClock.now
        return state.withLock { state in
            guard state.listening, now - state.lastConfirmed < heartbeat * 3, let row = state.rows[rowHash] else { return nil }
            state.hits += 1
            return .some(row)
        }
    }

    /// The epoch to hand to ``fill(_:_:ticket:)`` after a read from the database; `nil` when
    /// nothing may be filled (no listener).
    func ticket() -> UInt64? {
        state.withLock { $0.listening ? $0.epoch : nil }
    }

    func fill(_ rowHash: Data, _ row: Row?, ticket: UInt64) {
        state.withLock { state in
            guard state.listening, state.epoch == ticket else { return }
            if state.rows.count >= maximumRows { state.rows.removeAll(keepingCapacity: true) }
            state.rows[rowHash] = .some(row)
        }
    }

    /// A notification, or a write of this process (after its commit).
    func invalidate(_ payload: String) {
        let rowHash = Self.rowHash(hex: payload)
        state.withLock { state in
            state.epoch &+= 1
            if let rowHash {
                state.rows[rowHash] = nil
            } else {
                state.rows.removeAll()  // `*`, or a payload this version does not know: forget everything
            }
        }
    }

    func invalidate(rowHashes: [Data]) {
        state.withLock { state in
            state.epoch &+= 1
            for rowHash in rowHashes { state.rows[rowHash] = nil }
        }
    }

    func invalidateAll() { invalidate(Self.everyRow) }

    /// The listener is up (LISTEN succeeded) or down: either way, start from empty.
    func setListening(_ listening: Bool) {
        let now = ContinuousClock.now
        state.withLock { state in
            if listening && !state.listening { state.listens += 1 }
            state.listening = listening
            state.lastConfirmed = now
            state.epoch &+= 1
            state.rows.removeAll()
        }
    }

    /// A heartbeat sent at `sent` was answered.
    func confirmed(sentAt sent: ContinuousClock.Instant) {
        state.withLock { state in
            if state.listening { state.lastConfirmed = max(state.lastConfirmed, sent) }
        }
    }

    static func payload(_ rowHash: [UInt8]) -> String { hexString(rowHash) }

    static func rowHash(hex: String) -> Data? {
        let utf8 = Array(hex.utf8)
        guard utf8.count == 2 * RowSealingKeys.hashBytes else { return nil }
        var bytes = Data(capacity: utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = nibble(utf8[index]), let low = nibble(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        default: nil
        }
    }

    /// The listener: a pooled connection held for `LISTEN`, with a heartbeat; on any failure the
    /// cache goes down, the connection is closed, and a new one is tried after a short pause.
    /// Runs until cancelled (``PostgresStore/close()``).
    static func listen(_ cache: PostgresReadCache, client: PostgresPool, vault: String, logger: Logger) async {
        var pause = Duration.milliseconds(20)
        while !Task.isCancelled {
            let started = ContinuousClock.now
            do {
                try await client.withConnection { connection in
                    do {
                        try await connection.listen(on: channel) { notifications in
                            cache.setListening(true)
                            try await withThrowingTaskGroup(of: Void.self) { group in
                                group.addTask {
                                    for try await notification in notifications { cache.invalidate(notification.payload) }
                                    throw ListenerEnded()
                                }
                                group.addTask {
                                    while true {
                                        try await Task.sleep(for: cache.heartbeat)
                                        let sent = ContinuousClock.now
                                        try await PostgresStore.withDeadline(cache.heartbeat * 2, what: "check the cache listener", vault: vault) {
                                            try await connection.run("SELECT 1", logger: PostgresSQL.silent)
                                        }
                                        cache.confirmed(sentAt: sent)
                                    }
                                }
                                _ = try await group.next()
                                group.cancelAll()
                            }
                        }
                    } catch {
                        cache.setListening(false)
                        // Never hand a connection that failed (or hangs) back to the pool.
                        try? await connection.close()
                        throw error
                    }
                }
            } catch {
                logger.debug("the read cache's listener stopped; the cache is off until it listens again", metadata: ["error": "\(PostgresSQL.describe(error))"])
            }
            cache.setListening(false)
            if ContinuousClock.now - started > .seconds(5) { pause = .milliseconds(20) }
            do {
                try await Task.sleep(for: pause)
            } catch {
                break
            }
            pause = min(pause * 2, .seconds(1))
        }
        cache.setListening(false)
    }

    struct ListenerEnded: Error {}
}
#endif
