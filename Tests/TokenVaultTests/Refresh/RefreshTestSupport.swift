import Foundation
import Synchronization
import TokenVault

/// Counts calls and remembers what the refresh closure was given.
actor RefreshRecorder {
    private(set) var calls = 0
    private(set) var staleRefreshTokens: [String?] = []

    func record(_ stale: OAuthToken) -> Int {
        calls += 1
        staleRefreshTokens.append(stale.refreshToken)
        return calls
    }
}

/// The explicit events by which the single-flight tests synchronise, never a grace period:
/// a refresh started, or a caller joined the flight of a refresh that is being held open.
///
/// A caller that joins a flight awaits the flight's task; when it runs at a higher priority than
/// that task, Swift escalates the task's priority, and the refresh, running in that task, is told
/// (`withTaskPriorityEscalationHandler`). A caller that does not join (single flight broken) calls
/// the refresh closure itself. Either way there is an event, so a held refresh can wait for each
/// caller's decision instead of guessing how long it takes.
final class FlightWitness: Sendable {
    private struct State {
        var started = 0
        var joined = 0
        var failed = false
        var waiters: [(expected: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var events: Int { started + joined }
    }

    private let state = Mutex(State())

    var refreshesStarted: Int { state.withLock { $0.started } }
    var events: Int { state.withLock { $0.events } }

    private func record(_ change: (inout State) -> Void) {
        let ready = state.withLock { state in
            change(&state)
            let events = state.events
            let ready = state.waiters.filter { $0.expected <= events }.map(\.continuation)
            state.waiters.removeAll { $0.expected <= events }
            return ready
        }
        ready.forEach { $0.resume() }
    }

    /// Waits until `expected` events have happened, failing after `bound` (a broken flight that
    /// hangs fails instead of hanging; the bound never decides a passing run).
    func wait(forEvents expected: Int, bound: Duration = .seconds(60)) async throws {
        let reached = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let now = self.state.withLock { state -> Bool in
                        if state.failed || state.events >= expected { return true }
                        state.waiters.append((expected, continuation))
                        return false
                    }
                    if now { continuation.resume() }
                }
                return self.events >= expected
            }
            group.addTask {
                try? await Task.sleep(for: bound)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            if !first {
                // Wake every waiter: the run has failed.
                let waiters = self.state.withLock { state in
                    state.failed = true
                    defer { state.waiters.removeAll() }
                    return state.waiters.map(\.continuation)
                }
                waiters.forEach { $0.resume() }
            }
            return first
        }
        if !reached { throw GateTimeout(expected: expected, arrived: events) }
    }

    /// Called first thing in a refresh closure: records the start, then keeps the refresh open
    /// until `expected` events (this start included) have happened, counting each caller that
    /// joins this refresh's flight.
    func holdRefresh(untilEvents expected: Int) async throws {
        record { $0.started += 1 }
        try await withTaskPriorityEscalationHandler {
            try await wait(forEvents: expected)
        } onPriorityEscalated: { _, _ in
            self.record { $0.joined += 1 }
        }
    }

    /// Called by a refresh that waits for something other than joins (see
    /// ``SingleFlight/lockWaiters(_:)``): records the start only.
    func refreshStarted() {
        record { $0.started += 1 }
    }
}

enum SingleFlight {
    /// The priorities of the callers whose decision (join, or refresh on their own) is proven:
    /// each is higher than the last, so each one that joins escalates the flight once more.
    static let provenPriorities: [TaskPriority] = [.utility, .medium, .high]

    /// The events a held refresh waits for with ``callers(_:witness:_:)``: its own start and one
    /// per proven caller.
    static let heldUntil = 1 + provenPriorities.count

    /// Runs `count` callers of `call` for one key so that a broken single flight fails the test,
    /// whatever the scheduler does. The first caller starts alone, at background priority; its
    /// refresh (which calls ``FlightWitness/holdRefresh(untilEvents:)`` with ``heldUntil``) stays
    /// open while three more callers start one after the other, each waited for until it has
    /// joined the flight or started a refresh of its own. The other callers start after them.
    static func callers<T: Sendable>(
        _ count: Int, witness: FlightWitness, _ call: @escaping @Sendable () async throws -> T
    ) async throws -> [Result<T, any Error>] {
        precondition(count > provenPriorities.count)
        var tasks = [Task(priority: .background) { try await call() }]
        try await witness.wait(forEvents: 1)
        for (index, priority) in provenPriorities.enumerated() {
            tasks.append(Task(priority: priority) { try await call() })
            try await witness.wait(forEvents: 2 + index)
        }
        for _ in tasks.count..<count {
            tasks.append(Task(priority: .high) { try await call() })
        }
        var results: [Result<T, any Error>] = []
        for task in tasks { results.append(await task.result) }
        return results
    }

    /// Waits until `condition`, a state of the process or the kernel that the test can read
    /// but not be told of (which descriptors are open), holds; fails after `bound`.
    static func holdUntil(_ what: String, bound: Duration = .seconds(60), _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now.advanced(by: bound)
        while !condition() {
            guard ContinuousClock.now < deadline else { throw GateTimeout(expected: 1, arrived: 0, what: what) }
            // A poll interval, not a grace: only the condition ends the wait.
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// How many descriptors this process has open on each file in `directory`: a caller waiting
    /// for a refresh lock holds the lock file open from its first try until it gets the lock.
    static func lockWaiters(_ directory: String) -> [String: Int] {
        var counts: [String: Int] = [:]
        guard let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return counts }
        for descriptor in descriptors {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(descriptor)"),
                (target as NSString).deletingLastPathComponent == directory
            else { continue }
            counts[target, default: 0] += 1
        }
        return counts
    }
}

/// A rendezvous: `arrive()` counts, `wait(for:)` returns once that many have arrived, or throws
/// after a generous bound so that a broken single flight fails instead of hanging.
actor Gate {
    private var arrived = 0
    private var waiters: [(expected: Int, continuation: CheckedContinuation<Void, Never>)] = []

    func arrive() {
        arrived += 1
        let ready = waiters.filter { $0.expected <= arrived }
        waiters.removeAll { $0.expected <= arrived }
        ready.forEach { $0.continuation.resume() }
    }

    var count: Int { arrived }

    func wait(for expected: Int, bound: Duration = .seconds(20)) async throws {
        let watchdog = Task {
            try await Task.sleep(for: bound)
            self.expire()
        }
        defer { watchdog.cancel() }
        if arrived < expected {
            await withCheckedContinuation { waiters.append((expected, $0)) }
        }
        guard arrived >= expected else { throw GateTimeout(expected: expected, arrived: arrived) }
    }

    /// The bound passed: wake every waiter, which then finds too few arrivals and throws.
    private func expire() {
        let all = waiters
        waiters.removeAll()
        all.forEach { $0.continuation.resume() }
    }
}

struct GateTimeout: Error, CustomStringConvertible {
    let expected: Int
    let arrived: Int
    var what: String? = nil
    var description: String { what.map { "\($0): not within the bound" } ?? "only \(arrived) of \(expected) arrived within the bound" }
}

enum RefreshFixtures {
    /// A key under a random service, so tests can share stores and lock directories.
    static func key(_ account: String = "default") throws -> CredentialKey {
        try CredentialKey(service: "tv-refresh-\(UUID().uuidString.prefix(8).lowercased())", account: account)
    }

    /// A token that expired ten seconds ago and can be refreshed with `refreshToken`.
    static func expired(access: String = "access-old", refreshToken: String? = "refresh-1") -> OAuthToken {
        OAuthToken(
            accessToken: access, refreshToken: refreshToken, scope: "read",
            issuedAt: Date().addingTimeInterval(-3_610), expiresAt: Date().addingTimeInterval(-10))
    }

    /// What a token endpoint returns on refresh, parsed the way a client would parse it.
    static func response(access: String, refreshToken: String?, expiresIn: Int = 3_600) throws -> OAuthToken {
        var fields = #"{"access_token":"\#(access)","token_type":"Bearer","expires_in":\#(expiresIn)"#
        if let refreshToken { fields += #","refresh_token":"\#(refreshToken)""# }
        return try OAuthToken(tokenResponse: fields + "}")
    }

    /// The error a client gets from parsing `{"error":"<code>"}`.
    static func endpointError(_ code: String) -> any Error {
        do {
            _ = try OAuthToken(tokenResponse: #"{"error":"\#(code)","error_description":"test"}"#)
            return VaultError(.invalidInput, "expected the error response to throw")
        } catch {
            return error
        }
    }
}

/// A store of the caller's own that is a value type, with a backend name TokenVault does not
/// know: freshToken must fall back to the runtime-directory lock for it.
struct ValueTypeStore: CredentialStore {
    let inner: MemoryStore
    var backend: BackendKind { .custom("tv-test-value-store") }
    func load(_ key: CredentialKey) async throws -> Data? { await inner.load(key) }
    func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) async throws {
        await inner.save(secret, for: key, contentType: contentType)
    }
    func delete(_ key: CredentialKey) async throws -> Bool { await inner.delete(key) }
    func keys(service: String?) async throws -> [CredentialKey] { await inner.keys(service: service) }
}
