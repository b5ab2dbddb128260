// Owns: a pooled connection held across steps that are each bounded (a refresh transaction),
// and the bounded wait for it.
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
import Foundation
import TokenVault
import PostgresNIO
import Synchronization

/// A connection leased from the pool for as long as its holder needs it: the lease lives in a
/// task of its own (inside `withConnection`), so that a refresh can bound each of its steps
/// (`withDeadline`) while the body between them stays the caller's. ``release()`` gives the
/// connection back; it must be called exactly once the holder is done.
final class HeldConnection: Sendable {
    let connection: PostgresConnection
    private let state = Mutex<(released: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    init(_ connection: PostgresConnection) {
        self.connection = connection
    }

    func release() {
        let waiter = state.withLock { state in
            state.released = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Throws `backendUnavailable` when the connection is closed already (the server ended it: a
    /// restart, `pg_terminate_backend`). postgres-nio does not answer a statement sent on a closed
    /// connection (it waited for the whole bound), so none is sent there.
    func checkOpen(to what: @autoclosure () -> String, vault: String) throws {
        guard connection.isClosed else { return }
        throw VaultError(.backendUnavailable, "Lost the connection to \(vault) while trying to \(what()) (the server closed it).")
    }

    /// Closes the connection without waiting for the server (a statement past its bound, a
    /// transaction that must not hold its lock any longer); the server rolls back what it had.
    func abandon() {
        let connection = self.connection
        Task { try? await connection.close() }
    }

    /// Returns once ``release()`` was called.
    fileprivate func untilReleased() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let released = state.withLock { state in
                if !state.released { state.waiter = continuation }
                return state.released
            }
            if released { continuation.resume() }
        }
    }
}

/// Where the lease's task hands its connection (or its error) to the waiter, once: a deadline
/// that wins first leaves the slot settled, and a connection that arrives after it goes back to
/// the pool at once.
private final class LeaseSlot: Sendable {
    private struct State {
        var result: Swift.Result<HeldConnection, any Error>?
        var waiter: CheckedContinuation<HeldConnection, any Error>?
        var settled = false
    }

    private let state = Mutex(State())

    /// `false` when the slot was settled already: nobody will use `result`.
    func settle(_ result: Swift.Result<HeldConnection, any Error>) -> Bool {
        let (settled, waiter) = state.withLock { state -> (Bool, CheckedContinuation<HeldConnection, any Error>?) in
            guard !state.settled else { return (false, nil) }
            state.settled = true
            if let waiter = state.waiter {
                state.waiter = nil
                return (true, waiter)
            }
            state.result = result
            return (true, nil)
        }
        waiter?.resume(with: result)
        return settled
    }

    func value() async throws -> HeldConnection {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HeldConnection, any Error>) in
            let ready = state.withLock { state -> Swift.Result<HeldConnection, any Error>? in
                if let result = state.result { return result }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }
}

extension PostgresStore {
    /// A connection from the pool within `limit`, or `backendUnavailable` (a pool that cannot
    /// connect to a restarting server does not hold the caller past the bound).
    func holdConnection(within limit: Duration, what: @autoclosure @escaping @Sendable () -> String) async throws -> HeldConnection {
        let slot = LeaseSlot()
        let client = self.client
        let lease = Task {
            do {
                try await client.withConnection { connection in
                    let held = HeldConnection(connection)
                    // Nobody waits any more (the deadline won): the connection goes back at once.
                    guard slot.settle(.success(held)) else { return }
                    await held.untilReleased()
                }
            } catch {
                _ = slot.settle(.failure(error))
            }
        }
        let vault = vaultName
        let entry = DeadlineWatch.shared.register(after: limit) {
            let expired = VaultError(
                .backendUnavailable,
                "Could not \(what()) in \(vault) within \(limit): no connection to the database could be had in time (unreachable, down or restarting).")
            if slot.settle(.failure(expired)) { lease.cancel() }
        }
        defer { DeadlineWatch.shared.remove(entry) }
        return try await slot.value()
    }
}
#endif
