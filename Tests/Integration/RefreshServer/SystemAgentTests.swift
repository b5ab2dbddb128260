#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

import Glibc

/// A system agent (`vault agent --policy`) as a server runs it: the agent owns the vault and its
/// key; two real users of this machine, made here with useradd and removed afterwards, run real
/// `vault` clients through `setpriv`. User A is granted one entry (and, through a group, a second
/// one when its process has that group); user B is named nowhere. Neither can read the vault
/// file or the key file, and neither's output ever holds a refresh token or the client secret.
///
/// Root is needed to make the users: Scripts/test runs as root in CI, and a skipped test fails it.
@Suite(.serialized) struct SystemAgentTests {
    struct User {
        let name: String
        let uid: UInt32
        let gid: UInt32
    }

    /// Makes (or finds, after a crashed run) a system user with no home and no shell.
    private static func user(_ name: String) async throws -> User {
        if getpwnam(name) == nil {
            let made = try await offPool {
                try ChildProcess.run("/usr/sbin/useradd", ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], environment: [:])
            }
            #expect(made.status == 0 || getpwnam(name) != nil, "\(made)")
        }
        let account = try #require(getpwnam(name), "useradd \(name)")
        return User(name: name, uid: account.pointee.pw_uid, gid: account.pointee.pw_gid)
    }

    private static func group(_ name: String) async throws -> UInt32 {
        if getgrnam(name) == nil {
            let made = try await offPool { try ChildProcess.run("/usr/sbin/groupadd", ["--system", name], environment: [:]) }
            #expect(made.status == 0 || getgrnam(name) != nil, "\(made)")
        }
        return try #require(getgrnam(name), "groupadd \(name)").pointee.gr_gid
    }

    /// Runs `arguments` as `user` (real and effective uid and gid; supplementary groups exactly
    /// `groups`) with a bare environment plus `environment`.
    private func run(
        as user: User, groups: [UInt32] = [], _ program: String, _ arguments: [String], environment: [String: String] = [:]
    ) async throws -> ChildResult {
        let groupArgument = groups.isEmpty ? "--clear-groups" : "--groups=\(groups.map(String.init).joined(separator: ","))"
        var env = ["PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"]
        env.merge(environment) { $1 }
        let bare = env
        return try await offPool {
            try ChildProcess.run(
                "/usr/bin/setpriv", ["--reuid=\(user.uid)", "--regid=\(user.gid)", groupArgument, "--", program] + arguments, environment: bare)
        }
    }

    @Test func aPolicyGrantsOneUserOneEntryAndRefusesEverythingElse() async throws {
        try #require(getuid() == 0, "this test creates users (useradd) and runs clients as them with setpriv; Scripts/test runs as root in CI")
        let server = try TestOAuthServer.require()
        let userA = try await Self.user("tv-sysagent-a")
        let userB = try await Self.user("tv-sysagent-b")
        let webGroup = try await Self.group("tv-sysagent-web")
        defer {
            // Synchronously, pass or fail: the users and group leave with the test.
            for name in ["tv-sysagent-a", "tv-sysagent-b"] { _ = try? ChildProcess.run("/usr/sbin/userdel", [name], environment: [:]) }
            _ = try? ChildProcess.run("/usr/sbin/groupdel", ["tv-sysagent-web"], environment: [:])
        }
        let granted = try CredentialKey(service: uniqueName("tv-sys-api"), account: "deploy")
        let other = try CredentialKey(service: uniqueName("tv-sys-other"), account: "deploy")
        let byGroup = try CredentialKey(service: uniqueName("tv-sys-web"), account: "default")
        try await withVault(.encryptedFile, services: [granted.service, other.service, byGroup.service]) { scratch, vault in
            // The granted entry: a confidential client's token, already expired, so that A's
            // `get --fresh` makes the agent refresh it with the refresh token and the client
            // secret, neither of which A may ever see.
            let serverUser = uniqueName("sysagent")
            var token = try await server.login(user: serverUser, confidential: true)
            let refreshToken = try #require(token.refreshToken)
            token.expiresAt = Date().addingTimeInterval(-5)
            try await vault.saveToken(token, for: granted, registration: try server.confidentialClient())
            let otherToken = OAuthToken(accessToken: "other-\(UUID().uuidString.prefix(8))", refreshToken: "other-refresh-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
            try await vault.saveToken(otherToken, for: other)
            let groupToken = OAuthToken(accessToken: "group-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
            try await vault.saveToken(groupToken, for: byGroup)
            let secrets = [refreshToken, TestOAuthServer.confidentialSecret, otherToken.accessToken, otherToken.refreshToken ?? "-"]

            // The socket's directory: others may pass through and not write (0755); the socket 0666.
            let directory = "/tmp/tv-sysagent-\(UUID().uuidString.prefix(8))"
            #expect(mkdir(directory, 0o755) == 0 && chmod(directory, 0o755) == 0)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let policy = directory + "/policy"
            let policyText = """
                # the web app's user reads its API token; the web group reads the web entry
                user \(userA.name)   \(granted.service)   deploy
                group tv-sysagent-web   \(byGroup.service)
                """
            #expect(FileManager.default.createFile(atPath: policy, contents: Data(policyText.utf8), attributes: [.posixPermissions: 0o644]))
            // Counted before the agent starts: its refresh ahead may get to the expired token
            // before A asks; either way the server sees one refresh, the agent's.
            let before = try await server.stats(user: serverUser)
            let agent = try await RunningAgent(scratch, arguments: ["--policy", policy], socketDirectory: directory)
            defer { agent.stop() }
            #expect(try Self.mode(agent.socket) == 0o666)

            // The `vault` binary, where the other users can run it.
            let vaultBinary = try Self.installVault(in: directory)
            let client = ["TOKEN_VAULT_AGENT_SOCKET": agent.socket]

            // A reads its entry, refreshed through the agent (the server's count says so).
            let fresh = try await run(as: userA, vaultBinary, ["get", granted.service, granted.account, "--fresh"], environment: client)
            #expect(fresh.status == 0, "\(fresh)")
            let served = fresh.stdoutText.trimmingCharacters(in: .newlines)
            #expect(!served.isEmpty && served != token.accessToken, "A got the token the agent refreshed: \(fresh)")
            let after = try await server.stats(user: serverUser)
            #expect(after.refreshSucceeded == before.refreshSucceeded + 1, "one refresh, made by the agent")
            let stored = try #require(try await vault.token(for: granted))
            #expect(stored.accessToken == served)
            // (The test server's tokens live 10 s: a plain get of one says it expires within 60 s.)
            let plain = try await run(as: userA, vaultBinary, ["get", granted.service, granted.account, "--allow-expired"], environment: client)
            #expect(plain.status == 0 && !plain.stdout.isEmpty, "\(plain)")

            // A may not read another entry: refused (exit 1, permission denied), and logged.
            let refused = try await run(as: userA, vaultBinary, ["get", other.service, other.account], environment: client)
            #expect(refused.status == 1, "\(refused)")
            #expect(refused.stderr.contains("does not let uid \(userA.uid) read"), "\(refused.stderr)")
            try await eventually("the entry refusal in the agent's log") {
                agent.logText.contains("refused uid \(userA.uid) (pid ") && agent.logText.contains("read \(other)")
            }
            // Nor unlock or lock the agent; the status it sees names only its own entries.
            let lock = try await run(as: userA, vaultBinary, ["lock"], environment: client)
            #expect(lock.status == 1 && lock.stderr.contains("lock the agent"), "\(lock)")
            #expect(agent.process.isRunning)
            let status = try await run(as: userA, vaultBinary, ["status"], environment: client)
            #expect(!status.stdoutText.contains(other.service) && !status.stderr.contains(other.service), "\(status)")

            // The group grant counts when A's process has the group (SO_PEERGROUPS), not otherwise.
            let withGroup = try await run(as: userA, groups: [webGroup], vaultBinary, ["get", byGroup.service], environment: client)
            #expect(withGroup.stdoutText == groupToken.accessToken + "\n", "\(withGroup)")
            let withoutGroup = try await run(as: userA, vaultBinary, ["get", byGroup.service], environment: client)
            #expect(withoutGroup.status == 1, "\(withoutGroup)")

            // The whole answer A gets on the wire: the access token, never the refresh token or the secret.
            let identity = AgentProtocol.vaultIdentity(of: try scratch.configuration(.encryptedFile))
            let raw = try await run(as: userA, "/usr/bin/python3", ["-c", Self.rawClient, agent.socket, granted.service, granted.account, identity])
            #expect(raw.stdoutText.contains(served), "\(raw)")

            // A cannot read the vault file or its key, nor get the token around the agent.
            for file in [scratch.vaultPath, scratch.keyFile] {
                let read = try await run(as: userA, "/bin/cat", [file])
                #expect(read.status != 0 && read.stdout.isEmpty, "A read \(file)")
            }
            let direct = try await run(
                as: userA, vaultBinary, ["get", granted.service, granted.account],
                environment: ["TOKEN_VAULT_AGENT": "off", "TOKEN_VAULT_BACKEND": "file", "TOKEN_VAULT_FILE": scratch.vaultPath, "TOKEN_VAULT_KEY_FILE": scratch.keyFile])
            #expect(direct.status != 0 && direct.stdout.isEmpty, "\(direct)")
            let json = try await run(as: userA, vaultBinary, ["get", granted.service, granted.account, "--json"], environment: client)
            #expect(json.status != 0 && json.stdout.isEmpty, "--json goes direct, where A can read nothing: \(json)")

            // B, named nowhere, is refused as it connects: exit 1, and the log says who.
            for entry in [granted, other, byGroup] {
                let b = try await run(as: userB, vaultBinary, ["get", entry.service, entry.account], environment: client)
                #expect(b.status == 1 && b.stdout.isEmpty, "\(b)")
                #expect(b.stderr.contains("grants uid \(userB.uid) nothing"), "\(b.stderr)")
            }
            try await eventually("B's refusal in the agent's log") {
                agent.logText.contains("refused a connection from uid \(userB.uid)") && agent.logText.contains("policy names neither")
            }
            let rawB = try await run(as: userB, "/usr/bin/python3", ["-c", Self.rawClient, agent.socket, granted.service, granted.account, identity])
            #expect(rawB.stdoutText.contains("permission-denied") && !rawB.stdoutText.contains(served), "\(rawB)")

            // Nothing secret in any output A or B got, nor in the agent's log.
            for result in [fresh, plain, refused, lock, status, withGroup, withoutGroup, raw, direct, json, rawB] {
                for secret in secrets {
                    #expect(!result.stdoutText.contains(secret) && !result.stderr.contains(secret), "a secret reached another user")
                }
            }
            for secret in secrets + [served, groupToken.accessToken] {
                #expect(!agent.logText.contains(secret), "the agent logged a secret")
            }
            // The agent's own user is served in full, as without a policy.
            let own = try AgentClient(socketPath: agent.socket).token(for: other, fresh: false, vault: identity)
            #expect(own.accessToken == otherToken.accessToken)
        }
    }

    /// A policy grants reads of access tokens only: a granted user's `vault set` and `vault
    /// delete` (and a raw `store` frame) are refused with a clear message, exit 1, and logged by
    /// uid, pid and entry, never a token; the vault is unchanged. The agent's own user writes.
    @Test func aGrantedUserCannotWriteThroughTheAgent() async throws {
        try #require(getuid() == 0, "this test creates a user (useradd) and runs clients as it with setpriv; Scripts/test runs as root in CI")
        let userA = try await Self.user("tv-sysagent-a")
        defer { _ = try? ChildProcess.run("/usr/sbin/userdel", ["tv-sysagent-a"], environment: [:]) }
        let granted = try CredentialKey(service: uniqueName("tv-sys-write"), account: "deploy")
        try await withVault(.encryptedFile, services: [granted.service]) { scratch, vault in
            let token = OAuthToken(accessToken: "granted-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
            try await vault.saveToken(token, for: granted)
            let directory = Self.socketDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let policy = directory + "/policy"
            Self.writePolicy("user \(userA.name) \(granted.service) deploy\n", to: policy)
            let agent = try await RunningAgent(scratch, arguments: ["--policy", policy], socketDirectory: directory)
            defer { agent.stop() }
            let vaultBinary = try Self.installVault(in: directory)
            let client = ["TOKEN_VAULT_AGENT_SOCKET": agent.socket]
            // A plain get: a granted user waits for a busy agent (CI's loaded first request once
            // took longer than 0.5 s); it has no direct path to go to.
            let first = try await run(as: userA, vaultBinary, ["get", granted.service, granted.account], environment: client)
            #expect(first.stdoutText == token.accessToken + "\n", "status \(first.status): \(first.stderr)")

            let planted = "planted-\(UUID().uuidString.prefix(8))"
            let set = try await offPool {
                try ChildProcess.run(
                    "/usr/bin/setpriv", ["--reuid=\(userA.uid)", "--regid=\(userA.gid)", "--clear-groups", "--", vaultBinary, "set", granted.service, granted.account],
                    environment: ["PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"].merging(client) { $1 },
                    stdin: Data((planted + "\n").utf8))
            }
            #expect(set.status == 1, "\(set)")
            #expect(set.stderr.contains("does not let uid \(userA.uid) store \(granted)") && set.stderr.contains("never writes"), "\(set.stderr)")
            let delete = try await run(as: userA, vaultBinary, ["delete", granted.service, granted.account], environment: client)
            #expect(delete.status == 1 && delete.stderr.contains("does not let uid \(userA.uid) delete"), "\(delete)")
            try await eventually("the write refusals in the agent's log") {
                agent.logText.contains("refused uid \(userA.uid) (pid ") && agent.logText.contains("a write (store \(granted))")
                    && agent.logText.contains("a write (delete \(granted))")
            }
            #expect(try await vault.token(for: granted) == token, "a refused write changed the vault")
            #expect(!agent.logText.contains(planted) && !agent.logText.contains(token.accessToken), "the agent logged a token")

            // The agent's own user writes through it, and the granted user reads what it wrote.
            let identity = AgentProtocol.vaultIdentity(of: try scratch.configuration(.encryptedFile))
            let replaced = OAuthToken(accessToken: "owner-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
            let written = try AgentClient(socketPath: agent.socket).store(
                try AgentStoreRequest(key: granted, keepingRegistration: replaced, vault: identity))
            #expect(written.backend == "file")
            let after = try await run(as: userA, vaultBinary, ["get", granted.service, granted.account], environment: client)
            #expect(after.stdoutText == replaced.accessToken + "\n", "status \(after.status): \(after.stderr)")
        }
    }

    /// A granted user cannot go direct (the vault is not theirs), so its plain `vault get` does not
    /// give up on a busy agent after the 0.5 s that a user who can read the vault gets (that one
    /// keeps the fast fallback: AgentTests). It says that it waits, and gets the token once the
    /// agent answers (busy here: stopped with SIGSTOP, then continued); when no answer comes
    /// within the bound (10 s for a read) or the agent dies meanwhile, it fails with exit 6 and
    /// says why, and never tries the direct path.
    @Test func aGrantedUserWaitsForABusyAgentAndSaysWhyWhenItGivesUp() async throws {
        try #require(getuid() == 0, "this test creates a user (useradd) and runs clients as it with setpriv; Scripts/test runs as root in CI")
        let userA = try await Self.user("tv-sysagent-a")
        defer { _ = try? ChildProcess.run("/usr/sbin/userdel", ["tv-sysagent-a"], environment: [:]) }
        let granted = try CredentialKey(service: uniqueName("tv-sys-busy"), account: "deploy")
        try await withVault(.encryptedFile, services: [granted.service]) { scratch, vault in
            let token = OAuthToken(accessToken: "busy-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
            try await vault.saveToken(token, for: granted)
            let directory = Self.socketDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let policy = directory + "/policy"
            Self.writePolicy("user \(userA.name) \(granted.service) deploy\n", to: policy)
            let agent = try await RunningAgent(scratch, arguments: ["--policy", policy], socketDirectory: directory)
            defer { agent.stop() }
            let vaultBinary = try Self.installVault(in: directory)
            let client = ["TOKEN_VAULT_AGENT_SOCKET": agent.socket]
            /// A's `vault get` of the granted entry, in the background.
            func startGet(_ label: String) throws -> BackgroundCommand {
                try BackgroundCommand(
                    "/usr/bin/setpriv",
                    ["--reuid=\(userA.uid)", "--regid=\(userA.gid)", "--clear-groups", "--", vaultBinary, "get", granted.service, granted.account],
                    environment: ["PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"].merging(client) { $1 },
                    errorPath: scratch.path("\(label).err"))
            }

            // Busy: the client says that it waits (past 0.5 s), and is served once the agent goes on.
            agent.process.kill(SIGSTOP)
            let patient = try startGet("patient")
            defer { patient.process.stop() }
            try await eventually("A's get waiting for the stopped agent") { patient.stderrText.contains("waiting up to 10 s") }
            #expect(patient.isRunning, "\(patient.stderrText)")
            agent.process.kill(SIGCONT)
            let served = try await patient.finish()
            #expect(served.status == 0 && served.stdoutText == token.accessToken + "\n", "\(served)")
            #expect(!served.stderr.contains("going direct"), "\(served)")

            // No answer within the bound: exit 6, saying why, and no direct attempt.
            agent.process.kill(SIGSTOP)
            let gaveUp = try await run(as: userA, vaultBinary, ["get", granted.service, granted.account], environment: client)
            agent.process.kill(SIGCONT)
            #expect(gaveUp.status == 6 && gaveUp.stdout.isEmpty, "\(gaveUp)")
            #expect(
                gaveUp.stderr.contains("did not answer within 10000 ms") && gaveUp.stderr.contains("is stopped")
                    && gaveUp.stderr.contains("no direct path"), "\(gaveUp.stderr)")
            #expect(!gaveUp.stderr.contains("going direct"), "\(gaveUp.stderr)")
            #expect(gaveUp.elapsed >= .seconds(10), "A gave up before the bound: \(gaveUp.elapsed)")
            #expect(try await run(as: userA, vaultBinary, ["get", granted.service, granted.account], environment: client).status == 0)

            // The agent dies while A waits: A says so at once, exit 6, without waiting out the bound.
            agent.process.kill(SIGSTOP)
            let orphan = try startGet("orphan")
            defer { orphan.process.stop() }
            try await eventually("A's get waiting for the stopped agent") { orphan.stderrText.contains("waiting up to") }
            agent.process.kill(SIGKILL)
            let lost = try await orphan.finish()
            #expect(lost.status == 6 && lost.stdout.isEmpty, "\(lost)")
            #expect(lost.stderr.contains("closed the connection without an answer") && lost.stderr.contains("no direct path"), "\(lost.stderr)")
            #expect(lost.elapsed < .seconds(9), "A waited for a dead agent: \(lost.elapsed)")
            for result in [served, gaveUp, lost] {
                #expect(!result.stderr.contains(token.accessToken), "a token in a message")
            }
        }
    }

    /// A policy written where the system agent reads it (0644, in a fresh 0755 directory, which
    /// the test users can pass through to the socket).
    private static func writePolicy(_ text: String, to path: String) {
        #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o644]))
        #expect(chmod(path, 0o644) == 0)
    }

    private static func socketDirectory() -> String {
        let directory = "/tmp/tv-sysagent-\(UUID().uuidString.prefix(8))"
        #expect(mkdir(directory, 0o755) == 0 && chmod(directory, 0o755) == 0)
        return directory
    }

    @Test func sighupReloadsThePolicyAndABadOneKeepsTheOld() async throws {
        try #require(getuid() == 0, "this test creates a user (useradd) and runs clients as it with setpriv; Scripts/test runs as root in CI")
        let userA = try await Self.user("tv-sysagent-a")
        defer { _ = try? ChildProcess.run("/usr/sbin/userdel", ["tv-sysagent-a"], environment: [:]) }
        let first = try CredentialKey(service: uniqueName("tv-sys-first"), account: "deploy")
        let second = try CredentialKey(service: uniqueName("tv-sys-second"), account: "deploy")
        try await withVault(.encryptedFile, services: [first.service, second.service]) { scratch, vault in
            let firstToken = OAuthToken(accessToken: "first-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
            let secondToken = OAuthToken(accessToken: "second-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
            try await vault.saveToken(firstToken, for: first)
            try await vault.saveToken(secondToken, for: second)
            let directory = Self.socketDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let policy = directory + "/policy"
            Self.writePolicy("user \(userA.name) \(first.service) deploy\n", to: policy)
            let agent = try await RunningAgent(scratch, arguments: ["--policy", policy], socketDirectory: directory)
            defer { agent.stop() }
            let vaultBinary = try Self.installVault(in: directory)
            let client = ["TOKEN_VAULT_AGENT_SOCKET": agent.socket]
            let identity = AgentProtocol.vaultIdentity(of: try scratch.configuration(.encryptedFile))
            func get(_ key: CredentialKey) async throws -> ChildResult {
                try await run(as: userA, vaultBinary, ["get", key.service, key.account], environment: client)
            }

            #expect(try await get(first).stdoutText == firstToken.accessToken + "\n")
            #expect(try await get(second).status == 1)
            // A connection opened under the first policy, kept open across both reloads.
            let session = try Session(as: userA, socket: agent.socket, vault: identity, log: scratch.path("session.log"))
            defer { session.end() }
            #expect(try await session.send("connect") == "admitted")
            #expect(try await session.send("token 0 \(first.service) deploy") == "token")

            // A policy that does not parse: refused, the old one stays in force, the log says why.
            Self.writePolicy("user \(userA.name) \(first.service) deploy\nallow \(userA.name) \(second.service) deploy\n", to: policy)
            agent.process.kill(SIGHUP)
            try await eventually("the refused reload in the agent's log") {
                agent.logText.contains("kept the policy in force (1 grants)") && agent.logText.contains("line 2: unknown key \"allow\"")
            }
            #expect(agent.process.isRunning, "SIGHUP with --policy reloads; it does not stop the agent")
            #expect(try await get(first).stdoutText == firstToken.accessToken + "\n")
            #expect(try await get(second).status == 1)
            // An unsafe file (writable by others) is refused the same way.
            #expect(chmod(policy, 0o666) == 0)
            agent.process.kill(SIGHUP)
            try await eventually("the refused unsafe policy in the agent's log") {
                agent.logText.contains("writable by its group or others")
            }
            #expect(try await get(first).stdoutText == firstToken.accessToken + "\n")

            // A good one: in force for the next request, on the connection opened before it too.
            Self.writePolicy("user \(userA.name) \(second.service) deploy\n", to: policy)
            agent.process.kill(SIGHUP)
            try await eventually("the reload in the agent's log") {
                agent.logText.contains("reloaded the policy \(policy): 1 grants in force")
            }
            let revoked = try await get(first)
            #expect(revoked.status == 1 && revoked.stdout.isEmpty, "\(revoked)")
            #expect(try await get(second).stdoutText == secondToken.accessToken + "\n")
            #expect(try await session.send("token 0 \(first.service) deploy") == "failure permission-denied")
            #expect(try await session.send("token 0 \(second.service) deploy") == "token")
            for token in [firstToken.accessToken, secondToken.accessToken] {
                #expect(!agent.logText.contains(token), "the agent logged a token")
            }
        }
    }

    @Test func oneUserCannotTakeEveryConnectionSlot() async throws {
        try #require(getuid() == 0, "this test creates users (useradd) and runs clients as them with setpriv; Scripts/test runs as root in CI")
        let userA = try await Self.user("tv-sysagent-a")
        let userB = try await Self.user("tv-sysagent-b")
        defer {
            for name in ["tv-sysagent-a", "tv-sysagent-b"] { _ = try? ChildProcess.run("/usr/sbin/userdel", [name], environment: [:]) }
        }
        let key = try CredentialKey(service: uniqueName("tv-sys-share"), account: "deploy")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let token = OAuthToken(accessToken: "share-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
            try await vault.saveToken(token, for: key)
            let directory = Self.socketDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let policy = directory + "/policy"
            Self.writePolicy("user \(userA.name) \(key.service) deploy\nuser \(userB.name) \(key.service) deploy\n", to: policy)
            let agent = try await RunningAgent(
                scratch, arguments: ["--policy", policy, "--max-connections", "5", "--max-connections-per-user", "2"], socketDirectory: directory)
            defer { agent.stop() }
            let vaultBinary = try Self.installVault(in: directory)
            let identity = AgentProtocol.vaultIdentity(of: try scratch.configuration(.encryptedFile))

            // A holds its share, two of the five slots, and its third connection is closed
            // (without the share, A could hold all five).
            let sessionA = try Session(as: userA, socket: agent.socket, vault: identity, log: scratch.path("session-a.log"))
            defer { sessionA.end() }
            #expect(try await sessionA.send("connect") == "admitted")
            #expect(try await sessionA.send("connect") == "admitted")
            #expect(try await sessionA.send("connect") == "closed")
            try await eventually("the share refusal in the agent's log") {
                agent.logText.contains("uid \(userA.uid) has 2 connections open, its share")
            }
            // B still gets in: a whole `vault get`, and two connections held (with the get's,
            // which the agent may not have given back yet, at most five).
            let b = try await run(as: userB, vaultBinary, ["get", key.service, key.account], environment: ["TOKEN_VAULT_AGENT_SOCKET": agent.socket])
            #expect(b.stdoutText == token.accessToken + "\n", "\(b)")
            let sessionB = try Session(as: userB, socket: agent.socket, vault: identity, log: scratch.path("session-b.log"))
            defer { sessionB.end() }
            #expect(try await sessionB.send("connect") == "admitted")
            #expect(try await sessionB.send("connect") == "admitted")
            // B has its share now too.
            #expect(try await sessionB.send("connect") == "closed")
            #expect(try await sessionA.send("token 0 \(key.service) deploy") == "token", "A's held connections are served")
            #expect(try await sessionB.send("token 1 \(key.service) deploy") == "token")
        }
    }

    /// A raw protocol session run as a user, holding connections open across its commands: one
    /// command a line on stdin, one answer a line on stdout. `connect` opens a connection and asks
    /// the agent's status on it: `admitted`, or `closed` when the agent closed it; `token N
    /// SERVICE ACCOUNT` asks for a token on the Nth admitted connection: `token` (the token itself
    /// is not printed), `failure CODE` or `closed`. Every read is bounded (10 s: `timeout`).
    final class Session: @unchecked Sendable {  // the child process, used by one test at a time
        let process: ChildProcess

        init(as user: User, socket: String, vault: String, log: String) throws {
            process = try ChildProcess(
                "/usr/bin/setpriv",
                ["--reuid=\(user.uid)", "--regid=\(user.gid)", "--clear-groups", "--", "/usr/bin/python3", "-c", Self.script, socket, vault],
                environment: ["PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"], input: true, output: true, errorPath: log)
        }

        func send(_ command: String) async throws -> String {
            try process.input?.write(contentsOf: Data((command + "\n").utf8))
            let process = self.process
            return try await offPool { process.readLine() ?? "(the session ended)" }
        }

        func end() {
            try? process.input?.close()
            process.wait()
        }

        static let script = """
            import socket, struct, json, sys
            path, vault = sys.argv[1], sys.argv[2]
            conns = []
            def ask(s, body):
                s.sendall(struct.pack(">I", len(body)) + body)
                data = b""
                while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
                    chunk = s.recv(65536)
                    if not chunk:
                        raise EOFError()
                    data += chunk
                return data[4:]
            for line in sys.stdin:
                words = line.split()
                try:
                    if words[0] == "connect":
                        s = socket.socket(socket.AF_UNIX)
                        s.settimeout(10)
                        s.connect(path)
                        reply = ask(s, bytes([1, 2]))
                        conns.append(s)
                        print("admitted" if reply[1] == 0x82 else "answered %d" % reply[1])
                    else:
                        request = {"service": words[2], "account": words[3], "fresh": False, "leeway": 60, "vault": vault}
                        reply = ask(conns[int(words[1])], bytes([1, 1]) + json.dumps(request).encode())
                        print("token" if reply[1] == 0x81 else "failure " + json.loads(reply[2:])["code"])
                except socket.timeout:
                    print("timeout")
                except (EOFError, BrokenPipeError, ConnectionResetError):
                    print("closed")
                sys.stdout.flush()
            """
    }

    @Test func aPolicyFileThatIsUnsafeOrUnknownStopsTheAgent() async throws {
        let key = try CredentialKey(service: uniqueName("tv-sys-bad"))
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            try await vault.saveToken(OAuthToken(accessToken: "policy-\(UUID().uuidString.prefix(8))"), for: key)
            let cases: [(text: String, mode: Int, words: String)] = [
                ("user root svc\n", 0o666, "writable by its group or others"),
                ("allow root svc\n", 0o644, "line 1: unknown key \"allow\""),
                ("# a comment\nuser tv-no-such-user-here svc\n", 0o644, "line 2: there is no user"),
                ("uid 12 svc acct extra\n", 0o644, "line 1: a grant has at most four fields"),
                ("gid 12 s*v\n", 0o644, "* may only end a service name"),
            ]
            for (index, testCase) in cases.enumerated() {
                let policy = scratch.path("policy-\(index)")
                #expect(FileManager.default.createFile(atPath: policy, contents: Data(testCase.text.utf8)))
                #expect(chmod(policy, mode_t(testCase.mode)) == 0)
                var environment = scratch.environment(.encryptedFile)
                environment["TOKEN_VAULT_AGENT_SOCKET"] = scratch.path("agent-\(index).sock")
                let agentEnvironment = environment
                let result = try await offPool {
                    try ChildProcess.run(try Products.executable("vault"), ["agent", "--policy", policy], environment: agentEnvironment)
                }
                #expect(result.status == 1, "\(testCase.text): \(result)")
                #expect(result.stderr.contains(testCase.words), "\(result.stderr)")
                #expect(!FileManager.default.fileExists(atPath: scratch.path("agent-\(index).sock")), "the agent listened with a bad policy")
            }
            let link = scratch.path("policy-link")
            #expect(symlink(scratch.path("policy-1"), link) == 0)
            var environment = scratch.environment(.encryptedFile)
            environment["TOKEN_VAULT_AGENT_SOCKET"] = scratch.path("agent-link.sock")
            let linkEnvironment = environment
            let linked = try await offPool { try ChildProcess.run(try Products.executable("vault"), ["agent", "--policy", link], environment: linkEnvironment) }
            #expect(linked.status == 1 && linked.stderr.contains("symbolic link"), "\(linked)")
        }
    }

    /// The permission bits of `path` itself (FileManager reads them with lstat: a link is not followed).
    private static func mode(_ path: String) throws -> UInt32 {
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        return try #require((attributes[.posixPermissions] as? NSNumber)?.uint32Value) & 0o7777
    }

    /// A copy of the `vault` binary in `directory` (0755), which the test users can reach; the
    /// build directory may not be.
    private static func installVault(in directory: String) throws -> String {
        let target = directory + "/vault"
        try FileManager.default.copyItem(atPath: try Products.executable("vault"), toPath: target)
        #expect(chmod(target, 0o755) == 0)
        return target
    }

    /// A raw protocol client: one token request, and every byte of the answer's body printed.
    static let rawClient = """
        import socket, struct, json, sys
        s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
        body = bytes([1, 1]) + json.dumps({"service": sys.argv[2], "account": sys.argv[3], "fresh": False, "leeway": 60, "vault": sys.argv[4]}).encode()
        try:
            s.sendall(struct.pack(">I", len(body)) + body)
        except BrokenPipeError:
            pass
        data = b""
        try:
            while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
                chunk = s.recv(65536)
                if not chunk: break
                data += chunk
        except ConnectionResetError:
            pass
        print(data[6:].decode())
        """
}
#endif
