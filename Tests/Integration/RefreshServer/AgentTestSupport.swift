#if Integration  // built with the package trait Integration (Scripts/test)
// What the agent's tests share: a running `vault agent` and the environments to reach it, `vault`
// run to its end or in the background, a stand-in for an agent of another build, and the
// processes that hold a file open (an event a test can wait for: a waiter on a lock file).
import Foundation
import Testing
@testable import TokenVaultTestSupport
@_spi(AgentWire) import TokenVault

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

/// A user of this machine made for a test (useradd), whom a system agent's policy may name.
struct SystemUser: Sendable {
    let name: String
    let uid: UInt32
    let gid: UInt32

    /// Makes (or finds, after a crashed run) a system user with no home and no shell.
    static func make(_ name: String) async throws -> SystemUser {
        if getpwnam(name) == nil {
            let made = try await offPool {
                try ChildProcess.run("/usr/sbin/useradd", ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], environment: [:])
            }
            #expect(made.status == 0 || getpwnam(name) != nil, "\(made)")
        }
        let account = try #require(getpwnam(name), "useradd \(name)")
        return SystemUser(name: name, uid: account.pointee.pw_uid, gid: account.pointee.pw_gid)
    }

    /// Makes (or finds) a system group; its gid.
    static func group(_ name: String) async throws -> UInt32 {
        if getgrnam(name) == nil {
            let made = try await offPool { try ChildProcess.run("/usr/sbin/groupadd", ["--system", name], environment: [:]) }
            #expect(made.status == 0 || getgrnam(name) != nil, "\(made)")
        }
        return try #require(getgrnam(name), "groupadd \(name)").pointee.gr_gid
    }

    /// The bare environment a command runs with as this user (no home), plus `environment`.
    static func environment(_ environment: [String: String] = [:]) -> [String: String] {
        ["PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"].merging(environment) { $1 }
    }

    /// `setpriv`'s arguments that run `program` as this user (real and effective uid and gid;
    /// supplementary groups exactly `groups`).
    func setprivArguments(groups: [UInt32] = [], _ program: String, _ arguments: [String]) -> [String] {
        let groupArgument = groups.isEmpty ? "--clear-groups" : "--groups=\(groups.map(String.init).joined(separator: ","))"
        return ["--reuid=\(uid)", "--regid=\(gid)", groupArgument, "--", program] + arguments
    }
}

/// A system agent (`vault agent --policy`) as a server runs it, for tests run as root: real users
/// of this machine (``SystemUser``), a file vault that the agent's user owns and they cannot read,
/// a socket directory they may pass through but not write (0755), the policy file in it, the
/// agent, and a copy of `vault` they can run. ``withSystemAgent(users:groups:services:arguments:policy:entries:_:)``
/// makes it all and takes it all away again, pass or fail.
final class SystemAgent: @unchecked Sendable {  // immutable; the agent's process is RunningAgent's
    let scratch: VaultScratch
    let vault: Vault
    let agent: RunningAgent
    /// The users, by name, in the order given.
    let users: [SystemUser]
    /// The groups, by name.
    let groups: [String: UInt32]
    /// The socket's directory (0755), which holds the policy and the `vault` binary too.
    let directory: String
    let policyPath: String
    /// The copy of `vault` the users run.
    let vaultBinary: String
    /// What a granted client needs: the socket.
    var client: [String: String] { ["TOKEN_VAULT_AGENT_SOCKET": agent.socket] }
    /// The agent's vault identity (``AgentProtocol/vaultIdentity(of:)``).
    let identity: String

    fileprivate init(
        scratch: VaultScratch, vault: Vault, agent: RunningAgent, users: [SystemUser], groups: [String: UInt32], directory: String,
        policyPath: String, vaultBinary: String
    ) throws {
        self.scratch = scratch
        self.vault = vault
        self.agent = agent
        self.users = users
        self.groups = groups
        self.directory = directory
        self.policyPath = policyPath
        self.vaultBinary = vaultBinary
        identity = AgentProtocol.vaultIdentity(of: try scratch.configuration(.encryptedFile))
    }

    /// The user named `name`.
    func user(_ name: String) throws -> SystemUser { try #require(users.first { $0.name == name }, "no user \(name)") }

    /// Runs `program` as `user` (supplementary groups exactly `groups`) with a bare environment
    /// plus `environment`, to its end.
    func run(
        as user: SystemUser, groups: [UInt32] = [], _ program: String, _ arguments: [String], environment: [String: String] = [:],
        stdin: Data = Data()
    ) async throws -> ChildResult {
        let arguments = user.setprivArguments(groups: groups, program, arguments)
        let bare = SystemUser.environment(environment)
        return try await offPool { try ChildProcess.run("/usr/bin/setpriv", arguments, environment: bare, stdin: stdin) }
    }

    /// `vault ARGUMENTS` as `user`, a granted client (the socket only), to its end.
    func vault(as user: SystemUser, groups: [UInt32] = [], _ arguments: [String], stdin: Data = Data()) async throws -> ChildResult {
        try await run(as: user, groups: groups, vaultBinary, arguments, environment: client, stdin: stdin)
    }

    /// `vault ARGUMENTS` as `user`, a granted client, in the background; its stderr in the
    /// scratch file `label`.err.
    func startVault(as user: SystemUser, _ arguments: [String], label: String) throws -> BackgroundCommand {
        try BackgroundCommand(
            "/usr/bin/setpriv", user.setprivArguments(vaultBinary, arguments), environment: SystemUser.environment(client),
            errorPath: scratch.path("\(label).err"))
    }

    /// Replaces the policy file (0644, as the agent requires); SIGHUP puts it in force.
    func writePolicy(_ text: String) {
        Self.writePolicy(text, to: policyPath)
    }

    fileprivate static func writePolicy(_ text: String, to path: String) {
        #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o644]))
        #expect(chmod(path, 0o644) == 0)
    }
}

/// Runs `body` with a ``SystemAgent``: makes `users` and `groups` (useradd, groupadd), a file vault
/// with `services`' entries as `entries` saves them (before the agent starts), the socket
/// directory, the policy `policy`, the agent (`--policy` and `arguments`) and the `vault` the
/// users run; then, pass or fail, stops the agent, removes the directory, the entries, the users
/// and the groups. Root is needed to make users: Scripts/test runs as root in CI, and a test that
/// cannot run fails rather than skips.
func withSystemAgent(
    users names: [String], groups groupNames: [String] = [], services: [String], arguments: [String] = [], policy: String,
    entries: (VaultScratch, Vault) async throws -> Void, _ body: (SystemAgent) async throws -> Void
) async throws {
    try #require(getuid() == 0, "this test creates users (useradd) and runs clients as them with setpriv; Scripts/test runs as root in CI")
    var users: [SystemUser] = []
    for name in names { users.append(try await SystemUser.make(name)) }
    var groups: [String: UInt32] = [:]
    for name in groupNames { groups[name] = try await SystemUser.group(name) }
    defer {
        // Synchronously, pass or fail: the users and groups leave with the test.
        for name in names { _ = try? ChildProcess.run("/usr/sbin/userdel", [name], environment: [:]) }
        for name in groupNames { _ = try? ChildProcess.run("/usr/sbin/groupdel", [name], environment: [:]) }
    }
    try await withVault(.encryptedFile, services: services) { scratch, vault in
        try await entries(scratch, vault)
        // Others may pass through the directory to the socket and not write in it (0755).
        let directory = "/tmp/tv-sysagent-\(UUID().uuidString.prefix(8))"
        #expect(mkdir(directory, 0o755) == 0 && chmod(directory, 0o755) == 0)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let policyPath = directory + "/policy"
        SystemAgent.writePolicy(policy, to: policyPath)
        let agent = try await RunningAgent(scratch, arguments: ["--policy", policyPath] + arguments, socketDirectory: directory)
        defer { agent.stop() }
        // The `vault` binary, where the users can run it (the build directory may not be).
        let vaultBinary = directory + "/vault"
        try FileManager.default.copyItem(atPath: try Products.executable("vault"), toPath: vaultBinary)
        #expect(chmod(vaultBinary, 0o755) == 0)
        try await body(
            try SystemAgent(
                scratch: scratch, vault: vault, agent: agent, users: users, groups: groups, directory: directory, policyPath: policyPath,
                vaultBinary: vaultBinary))
    }
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
                    _ = answer.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
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
