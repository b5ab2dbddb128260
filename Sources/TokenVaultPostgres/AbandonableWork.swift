// Owns: work that an outside trigger gives up on (a deadline, a connection that closed under it).
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
import Synchronization

/// Runs work in a task of its own that an outside trigger may give up on: the one race between
/// the work ending and the trigger firing is settled here, for the bounded calls
/// (``PostgresStore/withDeadline(_:what:vault:watch:_:)``) and the pool's connections
/// (``PooledConnection/run(_:)``) alike.
enum AbandonableWork {
    /// `body`'s result, or the error given to `abandon` if that is called first. `arm` is handed
    /// `abandon` before `body` starts, and returns what `ended` is given once `body` ends (whether
    /// or not it was given up on), to take the trigger back. A given-up `body` is cancelled and
    /// left to end on its own; so is `body` when the caller is cancelled.
    static func run<Trigger: Sendable, Result: Sendable>(
        arm: (_ abandon: @escaping @Sendable (any Error) -> Void) -> Trigger,
        ended: @escaping @Sendable (Trigger) -> Void,
        _ body: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        let once = Once()
        let work = WorkHandle()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Result, any Error>) in
                // The trigger is armed first, so a bound counts from the call. Either side
                // resumes the continuation only if it claims `once` first.
                let trigger = arm { error in
                    guard once.claim() else { return }
                    work.cancel()
                    continuation.resume(throwing: error)
                }
                work.set(
                    Task {
                        let result: Swift.Result<Result, any Error>
                        do {
                            result = .success(try await body())
                        } catch {
                            result = .failure(error)
                        }
                        ended(trigger)
                        guard once.claim() else { return }
                        continuation.resume(with: result)
                    })
            }
        } onCancel: {
            work.cancel()
        }
    }
}

/// The work task of ``AbandonableWork``, to cancel when the trigger wins, even if the trigger
/// wins before the task is stored here.
final class WorkHandle: Sendable {
    private let state = Mutex<(task: Task<Void, Never>?, cancelled: Bool)>((nil, false))

    func set(_ task: Task<Void, Never>) {
        let cancelled = state.withLock { state in
            state.task = task
            return state.cancelled
        }
        if cancelled { task.cancel() }
    }

    func cancel() {
        let task = state.withLock { state in
            state.cancelled = true
            return state.task
        }
        task?.cancel()
    }
}

/// A flag that only the first caller of ``claim()`` gets: who resumes a continuation.
final class Once: Sendable {
    private let taken = Mutex(false)

    func claim() -> Bool {
        taken.withLock { taken in
            defer { taken = true }
            return !taken
        }
    }
}
#endif
