import FoundationEssentials
internal import Synchronization
internal import CLibSecret
internal import TokenVaultSystem

/// A `GCancellable` that fires when a deadline passes or the calling task is cancelled.
///
/// `g_cancellable_cancel` is thread-safe, so the deadline timer and the task's cancellation
/// handler may fire it from any thread while a blocking libsecret call on the worker thread
/// waits on it.
final class OperationCancellable: @unchecked Sendable {  // a GCancellable, which GLib lets any thread fire
    let pointer: UnsafeMutablePointer<GCancellable>

    init() {
        pointer = g_cancellable_new()
    }

    deinit {
        g_object_unref(pointer)
    }

    func cancel() {
        g_cancellable_cancel(pointer)
    }
}

/// Hands one result to a continuation exactly once, whichever comes first: the worker's result,
/// the deadline, or the task's cancellation. Later results are dropped.
private final class Completion<Value: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Value, any Error>?
        var early: Result<Value, any Error>?
        var finished = false
    }

    private let state = Mutex(State())

    func attach(_ continuation: CheckedContinuation<Value, any Error>) {
        let early = state.withLock { state -> Result<Value, any Error>? in
            guard let early = state.early else {
                state.continuation = continuation
                return nil
            }
            state.early = nil
            state.finished = true
            return early
        }
        // Resumed outside the lock.
        if let early { continuation.resume(with: early) }
    }

    func finish(_ result: Result<Value, any Error>) {
        let waiting = state.withLock { state -> CheckedContinuation<Value, any Error>? in
            guard !state.finished else { return nil }
            guard let continuation = state.continuation else {
                if state.early == nil { state.early = result }
                return nil
            }
            state.continuation = nil
            state.finished = true
            return continuation
        }
        waiting?.resume(with: result)
    }

    var isFinished: Bool {
        state.withLock { $0.finished || $0.early != nil }
    }
}

/// Where blocking libsecret and GDBus calls run: never on a thread of Swift's cooperative pool.
///
/// libsecret's `*_sync` functions block their thread while they iterate a private GLib main
/// context. Running them on the cooperative pool would starve every other task of the process
/// (the pool has one thread per core), so they run on threads of their own:
///
/// - ``shared`` is one long-lived thread that runs the Secret Service stores' calls in order.
///   The provider serialises requests anyway, so a second thread would gain nothing.
/// - ``detached`` starts a fresh thread per call. The availability probe uses it, so a probe
///   stuck in a broken bus can never hold up anything else.
///
/// Every call has a deadline. When it passes, the call's `GCancellable` fires and the caller gets
/// a `timeout` error at once, even if the C call has not returned yet.
final class GLibWorker: @unchecked Sendable {  // a GMainContext and its thread; jobs are handed over under a lock
    static let shared = GLibWorker(name: "TokenVault.SecretService")
    static let detached = GLibWorker()

    private let condition = ConditionLock()
    private var jobs: [@Sendable () -> Void] = []
    private let dedicated: Bool

    /// A worker with one long-lived thread.
    private init(name: String) {
        dedicated = true
        // Without libsecret no job is ever submitted: `run` throws first.
        guard LibSecret.isLoaded else { return }
        SystemCall.startThread(name: name) { [self] in
            // Signals that libsecret's proxies subscribe to on this thread are delivered to this
            // context. It is drained after every job, so they never pile up unprocessed.
            let context = g_main_context_new()
            g_main_context_push_thread_default(context)
            runJobs(context)
        }
    }

    /// A worker that starts a new thread for each job.
    private init() {
        dedicated = false
    }

    private func runJobs(_ context: OpaquePointer?) {
        while true {
            condition.lock()
            while jobs.isEmpty {
                condition.wait()
            }
            let job = jobs.removeFirst()
            condition.unlock()
            // Signals that came in while the thread was idle (a provider's name changing owner,
            // the bus closing) are handled before the job looks at its connection.
            while g_main_context_iteration(context, 0) != 0 {}
            job()
            while g_main_context_iteration(context, 0) != 0 {}
        }
    }

    /// Handles the signals waiting on the calling thread's default main context. Called on
    /// ``shared``'s thread, inside a job, to learn of a provider that went away during the job.
    static func dispatchPendingSignals() {
        let context = g_main_context_get_thread_default()
        while g_main_context_iteration(context, 0) != 0 {}
    }

    private func submit(_ job: @escaping @Sendable () -> Void) {
        guard dedicated else {
            SystemCall.startThread(name: "TokenVault.SecretService.probe") { job() }
            return
        }
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Runs `body` on this worker and returns its result.
    ///
    /// - Parameters:
    ///   - timeout: the deadline, counted from now (time spent waiting behind other calls counts).
    ///   - onTimeout: the error thrown when the deadline passes first.
    ///   - body: the blocking work. It must pass the cancellable to every C call that takes one,
    ///     and it must free whatever it allocates itself, since its result may be dropped.
    /// - Throws: whatever `body` throws, `onTimeout()` when the deadline passes first, or
    ///   `cancelled` when the calling task is cancelled.
    func run<Value: Sendable>(
        timeout: Duration,
        onTimeout: @escaping @Sendable () -> VaultError,
        _ body: @escaping @Sendable (OperationCancellable) throws -> Value
    ) async throws -> Value {
        try LibSecret.require()
        let cancellable = OperationCancellable()
        let completion = Completion<Value>()
        // One timer for every call of the process (DeadlineWatch): a call that ends in time, nearly
        // every one, neither arms nor cancels a timer, which woke dispatch's timer thread each time.
        let deadline = DeadlineWatch.shared.register(after: timeout) {
            guard !completion.isFinished else { return }
            // Answer first: cancelling wakes the C call, whose own "cancelled" error
            // must not win the race against the timeout it is caused by.
            completion.finish(.failure(onTimeout()))
            cancellable.cancel()
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                completion.attach(continuation)
                submit {
                    // A call whose deadline passed while it waited in the queue is not started.
                    guard !completion.isFinished else { return }
                    let result = Result { try body(cancellable) }
                    DeadlineWatch.shared.remove(deadline)
                    completion.finish(result)
                }
            }
        } onCancel: {
            DeadlineWatch.shared.remove(deadline)
            completion.finish(.failure(VaultError(.cancelled, "The Secret Service call was cancelled.")))
            cancellable.cancel()
        }
    }
}
