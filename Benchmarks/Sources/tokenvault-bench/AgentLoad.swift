import Foundation
import Synchronization
@_spi(AgentWire) import TokenVault

/// Issue 30's throughput goal: `clients` threads, each on one persistent connection to the agent
/// (AgentClient.Connection, the library's own client), ask for the same token in a loop for
/// `seconds`; every request is timed. A Swift client in a release build, so that the client is
/// not what limits the figure.
enum AgentLoad {
    static func run(socket: String, clients: Int, seconds: Double, service: String, account: String) throws -> [String: Any] {
        // The vault identity the agent serves, from its status (as a client that knows its vault would send).
        let status = try AgentClient(socketPath: socket).status()
        let key = try CredentialKey(service: service, account: account)
        let request = AgentRequest.token(AgentTokenRequest(key: key, fresh: false, vault: status.vault))
        // One request first: the agent answers it with a token, or the run is pointless.
        guard case .token = try AgentClient(socketPath: socket).send(request) else {
            fail("the agent did not answer the benchmark's token request with a token")
        }
        let collected = Collected()
        let done = DispatchGroup()
        let start = DispatchSemaphore(value: 0)
        let deadline = Duration.milliseconds(2000)
        let durationNs = UInt64(seconds * 1e9)
        for _ in 0..<clients {
            done.enter()
            let thread = Thread {
                var latencies = [UInt64]()
                latencies.reserveCapacity(200_000)
                do {
                    let connection = try AgentClient.Connection(socketPath: socket)
                    start.wait()
                    let begin = monotonicNanoseconds()
                    while true {
                        let before = monotonicNanoseconds()
                        guard case .token = try connection.send(request, deadline: deadline) else {
                            collected.failures.add(1, ordering: .relaxed)
                            break
                        }
                        let after = monotonicNanoseconds()
                        latencies.append(after - before)
                        if after - begin >= durationNs { break }
                    }
                } catch {
                    collected.failures.add(1, ordering: .relaxed)
                }
                collected.latencies.withLock { $0.append(latencies) }
                done.leave()
            }
            thread.start()
        }
        // Every client connected before the clock starts.
        let begin = monotonicNanoseconds()
        for _ in 0..<clients { start.signal() }
        done.wait()
        let elapsed = Double(monotonicNanoseconds() - begin) / 1e9
        let all = collected.latencies.withLock { $0.flatMap { $0 } }
        var out = summary(all, seconds: elapsed)
        out["clients"] = clients
        out["gets_per_s"] = Double(all.count) / elapsed
        out["failures"] = collected.failures.load(ordering: .relaxed)
        return out
    }
}

/// What the client threads hand back.
private final class Collected: Sendable {
    let latencies = Mutex<[[UInt64]]>([])
    let failures = Atomic<Int>(0)
}
