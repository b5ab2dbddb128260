#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
import Synchronization
import TokenVault
@testable import TokenVaultPostgres

extension PostgresTests {
    /// The bound every call runs under (PostgresStore.withDeadline), without a server: what it
    /// leaves behind and how exact it is.
    @Suite struct Deadline {
        /// A call that finishes in time takes its deadline out of the watch, and calls one after
        /// another arm its one timer once, not once each (a timer per call woke the timer thread
        /// twice per call; thousands of calls a second would keep thousands of timers alive).
        @Test func callsThatFinishLeaveNothingBehindAndArmTheTimerOnce() async throws {
            let watch = DeadlineWatch()
            let calls = 50
            for index in 0..<calls {
                let value = try await PostgresStore.withDeadline(.seconds(60), what: "answer", vault: "a test vault", watch: watch) { index }
                #expect(value == index)
                #expect(watch.pendingCount == 0, "call \(index) left its deadline behind")
            }
            #expect(watch.armings == 1)
        }

        /// A short bound entered while a long one is armed still ends its call on time: the
        /// timer is re-armed for the earlier deadline.
        @Test func aShortBoundAfterALongOneIsKept() async throws {
            let watch = DeadlineWatch()
            let release = AsyncStream<Void>.makeStream()
            let long = Task {
                try await PostgresStore.withDeadline(.seconds(60), what: "wait long", vault: "a test vault", watch: watch) {
                    for await _ in release.stream { break }
                    return 1
                }
            }
            try await eventually("the long call's deadline being entered", bound: .seconds(5)) { watch.pendingCount == 1 }
            let clock = ContinuousClock()
            let start = clock.now
            await #expect(throws: VaultError.self) {
                _ = try await PostgresStore.withDeadline(.milliseconds(300), what: "wait", vault: "a test vault", watch: watch) {
                    try await Task.sleep(for: .seconds(60))
                    return 2
                }
            }
            let elapsed = clock.now - start
            #expect(elapsed >= .milliseconds(300) && elapsed < .seconds(3), "returned after \(elapsed)")
            // Armed for the long call, then for the short one, then for the long one again.
            #expect(watch.armings == 3)
            release.continuation.yield()
            #expect(try await long.value == 1)
            #expect(watch.pendingCount == 0)
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
#endif
