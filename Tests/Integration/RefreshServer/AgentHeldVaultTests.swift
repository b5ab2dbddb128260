#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
@_spi(AgentWire) import TokenVault

/// A passphrase vault that only the agent holds open: the client has no passphrase, so every
/// command that answers must have asked the agent, and one that goes direct says it cannot open
/// the vault. The real binary, a real file vault, real git.
@Suite(.serialized) struct AgentHeldVaultTests {
    static func passphraseVault(_ scratch: VaultScratch, _ passphrase: String) async throws -> Vault {
        var configuration = VaultConfiguration(
            backend: .file, filePath: scratch.vaultPath, keySource: .passphrase(try SecretBytes(copying: Array(passphrase.utf8))))
        configuration.createIfMissing = true
        return try await Vault.open(configuration)
    }

    /// An agent started on the passphrase vault with no passphrase: locked until `vault unlock`.
    static func lockedAgent(_ scratch: VaultScratch) async throws -> RunningAgent {
        var environment = scratch.environment(.encryptedFile)
        environment["TOKEN_VAULT_KEY_FILE"] = nil
        return try await RunningAgent(scratch, agentEnvironment: environment)
    }

    /// `vault status` with no key for a passphrase vault the agent holds unlocked: the counts come
    /// from the agent, it asks for no passphrase and exits 0; locked (and with the agent gone), it
    /// says it cannot open the vault, as before (exit 6). `vault list` lists through the unlocked
    /// agent too; `vault get --json`, which reads the vault itself, needs the key, and says what
    /// the unlocked agent can do.
    @Test func statusOfAPassphraseVaultTheAgentHoldsOpenNeedsNoPassphrase() async throws {
        let service = uniqueName("tv-agent-status-pass")
        let scratch = try VaultScratch()
        defer { scratch.remove() }
        let passphrase = "agent-status-passphrase-\(UUID().uuidString.prefix(6))"
        let vault = try await Self.passphraseVault(scratch, passphrase)
        for account in ["one", "two", "three"] {
            try await vault.saveToken(OAuthToken(accessToken: "token-\(account)"), for: try CredentialKey(service: service, account: account))
        }
        let agent = try await Self.lockedAgent(scratch)
        defer { agent.stop() }
        let locked = try await runVault(["status"], agent.keylessClient)
        #expect(locked.status == 6, "\(locked)")
        #expect(locked.stdoutText.contains("none (the vault could not be opened)") && locked.stdoutText.contains("locked (vault unlock)"), "\(locked)")
        let listLocked = try await runVault(["list"], agent.keylessClient)
        #expect(listLocked.status == 6 && !listLocked.stderr.contains("The running agent"), "\(listLocked)")

        #expect(try await runVault(["unlock"], agent.keylessClient, stdin: Data("\(passphrase)\n".utf8)).status == 0)
        let shown = try await runVault(["status"], agent.keylessClient)
        #expect(shown.status == 0 && shown.stderr.isEmpty, "\(shown)")
        #expect(shown.stdoutText.contains("entries:            3"), "\(shown.stdoutText)")
        #expect(shown.stdoutText.contains("backend in use:     file"), "\(shown.stdoutText)")
        #expect(shown.stdoutText.contains("the agent holds the vault open (unlocked)"), "\(shown.stdoutText)")
        let json = try await runVault(["status", "--json"], agent.keylessClient)
        let object = try #require(try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any], "\(json)")
        #expect(object["entries"] as? Int == 3 && object["error"] == nil, "\(json.stdoutText)")

        let list = try await runVault(["list"], agent.keylessClient)
        #expect(list.status == 0 && list.stderr.isEmpty, "\(list)")
        #expect(["one", "two", "three"].allSatisfy { list.stdoutText.contains("\(service)  \($0) ") }, "\(list.stdoutText)")

        // A command that reads the vault itself still needs the key, and says what the agent does.
        let getJSON = try await runVault(["get", service, "one", "--json"], agent.keylessClient)
        #expect(getJSON.status == 6 && getJSON.stderr.contains("needs a key"), "\(getJSON)")
        #expect(getJSON.stderr.contains("The running agent holds this vault unlocked, but this command reads the vault itself"), "\(getJSON)")

        // A set through the agent is counted at once.
        let set = try await runVault(["set", service, "four"], agent.keylessClient, stdin: stdinLine("token-four"))
        #expect(set.status == 0, "\(set)")
        #expect(try await runVault(["status"], agent.keylessClient).stdoutText.contains("entries:            4"))

        agent.stop()
        let gone = try await runVault(["status"], agent.keylessClient)
        #expect(gone.status == 6 && gone.stdoutText.contains("none (the vault could not be opened)"), "\(gone)")
        let listGone = try await runVault(["list"], agent.keylessClient)
        #expect(listGone.status == 6 && !listGone.stderr.contains("The running agent"), "\(listGone)")
    }

    /// `vault list` of a passphrase vault only the agent holds open: the same table and JSON as
    /// the direct path with the passphrase, page by page (long names: about 40 entries a page),
    /// a service's entries alone, an opaque secret as a secret, and expiry states. Locked, it
    /// goes direct and says it needs a key.
    @Test func listThroughTheAgentMatchesTheDirectListing() async throws {
        let service = uniqueName("tv-agent-list")
        let scratch = try VaultScratch()
        defer { scratch.remove() }
        let passphrase = "agent-list-passphrase-\(UUID().uuidString.prefix(6))"
        let vault = try await Self.passphraseVault(scratch, passphrase)
        let long = String(repeating: "a", count: 1000)
        for index in 0..<300 {
            let token = OAuthToken(
                accessToken: "token-\(index)",
                expiresAt: index % 3 == 0 ? Date().addingTimeInterval(-60) : index % 3 == 1 ? Date().addingTimeInterval(30) : nil)
            try await vault.saveToken(token, for: try CredentialKey(service: service, account: "\(long)-\(index)"))
        }
        try await vault.saveToken(OAuthToken(accessToken: "other"), for: try CredentialKey(service: service + "-other", account: "one"))
        try await vault.saveSecret(Data("opaque".utf8), for: try CredentialKey(service: service + "-other", account: "secret"))
        let agent = try await Self.lockedAgent(scratch)
        defer { agent.stop() }

        let locked = try await runVault(["list"], agent.keylessClient)
        #expect(locked.status == 6 && locked.stderr.contains("needs a key"), "\(locked)")
        #expect(try await runVault(["unlock"], agent.keylessClient, stdin: Data("\(passphrase)\n".utf8)).status == 0)

        let passphraseFile = scratch.path("passphrase")
        try Data(passphrase.utf8).write(to: URL(fileURLWithPath: passphraseFile))
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: passphraseFile)
        var direct = agent.keylessClient
        direct["TOKEN_VAULT_AGENT"] = "off"
        direct["TOKEN_VAULT_PASSPHRASE_FILE"] = passphraseFile
        for arguments in [["list", "--json"], ["list"], ["list", service + "-other", "--json"]] {
            let throughAgent = try await runVault(arguments, agent.keylessClient)
            let opened = try await runVault(arguments, direct)
            #expect(throughAgent.status == 0 && throughAgent.stderr.isEmpty, "\(arguments): \(throughAgent.stderr)")
            #expect(opened.status == 0, "\(arguments): \(opened.stderr)")
            #expect(throughAgent.stdoutText == opened.stdoutText, "\(arguments)")
        }
        let json = try await runVault(["list", "--json"], agent.keylessClient)
        let rows = try #require(try JSONSerialization.jsonObject(with: json.stdout) as? [[String: Any]], "\(json)")
        #expect(rows.count == 302)
        let states = Dictionary(grouping: rows.filter { ($0["service"] as? String) == service }) {
            "\($0["expired"] as? Bool ?? false)/\($0["expires_within_leeway"] as? Bool ?? false)"
        }.mapValues(\.count)
        #expect(states == ["true/false": 100, "false/true": 100, "false/false": 100], "\(states)")
        #expect(rows.contains { ($0["account"] as? String) == "secret" && ($0["kind"] as? String) == "secret" })
        let agentLog = agent.logText
        #expect(!agentLog.contains("token-1") && !agentLog.contains(passphrase))
    }

    /// `git credential fill` with no user name (a URL without one) and a helper that pins no
    /// account: the helper uses the host's only entry, as it does directly, and learns which one
    /// from the agent (`accounts`), so git gets the token with no passphrase in the helper. With
    /// two accounts and no `default`, git gets nothing and the helper names them, as directly.
    @Test func gitWithNoUserNameGetsTheHostsOnlyEntryThroughTheAgent() async throws {
        let host = uniqueName("git-held").lowercased() + ".example.com"
        let scratch = try VaultScratch()
        defer { scratch.remove() }
        let passphrase = "agent-git-passphrase-\(UUID().uuidString.prefix(6))"
        let vault = try await Self.passphraseVault(scratch, passphrase)
        let token = "git-held-\(UUID().uuidString.prefix(8))"
        try await vault.saveToken(
            OAuthToken(accessToken: token, expiresAt: Date().addingTimeInterval(3600)), for: try CredentialKey(service: host, account: "octocat"))
        let agent = try await Self.lockedAgent(scratch)
        defer { agent.stop() }
        #expect(try await runVault(["unlock"], agent.keylessClient, stdin: Data("\(passphrase)\n".utf8)).status == 0)

        let vaultBinary = try Products.executable("vault")
        let environment = agent.keylessClient.merging(["GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"]) { $1 }
        func fill() async throws -> ChildResult {
            try await offPool {
                try ChildProcess.run(
                    "/usr/bin/git", ["-c", "credential.helper=", "-c", "credential.helper=!'\(vaultBinary)' git-credential", "credential", "fill"],
                    environment: environment, stdin: Data("protocol=https\nhost=\(host)\n\n".utf8))
            }
        }
        let served = try await fill()
        #expect(served.status == 0, "\(served)")
        #expect(served.stdoutText.contains("username=octocat\n") && served.stdoutText.contains("password=\(token)\n"), "\(served)")
        #expect(!served.stderr.contains("needs a key"), "\(served.stderr)")

        // A second account: which one git means is not known, here as directly.
        let unlocked = try await runVault(["set", host, "hubot"], agent.keylessClient, stdin: stdinLine("git-held-other"))
        #expect(unlocked.status == 0, "\(unlocked)")
        let ambiguous = try await fill()
        #expect(ambiguous.status != 0 && !ambiguous.stdoutText.contains("password="), "\(ambiguous)")
        #expect(ambiguous.stderr.contains("has entries for 2 accounts (hubot, octocat) and git sent no username"), "\(ambiguous.stderr)")
        #expect(!agent.logText.contains(passphrase) && !agent.logText.contains(token))
    }
}
#endif
