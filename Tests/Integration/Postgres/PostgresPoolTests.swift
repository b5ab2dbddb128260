#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
import Synchronization
import PostgresNIO
@testable import TokenVaultTestSupport
import TokenVault
@testable import TokenVaultPostgres

extension PostgresTests {
    /// The store's own pool of connections (PostgresPool), against the test cluster.
    @Suite struct Pool {
        /// postgres-nio drops a statement sent on a connection whose channel has just closed and
        /// never answers it (its write has no promise). In a CI run that held a read for its whole
        /// 20 s bound: the read raced the close of a connection ended by `pg_terminate_backend`.
        /// Here the statement is sent after the close, every time: the pool gives up on it within
        /// a moment with a lost connection (which a store's call retries on another connection),
        /// drops that connection, and the next lease gets a new one that works. Before the fix,
        /// the statement waited until the test's own 10 s bound (measured: it was never answered).
        @Test func aStatementSentOnAClosedConnectionIsGivenUpNotAwaited() async throws {
            let postgres = try TestPostgres.require()
            let database = try postgres.freshDatabase()
            let pool = PostgresPool(try PostgresConnector(try postgres.configuration(database), connectTimeout: .seconds(5)), maximum: 1)
            defer { pool.close() }
            let first = try await pool.withConnection { connection in
                _ = try await connection.query("SELECT 1", logger: PostgresSQL.silent)
                return connection.id
            }
            let clock = ContinuousClock()
            let started = Mutex<ContinuousClock.Instant?>(nil)
            let outcome: Swift.Result<Void, any Error> = await withBound(.seconds(10)) {
                try await pool.withConnection { connection in
                    _ = try postgres.sql(
                        database,
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
                    try await connection.closeFuture.get()
                    started.withLock { $0 = clock.now }
                    // The statement postgres-nio would never answer.
                    _ = try await connection.query("SELECT 2", logger: PostgresSQL.silent)
                }
            }
            switch outcome {
            case .success:
                Issue.record("a statement on a closed connection succeeded")
            case .failure(let error) where error is BoundExceeded:
                // The pool's only connection is still lent to the statement: nothing more to ask.
                Issue.record("the statement on the closed connection was awaited for 10 s")
                return
            case .failure(let error):
                #expect(error is ClosedConnection || PostgresSQL.isConnectionFailure(error), "\(error)")
            }
            let waited = try #require(started.withLock { $0 }).duration(to: clock.now)
            #expect(waited < .seconds(5), "given up after \(waited)")
            let next = try await pool.withConnection { connection in
                try await connection.query("SELECT 3", logger: PostgresSQL.silent).collect().count == 1 ? connection.id : -1
            }
            #expect(next != first && next != -1, "the closed connection was lent again")
        }
    }
}

private struct BoundExceeded: Error {}

/// `body`'s outcome, or `BoundExceeded` after `bound` (the body is then left running).
private func withBound(_ bound: Duration, _ body: @escaping @Sendable () async throws -> Void) async -> Swift.Result<Void, any Error> {
    let stream = AsyncStream<Swift.Result<Void, any Error>>.makeStream()
    let work = Task {
        do {
            try await body()
            stream.continuation.yield(.success(()))
        } catch {
            stream.continuation.yield(.failure(error))
        }
    }
    let timer = Task {
        try? await Task.sleep(for: bound)
        stream.continuation.yield(.failure(BoundExceeded()))
    }
    defer {
        timer.cancel()
        _ = work
    }
    for await outcome in stream.stream { return outcome }
    return .failure(BoundExceeded())
}
#endif
