import Foundation
import Synchronization
import Testing
@testable import TokenVault

/// The one timer behind the Secret Service's and PostgreSQL's call deadlines (their own suites
/// test the calls: SecretServiceFailureTests freezes gnome-keyring, PostgresDeadlineTests).
@Suite struct DeadlineWatchTests {
    /// A deadline taken out in time never fires; one left in fires once, after its bound. The
    /// second deadline is later than the first, so when it has fired the first one's time has
    /// passed too: no sleep decides the test.
    @Test func aRemovedDeadlineNeverFiresAndAKeptOneFiresOnce() async throws {
        let watch = DeadlineWatch()
        let fired = Mutex<[String]>([])
        let clock = ContinuousClock()
        let start = clock.now
        let removed = watch.register(after: .milliseconds(100)) { fired.withLock { $0.append("removed") } }
        #expect(watch.remove(removed))
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            _ = watch.register(after: .milliseconds(200)) {
                fired.withLock { $0.append("kept") }
                done.resume()
            }
        }
        #expect(clock.now - start >= .milliseconds(200))
        #expect(fired.withLock { $0 } == ["kept"])
        #expect(watch.pendingCount == 0)
        #expect(!watch.remove(removed), "a deadline is removed once")
    }

    /// Calls that end within their bound, one after another, arm the timer once between them:
    /// the cost the Secret Service's calls no longer pay per call.
    @Test func callsThatEndInTimeArmTheTimerOnce() {
        let watch = DeadlineWatch()
        for _ in 0..<1_000 {
            let id = watch.register(after: .seconds(30)) { Issue.record("a deadline of 30 s fired") }
            #expect(watch.remove(id))
        }
        #expect(watch.armings == 1)
        #expect(watch.pendingCount == 0)
    }
}
