#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
@_spi(AgentWire) import TokenVault

import Glibc

/// Writes with `vault agent` running: `vault set`, `vault delete` (and `vault login`'s store step)
/// go through the agent, or directly when no agent answers, and the two paths never disagree.
/// The real binary, a real file vault, the real OAuth server; a client with no key to the vault
/// can only have written through the agent, one with `TOKEN_VAULT_AGENT=off` only directly.
@Suite(.serialized) struct AgentWriteTests {
    @Test func setAndDeleteThroughTheAgentAgreeWithTheDirectPath() async throws {
        let server = try TestOAuthServer.require()
        let key = try CredentialKey(service: uniqueName("tv-agent-write"), account: "acct")
        let other = try CredentialKey(service: uniqueName("tv-agent-write-direct"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service, other.service]) { scratch, vault in
            // The entry holds a client registration that a plain `vault set` keeps.
            let registration = try server.publicClient()
            try await vault.saveToken(OAuthToken(accessToken: "first-\(UUID().uuidString.prefix(8))"), for: key, registration: registration)
            let agent = try await RunningAgent(scratch)
            defer { agent.stop() }
            let entry = [key.service, key.account]

            // Set through the agent (the keyless client can write no other way): a direct get
            // reads it, the registration is kept, and the message is the direct path's.
            let viaAgent = "via-agent-\(UUID().uuidString.prefix(8))"
            let set = try await runVault(["set"] + entry, agent.keylessClient, stdin: stdinLine(viaAgent))
            #expect(set.status == 0, "\(set)")
            #expect(set.stderr == "Saved the token for \(key) (no known expiry) in the file backend.\n", "\(set)")
            let directGet = try await runVault(["get"] + entry, bypassingAgent(agent.keyedClient))
            #expect(directGet.stdoutText == viaAgent + "\n", "\(directGet)")
            #expect(try await vault.tokenEntry(for: key)?.registration == registration, "a plain set keeps the registration")

            // Set directly: the agent serves it next; the same words on stderr.
            let direct = "direct-\(UUID().uuidString.prefix(8))"
            let directSet = try await runVault(["set"] + entry, bypassingAgent(agent.keyedClient), stdin: stdinLine(direct))
            #expect(directSet.stderr == set.stderr, "\(directSet)")
            let agentGet = try await runVault(["get"] + entry, agent.keylessClient)
            #expect(agentGet.stdoutText == direct + "\n", "\(agentGet)")

            // --forget-registration through the agent drops it, as directly.
            let forgot = try await runVault(["set"] + entry + ["--forget-registration"], agent.keylessClient, stdin: stdinLine(viaAgent))
            #expect(forgot.status == 0, "\(forgot)")
            #expect(try await vault.tokenEntry(for: key)?.registration == nil)

            // Bad input: the same validation, message and exit code on both paths, nothing stored.
            for (arguments, stdin) in [(["set"] + entry, Data()), (["set"] + entry, Data("error=bad_verification_code&x=1".utf8)), (["set"] + entry + ["--expires-in", "0"], stdinLine("x"))] {
                let throughAgent = try await runVault(arguments, agent.keylessClient, stdin: stdin)
                let directly = try await runVault(arguments, bypassingAgent(agent.keyedClient), stdin: stdin)
                #expect(throughAgent.status != 0 && throughAgent.status == directly.status, "\(throughAgent) / \(directly)")
                #expect(throughAgent.stderr == directly.stderr, "\(throughAgent) / \(directly)")
            }
            #expect(try await vault.token(for: key)?.accessToken == viaAgent)

            // Delete through the agent: gone for the direct path; deleting again says what the
            // direct path says about a missing entry, with its exit code.
            let deleted = try await runVault(["delete"] + entry, agent.keylessClient)
            #expect(deleted.status == 0 && deleted.stderr == "Deleted \(key).\n", "\(deleted)")
            let gone = try await runVault(["get"] + entry, bypassingAgent(agent.keyedClient))
            #expect(gone.status == 2, "\(gone)")
            let again = try await runVault(["delete"] + entry, agent.keylessClient)
            let againDirect = try await runVault(["delete"] + entry, bypassingAgent(agent.keyedClient))
            #expect(again.status == 2 && again.status == againDirect.status, "\(again) / \(againDirect)")
            #expect(again.stderr == againDirect.stderr, "\(again) / \(againDirect)")

            // A direct delete of an entry the agent serves: the agent says it is gone.
            let otherToken = "other-\(UUID().uuidString.prefix(8))"
            #expect(try await runVault(["set", other.service, other.account], agent.keylessClient, stdin: stdinLine(otherToken)).status == 0)
            #expect(try await runVault(["get", other.service, other.account], agent.keylessClient).stdoutText == otherToken + "\n")
            let directDelete = try await runVault(["delete", other.service, other.account], bypassingAgent(agent.keyedClient))
            #expect(directDelete.status == 0 && directDelete.stderr == deleted.stderr.replacingOccurrences(of: "\(key)", with: "\(other)"))
            #expect(try await runVault(["get", other.service, other.account], agent.keylessClient).status == 2)

            for token in [viaAgent, direct, otherToken] {
                #expect(!agent.logText.contains(token), "the agent logged a token")
            }
            #expect(!agent.logText.contains("refused"), "\(agent.logText)")
        }
    }

    /// A token set through the agent is what the next `get --fresh` serves (nothing stale), and
    /// the agent plans its refresh ahead at once and makes it with the new refresh token.
    @Test func aSetThroughTheAgentIsServedAtOnceAndRefreshedAhead() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("agent-write-ahead")
        let key = try CredentialKey(service: uniqueName("tv-agent-write-ahead"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            // An old, long-lived token without a registration: nothing for the agent to plan.
            try await vault.saveToken(OAuthToken(accessToken: "old-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600)), for: key)
            let agent = try await RunningAgent(scratch, arguments: ["--refresh-at", "0.5"])
            defer { agent.stop() }
            let status = AgentClient(socketPath: agent.socket)
            #expect(try status.status().entries.isEmpty)

            let new = try await server.login(user: user)
            let lifetime = try #require(new.expiresAt).timeIntervalSince(new.issuedAt)
            let response = try JSONSerialization.data(withJSONObject: [
                "access_token": new.accessToken, "token_type": "Bearer", "refresh_token": try #require(new.refreshToken),
                "expires_in": Int(lifetime),
            ])
            let registration = try server.publicClient()
            let before = try await server.stats(user: user)
            let set = try await runVault(
                ["set", key.service, key.account, "--token-url", registration.tokenEndpoint.absoluteString, "--client-id", registration.clientID],
                agent.keylessClient, stdin: response)
            #expect(set.status == 0, "\(set)")
            // At once: the schedule names the entry (the agent's scan has not had to find it) ...
            let planned = try #require(try status.status().entries.first { $0.service == key.service }, "the write was not planned at once")
            #expect(planned.state == "scheduled")
            let next = try #require(planned.nextRefresh)
            #expect(next > Date().timeIntervalSince1970 - 1 && next < Date().timeIntervalSince1970 + lifetime, "\(planned)")
            // ... and the next get --fresh serves the new token, not the old one.
            let fresh = try await runVault(["get", key.service, key.account, "--fresh"], agent.keylessClient)
            #expect(fresh.stdoutText == new.accessToken + "\n", "\(fresh)")
            // The agent refreshes it ahead with the refresh token that came through the write: the
            // server answered it, and (a moment later: the server counts before the agent saves)
            // the vault holds its token.
            try await eventually("the agent's refresh ahead of the token set through it, saved", bound: .seconds(lifetime * 3)) {
                guard try await server.stats(user: user).refreshSucceeded > before.refreshSucceeded else { return false }
                return try await vault.token(for: key).map { $0.accessToken != new.accessToken } == true
            }
            let refreshed = try #require(try await vault.token(for: key))
            #expect(try await server.user(for: refreshed) == user, "the vault holds the token the server issued")
            for secret in [new.accessToken, new.refreshToken ?? "-", refreshed.accessToken] {
                #expect(!agent.logText.contains(secret), "the agent logged a token")
                #expect(!set.stderr.contains(secret))
            }
        }
    }

    /// A delete that arrives while the agent's refresh ahead of the same entry is in flight waits
    /// for it (the entry's refresh lock), so the refresh cannot write the entry back afterwards.
    @Test func aDeleteIsNotResurrectedByARefreshAheadInFlight() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("agent-write-held")
        let key = try CredentialKey(service: uniqueName("tv-agent-write-held"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            var token = try await server.login(user: user)
            token.issuedAt = Date().addingTimeInterval(-60)
            token.expiresAt = Date().addingTimeInterval(-5)
            try await vault.saveToken(token, for: key, registration: try server.publicClient())
            try await server.fault(user: user, "hold")
            let before = try await server.stats(user: user)
            let agent = try await RunningAgent(scratch)
            defer { agent.stop() }
            try await eventually("the agent's refresh held by the server") { try await server.stats(user: user).held == 1 }
            let delete = try BackgroundCommand(
                vault: ["delete", key.service, key.account], environment: agent.keylessClient, errorPath: scratch.path("delete.err"))
            defer { delete.process.stop() }
            // The race under test, seen as it happens: the agent holds the entry's lock file open
            // twice (the refresh's lock, and the delete waiting for it), and the client, past its
            // 0.5 s, says that it waits on. Only then does the token endpoint answer.
            let lockFile = try scratch.lockFile(.encryptedFile, for: key)
            try await eventually("the delete waiting in the agent for the refresh's lock") {
                descriptors(on: lockFile, among: [agent.process.pid])[agent.process.pid] == 2
                    && delete.stderrText.contains("waiting up to")
            }
            #expect(delete.isRunning, "the delete was answered while the refresh held the entry's lock")
            try await server.release(user: user)
            let deleted = try await delete.finish()
            #expect(deleted.status == 0, "\(deleted)")
            #expect(try await server.stats(user: user).refreshSucceeded == before.refreshSucceeded + 1, "the held refresh finished")
            // Gone, on every path, and out of the agent's schedule at once.
            #expect(try await vault.token(for: key) == nil, "the refresh in flight wrote the deleted entry back")
            #expect(try AgentClient(socketPath: agent.socket).status().entries.allSatisfy { $0.service != key.service })
            #expect(try await runVault(["get", key.service, key.account, "--fresh"], agent.keylessClient).status == 2)
        }
    }

    /// A passphrase vault that the agent holds open: `vault set` and `vault delete` need no
    /// passphrase in the client (no Argon2id there); the direct path, given it, agrees.
    @Test func aPassphraseVaultTakesWritesThroughTheUnlockedAgent() async throws {
        let key = try CredentialKey(service: uniqueName("tv-agent-write-pass"), account: "acct")
        let scratch = try VaultScratch()
        defer { scratch.remove() }
        let passphrase = "agent-write-passphrase-\(UUID().uuidString.prefix(6))"
        var configuration = VaultConfiguration(
            backend: .file, filePath: scratch.vaultPath, keySource: .passphrase(try SecretBytes(copying: Array(passphrase.utf8))))
        configuration.createIfMissing = true
        try await Vault.open(configuration).saveToken(OAuthToken(accessToken: "before"), for: key)

        var environment = scratch.environment(.encryptedFile)
        environment["TOKEN_VAULT_KEY_FILE"] = nil
        let agent = try await RunningAgent(scratch, agentEnvironment: environment)
        defer { agent.stop() }
        // Locked: the write goes direct, which has no passphrase (exit 6), and nothing changes.
        let locked = try await runVault(["set", key.service, key.account], agent.keylessClient, stdin: stdinLine("while-locked"))
        #expect(locked.status != 0, "\(locked)")
        #expect(try await runVault(["unlock"], agent.keylessClient, stdin: Data("\(passphrase)\n".utf8)).status == 0)

        let passphraseFile = scratch.path("passphrase")
        #expect(FileManager.default.createFile(atPath: passphraseFile, contents: Data(passphrase.utf8), attributes: [.posixPermissions: 0o600]))
        let withPassphrase = bypassingAgent(agent.keylessClient.merging(["TOKEN_VAULT_PASSPHRASE_FILE": passphraseFile]) { $1 })
        let direct = try await runVault(["set", key.service, key.account], withPassphrase, stdin: stdinLine("direct-with-passphrase"))
        #expect(direct.status == 0, "\(direct)")

        let token = "pass-write-\(UUID().uuidString.prefix(8))"
        let set = try await runVault(["set", key.service, key.account], agent.keylessClient, stdin: stdinLine(token))
        #expect(set.status == 0 && set.stderr == direct.stderr, "\(set) / \(direct)")
        // No Argon2id in the client: faster than the direct set, which derives the key.
        #expect(set.elapsed < direct.elapsed, "through the agent \(set.elapsed), direct \(direct.elapsed)")
        #expect(try await runVault(["get", key.service, key.account], withPassphrase).stdoutText == token + "\n")

        let deleted = try await runVault(["delete", key.service, key.account], agent.keylessClient)
        #expect(deleted.status == 0, "\(deleted)")
        #expect(try await runVault(["get", key.service, key.account], withPassphrase).status == 2)
        #expect(!agent.logText.contains(passphrase) && !agent.logText.contains(token))
    }

    /// The agent killed: the socket stays behind, nobody answers, and writes go direct with the
    /// same result and the same words, at once.
    @Test func aKilledAgentSendsWritesDirect() async throws {
        let key = try CredentialKey(service: uniqueName("tv-agent-write-kill"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            try await vault.saveToken(OAuthToken(accessToken: "before-kill"), for: key)
            let agent = try await RunningAgent(scratch)
            let served = try await runVault(["set", key.service, key.account], agent.keylessClient, stdin: stdinLine("through-the-agent"))
            #expect(served.status == 0, "\(served)")
            agent.process.kill(SIGKILL)
            agent.process.wait()
            #expect(FileManager.default.fileExists(atPath: agent.socket))

            let token = "after-kill-\(UUID().uuidString.prefix(8))"
            let set = try await runVault(["set", key.service, key.account], agent.keyedClient, stdin: stdinLine(token))
            #expect(set.status == 0 && set.stderr == served.stderr, "\(set) / \(served)")
            #expect(set.elapsed < .seconds(1), "\(set.elapsed)")
            #expect(try await vault.token(for: key)?.accessToken == token)
            let deleted = try await runVault(["delete", key.service, key.account], agent.keyedClient)
            #expect(deleted.status == 0 && deleted.stderr == "Deleted \(key).\n", "\(deleted)")
            #expect(try await vault.token(for: key) == nil)
            // The keyless client has no direct path: with no agent its write fails as without one.
            let keyless = try await runVault(["set", key.service, key.account], agent.keylessClient, stdin: stdinLine(token))
            #expect(keyless.status == 6, "\(keyless)")
        }
    }

    /// An agent built before writes went through it answers a `store` or `delete` with
    /// `invalid-input`, "unknown message kind": the client says so and writes directly.
    @Test func anAgentThatDoesNotTakeWritesSendsThemDirect() async throws {
        let key = try CredentialKey(service: uniqueName("tv-agent-write-old"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            // The earlier agent's socket: it reads one frame and answers as that agent did.
            let directory = scratch.path("old-agent")
            #expect(mkdir(directory, 0o700) == 0)
            let path = directory + "/agent.sock"
            let oldAgent = try FakeAgent(path: path, connections: 2) { body in
                AgentResponse.failure(
                    code: "invalid-input", message: "The request is malformed: unknown message kind \(body.count > 1 ? body[1] : 0).").encoded()
            }
            defer { oldAgent.close() }
            var environment = scratch.environment(.encryptedFile)
            environment["TOKEN_VAULT_AGENT_SOCKET"] = path
            let token = "old-agent-\(UUID().uuidString.prefix(8))"
            let set = try await runVault(["set", key.service, key.account], environment, stdin: stdinLine(token))
            #expect(set.status == 0, "\(set)")
            #expect(set.stderr.contains("does not take writes") && set.stderr.contains("going direct"), "\(set.stderr)")
            #expect(try await vault.token(for: key)?.accessToken == token)
            let deleted = try await runVault(["delete", key.service, key.account], environment)
            #expect(deleted.status == 0 && deleted.stderr.hasSuffix("Deleted \(key).\n"), "\(deleted)")
            #expect(try await vault.token(for: key) == nil)
            #expect(try await oldAgent.requestKinds() == [0x06, 0x07], "the client asked the agent first")
            #expect(!set.stderr.contains(token))
        }
    }
}
#endif
