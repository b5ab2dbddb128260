import Foundation
import Testing
import Synchronization
import TokenVault
@testable import TokenVaultPostgres

extension PostgresTests {
    /// The bound every call runs under (PostgresStore.withDeadline), without a server: what it
    /// leaves behind and how exact it is.
    @Suite struct Deadline {
        /// A call that finishes first cancels its timer: every timer task ends at once, not after
        /// the whole bound (a server answering thousands of calls would otherwise keep thousands
        /// of sleeping tasks alive).
        @Test func aCallThatFinishesEndsItsTimerAtOnce() async throws {
            let ended = Mutex(0)
            let calls = 50
            for index in 0..<calls {
                let value = try await PostgresStore.withDeadline(
                    .seconds(60), what: "answer", vault: "a test vault", timerEnded: { ended.withLock { $0 += 1 } }
                ) { index }
                #expect(value == index)
            }
            // Far below the 60 s bound: only a cancelled timer ends this early.
            try await eventually("every timer ending", bound: .seconds(5)) { ended.withLock { $0 } == calls }
        }

        /// A body that does not answer is abandoned at the bound, neither before nor long after,
        /// and the caller gets backendUnavailable; the body is cancelled.
        @Test func aBodyThatDoesNotAnswerIsAbandonedAtTheBound() async throws {
            let clock = ContinuousClock()
            let start = clock.now
            let cancelled = Mutex(false)
            do {
                _ = try await PostgresStore.withDeadline(.milliseconds(300), what: "wait", vault: "a test vault") {
                    do {
                        try await Task.sleep(for: .seconds(60))
                    } catch {
                        cancelled.withLock { $0 = true }
                        throw error
                    }
                    return 1
                }
                Issue.record("a body sleeping 60 s finished within a 300 ms bound")
            } catch let error as VaultError {
                #expect(error.code == .backendUnavailable, "\(error.message)")
            }
            let elapsed = clock.now - start
            #expect(elapsed >= .milliseconds(300) && elapsed < .seconds(3), "returned after \(elapsed)")
            try await eventually("the abandoned body being cancelled", bound: .seconds(5)) { cancelled.withLock { $0 } }
        }
    }
}
