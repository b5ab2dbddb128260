import Synchronization

import Glibc
internal import TokenVaultSystem

/// Keeps a termination signal from cutting a refresh in half.
///
/// A refresh token that rotates is spent by the server the moment it answers: a process that dies
/// between the request and the save throws the only copy of the new refresh token away, and a
/// server that revokes the whole grant on reuse then ends the login when the next process presents
/// the old one. `timeout`, `systemctl stop` (SIGTERM) and Ctrl-C (SIGINT) did exactly that.
///
/// A program opts in once, at start (the `vault` command does):
///
/// ```swift
/// RefreshTermination.holdDuringRefresh(notice: "myapp: finishing a token refresh before exiting\n")
/// ```
///
/// From then on, SIGTERM, SIGINT and SIGHUP (those of them the process was not started ignoring,
/// as under `nohup`) end the process as they always did (their default
/// action, so the exit status is the usual 128 + signal) — except while a refresh of this process
/// is between "the request is about to leave" and "the answer (or the server's verdict) is saved".
/// Then the signal is held, `notice` is written to stderr once, and the process ends with that
/// signal the moment the last such refresh has saved. The hold is bounded by the refresh itself
/// (the token endpoint client's time-out and retries, the store's own deadlines). SIGQUIT and
/// SIGKILL are not held: they remain the way to stop a process at once, at the risk of the grant.
///
/// A library that is part of a bigger program should leave the choice to that program: this
/// replaces the process's handlers for those three signals.
public enum RefreshTermination: Sendable {
    /// The signals that are held.
    package static let heldSignals: [Int32] = [SIGTERM, SIGINT, SIGHUP]

    /// Installs the handlers (once; later calls only change `notice`). `notice`, if given, is
    /// written to stderr when a signal is being held. It must not hold a secret.
    public static func holdDuringRefresh(notice: String? = nil) {
        // Touch every global the handler reads, so that none is first initialised inside it.
        _ = openWindows.load(ordering: .sequentiallyConsistent)
        _ = pendingSignal.load(ordering: .sequentiallyConsistent)
        _ = noticeWritten.load(ordering: .sequentiallyConsistent)
        _ = noticeAddress.load(ordering: .sequentiallyConsistent)
        _ = noticeLength.load(ordering: .sequentiallyConsistent)
        if let notice {
            let bytes = Array(notice.utf8)
            let buffer = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: bytes.count)
            _ = buffer.initialize(from: bytes)
            // Never freed: the handler may read it at any time. One small buffer per call.
            noticeLength.store(0, ordering: .sequentiallyConsistent)
            noticeAddress.store(Int(bitPattern: buffer.baseAddress), ordering: .sequentiallyConsistent)
            noticeLength.store(bytes.count, ordering: .sequentiallyConsistent)
        }
        guard installed.exchange(true, ordering: .sequentiallyConsistent) == false else { return }
        for signal in heldSignals {
            // A signal the process was started ignoring stays ignored, as shells leave it:
            // `nohup vault …` must not end on the SIGHUP it was protected from (and `vault run`
            // hands that disposition on to its command).
            var current = sigaction()
            if sigaction(signal, nil, &current) == 0,
                unsafeBitCast(current.__sigaction_handler.sa_handler, to: Int.self) == Int(bitPattern: 1)
            {
                continue
            }
            var action = sigaction()
            action.__sigaction_handler.sa_handler = handle
            sigemptyset(&action.sa_mask)
            for other in heldSignals { sigaddset(&action.sa_mask, other) }
            action.sa_flags = SA_RESTART
            sigaction(signal, &action, nil)
        }
    }

    /// Whether a refresh of this process is in its window now (for tests and diagnostics).
    package static var isHolding: Bool { openWindows.load(ordering: .sequentiallyConsistent) > 0 }

    /// Opens a window in which termination is held. Balanced by ``leave()``.
    static func enter() {
        openWindows.add(1, ordering: .sequentiallyConsistent)
    }

    /// Closes a window. If it was the last and a signal came in meanwhile, the process ends with
    /// that signal now.
    static func leave() {
        let remaining = openWindows.subtract(1, ordering: .sequentiallyConsistent).newValue
        guard remaining == 0 else { return }
        let pending = pendingSignal.exchange(0, ordering: .sequentiallyConsistent)
        if pending != 0 { terminate(with: Int32(pending)) }
    }

    /// One window, entered at most once and left at most once, shared by the parts of a flight
    /// (the request and save happen inside a store's lock; a PostgreSQL commit after it).
    final class Window: Sendable {
        private let state = Atomic<Int>(0)  // 0 never entered, 1 open, 2 closed

        func enter() {
            if state.compareExchange(expected: 0, desired: 1, ordering: .sequentiallyConsistent).exchanged {
                RefreshTermination.enter()
            }
        }

        func leave() {
            if state.compareExchange(expected: 1, desired: 2, ordering: .sequentiallyConsistent).exchanged {
                RefreshTermination.leave()
            }
        }
    }

    // Everything below is read by the signal handler: atomics only, no allocation, no locks.
    private static let installed = Atomic<Bool>(false)
    private static let openWindows = Atomic<Int>(0)
    private static let pendingSignal = Atomic<Int>(0)
    private static let noticeAddress = Atomic<Int>(0)
    private static let noticeLength = Atomic<Int>(0)
    private static let noticeWritten = Atomic<Bool>(false)

    /// The handler: async-signal-safe (atomics, `write`, `signal`, `raise`).
    private static let handle: @convention(c) (Int32) -> Void = { signal in
        RefreshTermination.pendingSignal.store(Int(signal), ordering: .sequentiallyConsistent)
        if RefreshTermination.openWindows.load(ordering: .sequentiallyConsistent) == 0 {
            // No refresh in its window (or the last one just closed): the default action, now.
            let pending = RefreshTermination.pendingSignal.exchange(0, ordering: .sequentiallyConsistent)
            if pending != 0 { RefreshTermination.terminate(with: Int32(pending)) }
            return
        }
        if !RefreshTermination.noticeWritten.exchange(true, ordering: .sequentiallyConsistent) {
            let length = RefreshTermination.noticeLength.load(ordering: .sequentiallyConsistent)
            let address = RefreshTermination.noticeAddress.load(ordering: .sequentiallyConsistent)
            if length > 0, let pointer = UnsafeRawPointer(bitPattern: address) {
                // Async-signal-safe: write(2) in a loop, no allocation.
                _ = try? SystemCall.writeAll(SystemCall.standardError, UnsafeRawBufferPointer(start: pointer, count: length))
            }
        }
    }

    /// Ends the process with `signal`'s default action (so the parent sees "killed by signal").
    private static func terminate(with signal: Int32) {
        _ = Glibc.signal(signal, SIG_DFL)
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, signal)
        _ = pthread_sigmask(SIG_UNBLOCK, &set, nil)
        _ = raise(signal)
    }
}
