#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
@_spi(AgentWire) import TokenVault

import Glibc

/// Clients of this build against an agent built before `accounts` and `list` (a FakeAgent that
/// answers as such an agent did: "unknown message kind"): each request the older agent cannot
/// answer goes direct, as it did before the request kind existed, with no hang and no trap.
@Suite struct OlderAgentTests {
    /// What an agent built before a request kind answered it.
    static func unknownKind(_ body: [UInt8]) -> [UInt8] {
        AgentResponse.failure(
            code: "invalid-input", message: "The request is malformed: unknown message kind \(body.count > 1 ? body[1] : 0).").encoded()
    }

    /// git with no username, the host's only entry not `default`: the helper asks the older agent
    /// for `default` (not there), then for the host's accounts, which it cannot answer, and then
    /// finds the only entry directly: git gets the token.
    @Test func gitWithNoUserNameGoesDirectWhenTheAgentDoesNotListAccounts() async throws {
        let host = uniqueName("git-older").lowercased() + ".example.com"
        try await withVault(.encryptedFile, services: [host]) { scratch, vault in
            let token = "git-older-\(UUID().uuidString.prefix(8))"
            try await vault.saveToken(
                OAuthToken(accessToken: token, expiresAt: Date().addingTimeInterval(3600)), for: try CredentialKey(service: host, account: "octocat"))
            let directory = scratch.path("old-agent")
            #expect(mkdir(directory, 0o700) == 0)
            let path = directory + "/agent.sock"
            let oldAgent = try FakeAgent(path: path, connections: 4) { body in
                body.count > 1 && body[1] == 0x01
                    ? AgentResponse.failure(code: "not-found", message: "No entry under that key.").encoded() : Self.unknownKind(body)
            }
            var environment = scratch.environment(.encryptedFile)
            environment["TOKEN_VAULT_AGENT_SOCKET"] = path
            environment["GIT_TERMINAL_PROMPT"] = "0"
            environment["GIT_CONFIG_NOSYSTEM"] = "1"
            environment["GIT_CONFIG_GLOBAL"] = "/dev/null"
            let vaultBinary = try Products.executable("vault")
            let childEnvironment = environment
            let fill = try await offPool {
                try ChildProcess.run(
                    "/usr/bin/git", ["-c", "credential.helper=", "-c", "credential.helper=!'\(vaultBinary)' git-credential", "credential", "fill"],
                    environment: childEnvironment, stdin: Data("protocol=https\nhost=\(host)\n\n".utf8))
            }
            oldAgent.close()
            #expect(fill.status == 0, "\(fill)")
            #expect(fill.stdoutText.contains("username=octocat\n") && fill.stdoutText.contains("password=\(token)\n"), "\(fill)")
            #expect(try await oldAgent.requestKinds() == [0x01, 0x08], "the helper asked the agent first")
            #expect(!fill.stderr.contains(token))
        }
    }

    /// `vault list` of a passphrase vault, with no passphrase, and an older agent that says it
    /// holds the vault unlocked but cannot list: the command goes direct, which needs the
    /// passphrase, and says so (exit 6), at once.
    @Test func listGoesDirectWhenTheAgentCannotList() async throws {
        let scratch = try VaultScratch()
        defer { scratch.remove() }
        var configuration = VaultConfiguration(
            backend: .file, filePath: scratch.vaultPath, keySource: .passphrase(try SecretBytes(copying: Array("older-agent-pass".utf8))))
        configuration.createIfMissing = true
        let vault = try await Vault.open(configuration)
        try await vault.saveToken(OAuthToken(accessToken: "older-list"), for: try CredentialKey(service: "older", account: "one"))
        let identity = AgentProtocol.vaultIdentity(of: VaultConfiguration(backend: .file, filePath: scratch.vaultPath))
        let directory = scratch.path("old-agent")
        #expect(mkdir(directory, 0o700) == 0)
        let path = directory + "/agent.sock"
        let oldAgent = try FakeAgent(path: path, connections: 4) { body in
            body.count > 1 && body[1] == 0x02
                ? AgentResponse.status(AgentStatus(pid: 1, unlocked: true, vault: identity, refreshAt: 0.75, entries: [])).encoded()
                : Self.unknownKind(body)
        }
        var environment = scratch.environment(.encryptedFile)
        environment["TOKEN_VAULT_KEY_FILE"] = nil
        environment["TOKEN_VAULT_AGENT_SOCKET"] = path
        let started = ContinuousClock.now
        let list = try await runVault(["list"], environment)
        oldAgent.close()
        #expect(list.status == 6 && list.stderr.contains("needs a key"), "\(list)")
        #expect(ContinuousClock.now - started < .seconds(10))
        let kinds = try await oldAgent.requestKinds()
        #expect(kinds.prefix(2) == [0x02, 0x09], "the command asked the agent first: \(kinds)")
    }
}
#endif
