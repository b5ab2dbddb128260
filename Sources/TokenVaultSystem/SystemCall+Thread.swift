// Owns: threads of our own (the Secret Service thread, the agent's acceptor), sleeping, and the
// process's id: what Foundation's Thread and ProcessInfo gave TokenVault before it stopped
// importing Foundation, from pthreads directly.
internal import Glibc

/// What a new thread runs, handed to it through pthread_create's one pointer.
private final class ThreadStart {
    let name: String
    let body: @Sendable () -> Void
    init(name: String, body: @escaping @Sendable () -> Void) { (self.name, self.body) = (name, body) }
}

private typealias ThreadNamer = @convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32

/// glibc's `pthread_setname_np`, which Swift does not import without `_GNU_SOURCE`.
private let threadNamer: ThreadNamer? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pthread_setname_np")
    .map { unsafeBitCast($0, to: ThreadNamer.self) }

private func runThread(_ context: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    let start = Unmanaged<ThreadStart>.fromOpaque(context!).takeRetainedValue()
    if let threadNamer { _ = threadNamer(pthread_self(), String(start.name.utf8.prefix(15))!) }
    start.body()
    return nil
}

extension SystemCall {
    /// This process's id.
    package static var processID: Int32 { getpid() }

    /// One environment variable, read now (`getenv`), or nil when it is not set.
    package static func environmentValue(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }

    /// Sleeps the calling thread for `seconds` (a fraction allowed), through signals.
    package static func sleep(seconds: Double) {
        guard seconds > 0 else { return }
        let whole = seconds.rounded(.down)
        var request = timespec(tv_sec: Int(whole), tv_nsec: Int((seconds - whole) * 1e9))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }

    /// Starts `body` on a new detached thread, named `name` (its first 15 bytes, as `ps -L` and
    /// `/proc/PID/task/*/comm` show it), with `stackSize` bytes of stack when given. Returns
    /// false, having run nothing, when the system has no thread to give.
    @discardableResult
    package static func startThread(name: String, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) -> Bool {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        if let stackSize { pthread_attr_setstacksize(&attributes, stackSize) }
        let context = Unmanaged.passRetained(ThreadStart(name: name, body: body)).toOpaque()
        var thread = pthread_t()
        guard pthread_create(&thread, &attributes, runThread, context) == 0 else {
            Unmanaged<ThreadStart>.fromOpaque(context).release()
            return false
        }
        return true
    }
}

/// A lock with a condition, as Foundation's NSCondition: `wait()` is called with the lock held.
package final class ConditionLock: @unchecked Sendable {  // pthread objects, used only under their own lock
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    package init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    package func lock() { pthread_mutex_lock(mutex) }
    package func unlock() { pthread_mutex_unlock(mutex) }
    /// Waits for `signal()`, giving up the lock meanwhile; may return without one, as a
    /// condition variable may: wait in a loop over the condition.
    package func wait() { pthread_cond_wait(condition, mutex) }
    package func signal() { pthread_cond_signal(condition) }
}
