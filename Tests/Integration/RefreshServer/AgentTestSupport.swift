#if Integration  // built with the package trait Integration (Scripts/test)
// What the agent's tests share: a running `vault agent` and the environments to reach it, `vault`
// run to its end or in the background, a stand-in for an agent of another build, and the
// processes that hold a file open (an event a test can wait for: a waiter on a lock file).
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

import Glibc

/// A running agent and the environments to reach it.
final class RunningAgent: @unchecked Sendable {  // immutable after init; the child process is ChildProcess's
    let process: ChildProcess
    let socket: String
    let log: String
    /// A client that has no key: only the agent can answer it.
    let keylessClient: [String: String]
    /// A client that opens the vault itself (the direct path) and also knows the socket.
    let keyedClient: [String: String]

    init(_ scratch: VaultScratch, arguments: [String] = [], agentEnvironment: [String: String]? = nil, socketDirectory: String? = nil)
        async throws
    {
        let directory = socketDirectory ?? scratch.path("agent")
        socket = (directory as NSString).appendingPathComponent("agent.sock")
        log = scratch.path("agent-\(UUID().uuidString.prefix(6)).log")
        var environment = agentEnvironment ?? scratch.environment(.encryptedFile)
        environment["TOKEN_VAULT_AGENT_SOCKET"] = socket
        process = try ChildProcess(try Products.executable("vault"), ["agent"] + arguments, environment: environment, errorPath: log)
        var keyed = scratch.environment(.encryptedFile)
        keyed["TOKEN_VAULT_AGENT_SOCKET"] = socket
        keyedClient = keyed
        var keyless = keyed
        keyless["TOKEN_VAULT_KEY_FILE"] = nil
        keylessClient = keyless
        let socket = self.socket
        let process = self.process
        try await eventually("the agent listening on \(socket)", bound: .seconds(30)) {
            try #require(process.isRunning, "the agent exited: \(Self.read(self.log))")
            return (try? AgentClient(socketPath: socket).status()) != nil
        }
    }

    static func read(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    var logText: String { Self.read(log) }

    func stop() { process.stop() }
}

/// The built `vault` run to its end, off the cooperative pool.
func runVault(_ arguments: [String], _ environment: [String: String], stdin: Data = Data()) async throws -> ChildResult {
    let path = try Products.executable("vault")
    return try await offPool { try ChildProcess.run(path, arguments, environment: environment, stdin: stdin) }
}

/// `environment` with the agent bypassed (`TOKEN_VAULT_AGENT=off`): the direct path only.
func bypassingAgent(_ environment: [String: String]) -> [String: String] {
    var environment = environment
    environment["TOKEN_VAULT_AGENT"] = "off"
    return environment
}

/// `token` as one line of stdin.
func stdinLine(_ token: String) -> Data { Data((token + "\n").utf8) }

/// A command running in the background: the test reads its stderr as it is written (to a file),
/// which is how it sees an event in the command (`vault` saying that it waits for the agent, say),
/// and collects its status and output at the end.
final class BackgroundCommand: @unchecked Sendable {  // the child process is ChildProcess's; used by one test
    let process: ChildProcess
    private let errorPath: String
    private let started = ContinuousClock.now

    /// Starts `path` (stdin /dev/null, stdout a pipe, stderr the file at `errorPath`).
    init(_ path: String, _ arguments: [String], environment: [String: String], errorPath: String) throws {
        self.errorPath = errorPath
        process = try ChildProcess(path, arguments, environment: environment, output: true, errorPath: errorPath)
    }

    /// The built `vault` with `arguments`.
    convenience init(vault arguments: [String], environment: [String: String], errorPath: String) throws {
        try self.init(try Products.executable("vault"), arguments, environment: environment, errorPath: errorPath)
    }

    /// What it has written to stderr so far.
    var stderrText: String { RunningAgent.read(errorPath) }

    var isRunning: Bool { process.isRunning }

    /// Waits for its end: status (128 + the signal if one killed it), stdout, stderr, and the time
    /// since it started.
    func finish() async throws -> ChildResult {
        let process = self.process
        let out = try await offPool { process.readAll() }
        let raw = await offPoolNoThrow { process.wait() }
        let status: Int32 = (raw & 0x7f) == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
        return ChildResult(status: status, stdout: out, stderr: stderrText, elapsed: ContinuousClock.now - started)
    }
}

/// A stand-in for an agent of another build, listening at `path`: it takes `connections`
/// connections in turn, reads one frame from each, sends `reply(body)` and closes it.
/// ``requestKinds()`` are the kind bytes of the requests it read.
final class FakeAgent: Sendable {
    private let listener: Int32
    private let served: Task<[UInt8], any Error>

    init(path: String, connections: Int, reply: @escaping @Sendable (_ body: [UInt8]) -> [UInt8]) throws {
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: Array(path.utf8))
            raw[path.utf8.count] = 0
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(listener, 8) == 0 else {
            Glibc.close(listener)
            throw SetupFailure("could not listen on \(path): \(String(cString: strerror(errno)))")
        }
        self.listener = listener
        served = Task.detached {
            try await offPool {
                var kinds: [UInt8] = []
                for _ in 0..<connections {
                    let fd = accept(listener, nil, nil)
                    guard fd >= 0 else { break }
                    var header = [UInt8](repeating: 0, count: 4)
                    _ = recv(fd, &header, 4, Int32(MSG_WAITALL))
                    let length = header.reduce(0) { ($0 << 8) | Int($1) }
                    var body = [UInt8](repeating: 0, count: length)
                    _ = recv(fd, &body, length, Int32(MSG_WAITALL))
                    kinds.append(body.count > 1 ? body[1] : 0)
                    let answer = reply(body)
                    _ = answer.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
                    Glibc.close(fd)
                }
                return kinds
            }
        }
    }

    /// The kind bytes of the requests it read, once it has served every connection.
    func requestKinds() async throws -> [UInt8] { try await served.value }

    /// Stops listening (a connection still awaited then ends its wait).
    func close() {
        shutdown(listener, Int32(SHUT_RDWR))
        Glibc.close(listener)
    }
}

/// The processes among `pids` whose open files include `path`, and how many descriptors each
/// holds on it, from /proc: a waiter on a lock file shows there while it waits.
func descriptors(on path: String, among pids: [Int32]) -> [Int32: Int] {
    var found: [Int32: Int] = [:]
    for pid in pids {
        let directory = "/proc/\(pid)/fd"
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: directory) else { continue }
        for entry in entries where (try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/\(entry)")) == path {
            found[pid, default: 0] += 1
        }
    }
    return found
}
#endif
