import Dispatch
import Synchronization

/// One timer for the bounded calls of a process: PostgreSQL's (`PostgresStore.withDeadline`) and
/// the Secret Service's (``GLibWorker/run(timeout:onTimeout:_:)``).
///
/// A timer per call (a task sleeping for the bound, cancelled when the call finishes) wakes the
/// timer thread twice per call, to register and to cancel: on loopback that was about a tenth of
/// a get's round trip (`Scripts/bench-postgres`). Here a call enters its deadline in a table and
/// takes it out when it finishes; the one dispatch timer is armed for a deadline only when
/// nothing earlier is armed, so calls that finish within their bound, nearly all of them, never
/// touch it. When it fires it expires every call past its deadline and re-arms for the earliest
/// one left, if any.
package final class DeadlineWatch: @unchecked Sendable {  // `state` is behind its mutex; a dispatch source is thread-safe
    package static let shared = DeadlineWatch()

    private struct State {
        var pending: [UInt64: (deadline: DispatchTime, expire: @Sendable () -> Void)] = [:]
        var nextID: UInt64 = 0
        /// The deadline the timer is armed for, or nil when it is not armed.
        var armedFor: DispatchTime?
        package var armings = 0
    }

    private let state = Mutex(State())
    private let timer: any DispatchSourceTimer
    /// How late the timer may fire: the bounds are seconds long, so a few milliseconds do not matter.
    private static let leeway = DispatchTimeInterval.milliseconds(5)

    package init() {
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "TokenVault.deadlines"))
        timer.setEventHandler { [weak self] in self?.fire() }
        timer.activate()  // it fires only once a deadline is scheduled
    }

    deinit {
        timer.cancel()
    }

    /// Enters a call that `expire` abandons once `limit` has passed, unless ``remove(_:)`` takes
    /// it out first. `expire` runs on the watch's queue, without its lock held.
    package func register(after limit: Duration, expire: @escaping @Sendable () -> Void) -> UInt64 {
        let deadline = DispatchTime.now() + Self.interval(limit)
        return state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.pending[id] = (deadline, expire)
            if state.armedFor.map({ deadline < $0 }) ?? true { arm(for: deadline, &state) }
            return id
        }
    }

    /// Takes a finished call out; `false` when it had already expired.
    @discardableResult
    package func remove(_ id: UInt64) -> Bool {
        state.withLock { $0.pending.removeValue(forKey: id) != nil }
    }

    /// Calls entered and neither finished nor expired.
    package var pendingCount: Int { state.withLock { $0.pending.count } }

    /// How many times the timer has been armed.
    package var armings: Int { state.withLock { $0.armings } }

    private func fire() {
        let now = DispatchTime.now()
        let expired = state.withLock { state in
            var expiredIDs: [UInt64] = []
            var earliest: DispatchTime?
            for (id, entry) in state.pending {
                if entry.deadline <= now {
                    expiredIDs.append(id)
                } else if earliest.map({ entry.deadline < $0 }) ?? true {
                    earliest = entry.deadline
                }
            }
            let expired = expiredIDs.compactMap { state.pending.removeValue(forKey: $0)?.expire }
            state.armedFor = nil
            if let earliest { arm(for: earliest, &state) }
            return expired
        }
        for expire in expired { expire() }
    }

    /// Under the lock, so that two calls cannot leave the timer armed for the later of their deadlines.
    private func arm(for deadline: DispatchTime, _ state: inout State) {
        state.armedFor = deadline
        state.armings += 1
        timer.schedule(deadline: deadline, leeway: Self.leeway)
    }

    private static func interval(_ limit: Duration) -> DispatchTimeInterval {
        let (seconds, attoseconds) = limit.components
        // A day is longer than any bound here; the cap keeps the nanoseconds within Int.
        guard seconds < 86_400 else { return .seconds(86_400) }
        return .nanoseconds(Int(max(0, seconds)) * 1_000_000_000 + Int(max(0, attoseconds) / 1_000_000_000))
    }
}
