#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
@_spi(AgentWire) import TokenVault

import Glibc

/// A system agent (`vault agent --policy`) as a server runs it: the agent owns the vault and its
/// key; two real users of this machine, made here with useradd and removed afterwards, run real
/// `vault` clients through `setpriv`. User A is granted one entry (and, through a group, a second
/// one when its process has that group); user B is named nowhere. Neither can read the vault
/// file or the key file, and neither's output ever holds a refresh token or the client secret.
///
/// Root is needed to make the users: Scripts/test runs as root in CI, and a skipped test fails it.
@Suite(.serialized) struct SystemAgentTests {
    /// The test users' names (``withSystemAgent(users:groups:services:arguments:policy:entries:_:)`` makes them).
    private static let userA = "tv-sysagent-a"
    private static let userB = "tv-sysagent-b"

    @Test func aPolicyGrantsOneUserOneEntryAndRefusesEverythingElse() async throws {
        let server = try TestOAuthServer.require()
        let granted = try CredentialKey(service: uniqueName("tv-sys-api"), account: "deploy")
        let other = try CredentialKey(service: uniqueName("tv-sys-other"), account: "deploy")
        let byGroup = try CredentialKey(service: uniqueName("tv-sys-web"), account: "default")
        let serverUser = uniqueName("sysagent")
        var token = try await server.login(user: serverUser, confidential: true)
        let refreshToken = try #require(token.refreshToken)
        token.expiresAt = Date().addingTimeInterval(-5)
        let otherToken = OAuthToken(accessToken: "other-\(UUID().uuidString.prefix(8))", refreshToken: "other-refresh-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
        let groupToken = OAuthToken(accessToken: "group-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
        let secrets = [refreshToken, TestOAuthServer.confidentialSecret, otherToken.accessToken, otherToken.refreshToken ?? "-"]
        // Counted before the agent starts: its refresh ahead may get to the expired token
        // before A asks; either way the server sees one refresh, the agent's.
        var counted: TestOAuthServer.Stats?
        try await withSystemAgent(
            users: [Self.userA, Self.userB], groups: ["tv-sysagent-web"], services: [granted.service, other.service, byGroup.service],
            policy: """
                # the web app's user reads its API token; the web group reads the web entry
                user \(Self.userA)   \(granted.service)   deploy
                group tv-sysagent-web   \(byGroup.service)
                """,
            entries: { _, vault in
                // The granted entry: a confidential client's token, already expired, so that A's
                // `get --fresh` makes the agent refresh it with the refresh token and the client
                // secret, neither of which A may ever see.
                try await vault.saveToken(token, for: granted, registration: try server.confidentialClient())
                try await vault.saveToken(otherToken, for: other)
                try await vault.saveToken(groupToken, for: byGroup)
                counted = try await server.stats(user: serverUser)
            }
        ) { system in
            let (scratch, vault, agent, vaultBinary, client) = (system.scratch, system.vault, system.agent, system.vaultBinary, system.client)
            let userA = try system.user(Self.userA)
            let userB = try system.user(Self.userB)
            let webGroup = try #require(system.groups["tv-sysagent-web"])
            let before = try #require(counted)
            func run(as user: SystemUser, groups: [UInt32] = [], _ program: String, _ arguments: [String], environment: [String: String] = [:])
                async throws -> ChildResult
            {
                try await system.run(as: user, groups: groups, program, arguments, environment: environment)
            }
            // The socket's directory: others may pass through and not write (0755); the socket 0666.
            #expect(try Self.mode(agent.socket) == 0o666)

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
            let identity = system.identity
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
        let granted = try CredentialKey(service: uniqueName("tv-sys-write"), account: "deploy")
        let token = OAuthToken(accessToken: "granted-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
        try await withSystemAgent(
            users: [Self.userA], services: [granted.service], policy: "user \(Self.userA) \(granted.service) deploy\n",
            entries: { _, vault in try await vault.saveToken(token, for: granted) }
        ) { system in
            let (vault, agent, vaultBinary, client) = (system.vault, system.agent, system.vaultBinary, system.client)
            let userA = try system.user(Self.userA)
            func run(as user: SystemUser, _ program: String, _ arguments: [String], environment: [String: String] = [:]) async throws -> ChildResult {
                try await system.run(as: user, program, arguments, environment: environment)
            }
            // A plain get: a granted user waits for a busy agent (CI's loaded first request once
            // took longer than 0.5 s); it has no direct path to go to.
            let first = try await run(as: userA, vaultBinary, ["get", granted.service, granted.account], environment: client)
            #expect(first.stdoutText == token.accessToken + "\n", "status \(first.status): \(first.stderr)")

            let planted = "planted-\(UUID().uuidString.prefix(8))"
            let set = try await system.vault(as: userA, ["set", granted.service, granted.account], stdin: Data((planted + "\n").utf8))
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
            let identity = system.identity
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
        let granted = try CredentialKey(service: uniqueName("tv-sys-busy"), account: "deploy")
        let token = OAuthToken(accessToken: "busy-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
        try await withSystemAgent(
            users: [Self.userA], services: [granted.service], policy: "user \(Self.userA) \(granted.service) deploy\n",
            entries: { _, vault in try await vault.saveToken(token, for: granted) }
        ) { system in
            let (agent, vaultBinary, client) = (system.agent, system.vaultBinary, system.client)
            let userA = try system.user(Self.userA)
            func run(as user: SystemUser, _ program: String, _ arguments: [String], environment: [String: String] = [:]) async throws -> ChildResult {
                try await system.run(as: user, program, arguments, environment: environment)
            }
            /// A's `vault get` of the granted entry, in the background.
            func startGet(_ label: String) throws -> BackgroundCommand {
                try system.startVault(as: userA, ["get", granted.service, granted.account], label: label)
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

    /// A granted user has no direct path, so a connection the agent closes for want of a slot (its
    /// uid's share, `--max-connections-per-user 2`, held here by a session of A's) is no reason to
    /// give up: the agent answers `no-free-connection` as it closes it, and A's `vault get` says
    /// once that it waits, connects again, and gets the token as soon as a slot is free. With the
    /// share held the whole time it fails after the bound (10 s for a read), exit 6, saying that
    /// the agent had no free slot for it, and never goes direct. The agent's own user, whose share
    /// is held too, keeps the fast way: the direct path at once.
    @Test func aGrantedUserWaitsForAFreeConnectionSlotAndTheOwnerGoesDirect() async throws {
        let granted = try CredentialKey(service: uniqueName("tv-sys-slot"), account: "deploy")
        let token = OAuthToken(accessToken: "slot-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
        try await withSystemAgent(
            users: [Self.userA], services: [granted.service], arguments: ["--max-connections-per-user", "2"],
            policy: "user \(Self.userA) \(granted.service) deploy\n",
            entries: { _, vault in try await vault.saveToken(token, for: granted) }
        ) { system in
            let agent = system.agent
            let userA = try system.user(Self.userA)
            let get = ["get", granted.service, granted.account]
            let session = try Session(as: userA, socket: agent.socket, vault: system.identity, log: system.scratch.path("session.log"))
            defer { session.end() }
            #expect(try await session.send("connect") == "admitted")
            #expect(try await session.send("connect") == "admitted")
            #expect(try await session.send("connect") == "refused no-free-connection", "A's share is two connections")

            // A's get, its share held: it says that it waits, and is served once a slot frees.
            let patient = try system.startVault(as: userA, get, label: "patient")
            defer { patient.process.stop() }
            try await eventually("A's get waiting for a free connection slot") {
                patient.stderrText.contains("the agent has no free connection slot for this user")
            }
            #expect(patient.isRunning, "\(patient.stderrText)")
            #expect(try await session.send("close 0") == "closed")
            let served = try await patient.finish()
            #expect(served.status == 0 && served.stdoutText == token.accessToken + "\n", "\(served)")
            #expect(served.stderr.components(separatedBy: "vault: ").count == 2, "one waiting line: \(served.stderr)")
            #expect(served.stderr.contains("trying again for up to 10 s"), "\(served.stderr)")
            #expect(!served.stderr.contains("going direct"), "\(served.stderr)")

            // The share held the whole time: exit 6 after the bound, saying why, and no direct attempt.
            try await eventually("A holding its share again") { try await session.send("connect") == "admitted" }
            let gaveUp = try await system.vault(as: userA, get)
            #expect(gaveUp.status == 6 && gaveUp.stdout.isEmpty, "\(gaveUp)")
            #expect(
                gaveUp.stderr.contains("had no free connection slot for this user (uid \(userA.uid)) within 10 s")
                    && gaveUp.stderr.contains("its share (--max-connections-per-user)") && gaveUp.stderr.contains("no direct path"),
                "\(gaveUp.stderr)")
            #expect(gaveUp.stderr.components(separatedBy: "trying again for up to 10 s").count == 2, "one waiting line: \(gaveUp.stderr)")
            #expect(!gaveUp.stderr.contains("going direct"), "\(gaveUp.stderr)")
            #expect(gaveUp.elapsed >= .seconds(10), "A gave up before the bound: \(gaveUp.elapsed)")
            #expect(try await session.send("token 1 \(granted.service) deploy") == "token", "the held connections are served")

            // The agent's own user (root here) with its share held: direct, at once.
            var held: [AgentClient.Connection] = []
            try await eventually("the owner holding its share") {
                let connection = try AgentClient.Connection(socketPath: agent.socket)
                if case .status = try connection.send(.status, deadline: .seconds(10)) { held.append(connection) }
                return held.count == 2
            }
            let own = try await runVault(get, agent.keyedClient)
            #expect(own.status == 0 && own.stdoutText == token.accessToken + "\n", "\(own)")
            #expect(own.stderr.contains("no free connection slot for this client") && own.stderr.contains("going direct"), "\(own.stderr)")
            #expect(own.elapsed < .seconds(5), "the owner waited for a slot: \(own.elapsed)")
            withExtendedLifetime(held) {}

            #expect(agent.logText.contains("uid \(userA.uid) has 2 connections open, its share; closed a new one"), "\(agent.logText)")
            for result in [served, gaveUp, own] {
                #expect(!result.stderr.contains(token.accessToken), "a token in a message")
            }
        }
    }

    /// `vault git-credential` under real git (`git credential fill`), run by users of a system
    /// agent, follows `vault get`'s rules: a granted user gets the token from the agent; a refusal
    /// (an entry not granted, a user the policy does not name) is said on stderr and git gets no
    /// credential; the helper never goes direct to a vault the user cannot read (the environment
    /// names that vault and its key file here, as a careless set-up would); an entry that does
    /// not exist is answered with nothing, as directly, so that git asks its next helper.
    @Test func theGitHelperOfAGrantedUserAsksTheAgentAndPassesOnItsRefusal() async throws {
        let granted = try CredentialKey(service: uniqueName("tv-sys-git"), account: "deploy")
        let other = try CredentialKey(service: uniqueName("tv-sys-git-other"), account: "deploy")
        let token = OAuthToken(accessToken: "git-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
        let otherToken = OAuthToken(accessToken: "git-other-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
        // One account of this service is granted, another is not.
        let pinned = try CredentialKey(service: uniqueName("tv-sys-git-pinned"), account: "deploy")
        let pinnedToken = OAuthToken(accessToken: "git-pinned-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
        let adminToken = OAuthToken(accessToken: "git-admin-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
        try await withSystemAgent(
            users: [Self.userA, Self.userB], services: [granted.service, other.service, pinned.service],
            policy: "user \(Self.userA) \(granted.service) *\nuser \(Self.userA) \(pinned.service) deploy\n",
            entries: { _, vault in
                try await vault.saveToken(token, for: granted)
                try await vault.saveToken(otherToken, for: other)
                try await vault.saveToken(pinnedToken, for: pinned)
                try await vault.saveToken(adminToken, for: try CredentialKey(service: pinned.service, account: "admin"))
            }
        ) { system in
            let userA = try system.user(Self.userA)
            let userB = try system.user(Self.userB)
            func fill(as user: SystemUser, host: String, username: String?) async throws -> ChildResult {
                let helper = "!'\(system.vaultBinary)' git-credential"
                return try await system.run(
                    as: user, "/usr/bin/git", ["-c", "credential.helper=", "-c", "credential.helper=\(helper)", "credential", "fill"],
                    environment: system.client.merging([
                        "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
                        // The direct path would try this vault, which the user cannot read.
                        "TOKEN_VAULT_BACKEND": "file", "TOKEN_VAULT_FILE": system.scratch.vaultPath,
                        "TOKEN_VAULT_KEY_FILE": system.scratch.keyFile,
                    ]) { $1 },
                    stdin: Data("protocol=https\nhost=\(host)\n\(username.map { "username=\($0)\n" } ?? "")\n".utf8))
            }

            let served = try await fill(as: userA, host: granted.service, username: "deploy")
            #expect(served.status == 0, "\(served)")
            #expect(served.stdoutText.contains("username=deploy\n") && served.stdoutText.contains("password=\(token.accessToken)\n"), "\(served)")

            // No username (a URL without one): the granted host's only entry, named by the agent.
            let noUsername = try await fill(as: userA, host: granted.service, username: nil)
            #expect(noUsername.status == 0, "\(noUsername)")
            #expect(
                noUsername.stdoutText.contains("username=deploy\n") && noUsername.stdoutText.contains("password=\(token.accessToken)\n"),
                "\(noUsername)")

            // No username, one of two accounts granted: the granted one; the other is never named.
            let onlyGranted = try await fill(as: userA, host: pinned.service, username: nil)
            #expect(onlyGranted.status == 0, "\(onlyGranted)")
            #expect(
                onlyGranted.stdoutText.contains("username=deploy\n") && onlyGranted.stdoutText.contains("password=\(pinnedToken.accessToken)\n"),
                "\(onlyGranted)")
            #expect(!onlyGranted.stdoutText.contains(adminToken.accessToken) && !onlyGranted.stderr.contains("admin"), "\(onlyGranted)")
            // No username, nothing of the service granted: the agent's refusal, as with one.
            let noneGranted = try await fill(as: userA, host: other.service, username: nil)
            #expect(noneGranted.status != 0 && !noneGranted.stdoutText.contains("password="), "\(noneGranted)")
            #expect(noneGranted.stderr.contains("does not let uid \(userA.uid) read"), "\(noneGranted.stderr)")

            let notGranted = try await fill(as: userA, host: other.service, username: "deploy")
            #expect(notGranted.status != 0 && !notGranted.stdoutText.contains("password="), "\(notGranted)")
            #expect(notGranted.stderr.contains("does not let uid \(userA.uid) read \(other)"), "\(notGranted.stderr)")

            let notNamed = try await fill(as: userB, host: granted.service, username: "deploy")
            #expect(notNamed.status != 0 && !notNamed.stdoutText.contains("password="), "\(notNamed)")
            #expect(notNamed.stderr.contains("grants uid \(userB.uid) nothing"), "\(notNamed.stderr)")

            // Granted (any account) but not stored: nothing, and no error of the helper's.
            let missing = try await fill(as: userA, host: granted.service, username: "nobody-\(UUID().uuidString.prefix(4).lowercased())")
            #expect(missing.status != 0 && !missing.stdoutText.contains("password="), "\(missing)")
            #expect(!missing.stderr.contains("vault"), "\(missing.stderr)")

            for result in [notGranted, notNamed, missing] {
                #expect(!result.stderr.contains("going direct") && !result.stderr.contains(system.scratch.vaultPath), "\(result.stderr)")
            }
            for result in [served, notGranted, notNamed, missing] {
                #expect(!result.stderr.contains(token.accessToken) && !result.stderr.contains(otherToken.accessToken), "a token in a message")
            }
            #expect(!notGranted.stdoutText.contains(otherToken.accessToken) && !notNamed.stdoutText.contains(token.accessToken))
        }
    }

    @Test func sighupReloadsThePolicyAndABadOneKeepsTheOld() async throws {
        let first = try CredentialKey(service: uniqueName("tv-sys-first"), account: "deploy")
        let second = try CredentialKey(service: uniqueName("tv-sys-second"), account: "deploy")
        let firstToken = OAuthToken(accessToken: "first-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
        let secondToken = OAuthToken(accessToken: "second-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
        try await withSystemAgent(
            users: [Self.userA], services: [first.service, second.service], policy: "user \(Self.userA) \(first.service) deploy\n",
            entries: { _, vault in
                try await vault.saveToken(firstToken, for: first)
                try await vault.saveToken(secondToken, for: second)
            }
        ) { system in
            let (scratch, agent, identity, policy) = (system.scratch, system.agent, system.identity, system.policyPath)
            let userA = try system.user(Self.userA)
            func get(_ key: CredentialKey) async throws -> ChildResult {
                try await system.vault(as: userA, ["get", key.service, key.account])
            }

            #expect(try await get(first).stdoutText == firstToken.accessToken + "\n")
            #expect(try await get(second).status == 1)
            // A connection opened under the first policy, kept open across both reloads.
            let session = try Session(as: userA, socket: agent.socket, vault: identity, log: scratch.path("session.log"))
            defer { session.end() }
            #expect(try await session.send("connect") == "admitted")
            #expect(try await session.send("token 0 \(first.service) deploy") == "token")

            // A policy that does not parse: refused, the old one stays in force, the log says why.
            system.writePolicy("user \(userA.name) \(first.service) deploy\nallow \(userA.name) \(second.service) deploy\n")
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
            system.writePolicy("user \(userA.name) \(second.service) deploy\n")
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
        let key = try CredentialKey(service: uniqueName("tv-sys-share"), account: "deploy")
        let token = OAuthToken(accessToken: "share-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600))
        try await withSystemAgent(
            users: [Self.userA, Self.userB], services: [key.service], arguments: ["--max-connections", "5", "--max-connections-per-user", "2"],
            policy: "user \(Self.userA) \(key.service) deploy\nuser \(Self.userB) \(key.service) deploy\n",
            entries: { _, vault in try await vault.saveToken(token, for: key) }
        ) { system in
            let (scratch, agent, identity) = (system.scratch, system.agent, system.identity)
            let userA = try system.user(Self.userA)
            let userB = try system.user(Self.userB)

            // A holds its share, two of the five slots, and its third connection is closed
            // (without the share, A could hold all five).
            let sessionA = try Session(as: userA, socket: agent.socket, vault: identity, log: scratch.path("session-a.log"))
            defer { sessionA.end() }
            #expect(try await sessionA.send("connect") == "admitted")
            #expect(try await sessionA.send("connect") == "admitted")
            #expect(try await sessionA.send("connect") == "refused no-free-connection")
            try await eventually("the share refusal in the agent's log") {
                agent.logText.contains("uid \(userA.uid) has 2 connections open, its share")
            }
            // B still gets in: a whole `vault get`, and two connections held (with the get's,
            // which the agent may not have given back yet, at most five).
            let b = try await system.vault(as: userB, ["get", key.service, key.account])
            #expect(b.stdoutText == token.accessToken + "\n", "\(b)")
            let sessionB = try Session(as: userB, socket: agent.socket, vault: identity, log: scratch.path("session-b.log"))
            defer { sessionB.end() }
            #expect(try await sessionB.send("connect") == "admitted")
            #expect(try await sessionB.send("connect") == "admitted")
            // B has its share now too.
            #expect(try await sessionB.send("connect") == "refused no-free-connection")
            #expect(try await sessionA.send("token 0 \(key.service) deploy") == "token", "A's held connections are served")
            #expect(try await sessionB.send("token 1 \(key.service) deploy") == "token")
        }
    }

    /// A raw protocol session run as a user, holding connections open across its commands: one
    /// command a line on stdin, one answer a line on stdout. `connect` opens a connection and asks
    /// the agent's status on it: `admitted`, `refused CODE` when the agent answered a failure (and
    /// closed it), or `closed` when it closed it without an answer; `token N SERVICE ACCOUNT` asks
    /// for a token on the Nth admitted connection: `token` (the token itself is not printed),
    /// `failure CODE` or `closed`; `close N` closes the Nth admitted connection (`closed`). Every
    /// read is bounded (10 s: `timeout`).
    final class Session: @unchecked Sendable {  // the child process, used by one test at a time
        let process: ChildProcess

        init(as user: SystemUser, socket: String, vault: String, log: String) throws {
            process = try ChildProcess(
                "/usr/bin/setpriv", user.setprivArguments("/usr/bin/python3", ["-c", Self.script, socket, vault]),
                environment: SystemUser.environment(), input: true, output: true, errorPath: log)
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
                try:
                    s.sendall(struct.pack(">I", len(body)) + body)
                except BrokenPipeError:
                    pass  # an agent that refuses the connection answers and closes at once: read its answer

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
                        if reply[1] == 0xFF:
                            s.close()
                            print("refused " + json.loads(reply[2:])["code"])
                        else:
                            conns.append(s)
                            print("admitted" if reply[1] == 0x82 else "answered %d" % reply[1])
                    elif words[0] == "close":
                        conns[int(words[1])].close()
                        print("closed")
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
