#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

/// `vault list` and `vault status` say which entries the vault refreshes by itself, and why the
/// others need help, without showing a token or the client secret.
@Suite struct RefreshStateCommandTests {
    static let clientSecret = "tv-list-client-secret-93c7a1"

    /// Five entries, one in each state, set through the CLI (and one verdict through the library).
    func fill(_ sandbox: CLISandbox) async throws -> [String] {
        let secretFile = sandbox.root.appendingPathComponent("client.secret")
        #expect(FileManager.default.createFile(
            atPath: secretFile.path, contents: Data("\(Self.clientSecret)\n".utf8), attributes: [.posixPermissions: 0o600]))
        let describe = [
            "--token-url", "https://auth.example.com/token", "--client-id", "list-cli", "--client-secret-file", secretFile.path,
        ]
        let withRefresh = #"{"access_token":"at-list-1","token_type":"Bearer","expires_in":3600,"refresh_token":"rt-list-1"}"#
        let withoutRefresh = #"{"access_token":"at-list-2","token_type":"Bearer","expires_in":3600}"#
        let entries: [(account: String, response: String, options: [String])] = [
            ("auto", withRefresh, describe),
            ("no-rt", withoutRefresh, describe),
            ("manual", withRefresh, []),
            ("none", withoutRefresh, []),
            ("rejected", withRefresh, describe),
        ]
        for entry in entries {
            let set = try sandbox.run("vault", ["set", "api", entry.account] + entry.options + sandbox.fileVault, stdin: Data(entry.response.utf8))
            #expect(set.status == 0, "\(set)")
        }
        // The server's verdict on a refresh token, as any process stores it after invalid_grant.
        let vault = try await Vault.open(
            VaultConfiguration(backend: .file, filePath: sandbox.vaultFile.path, keySource: .keyFile(sandbox.keyFile.path)))
        let key = try CredentialKey(service: "api", account: "rejected")
        var token = try #require(try await vault.token(for: key))
        token.expiresAt = Date().addingTimeInterval(-10)
        try await vault.saveToken(token, for: key, registration: try await vault.registration(for: key))
        await #expect(throws: VaultError.self) {
            try await vault.freshToken(for: key) { _ in throw OAuthErrorResponse(error: "invalid_grant") }
        }
        return ["at-list-1", "at-list-2", "rt-list-1", Self.clientSecret]
    }

    @Test func listNamesEachEntrysRefreshState() async throws {
        let sandbox = try CLISandbox()
        let secrets = try await fill(sandbox)

        let json = try sandbox.vault("list", "--json")
        #expect(json.status == 0, "\(json)")
        let rows = try #require(json.json as? [[String: Any]])
        let states = Dictionary(uniqueKeysWithValues: rows.map { ($0["account"] as? String ?? "?", $0["refresh"] as? String ?? "?") })
        #expect(states == ["auto": "self", "no-rt": "no-refresh-token", "manual": "no-description", "none": "none", "rejected": "rejected"])

        let text = try sandbox.vault("list")
        #expect(text.status == 0, "\(text)")
        #expect(text.stdout.contains("REFRESH"))
        func line(_ account: String) -> String {
            text.stdout.split(separator: "\n").first { $0.contains(" \(account) ") }.map(String.init) ?? ""
        }
        #expect(line("auto").trimmingCharacters(in: .whitespaces).hasSuffix("auto"), "\(text.stdout)")
        #expect(line("rejected").contains("rejected: log in again"), "\(text.stdout)")
        #expect(line("no-rt").contains("no refresh token"), "\(text.stdout)")
        #expect(line("manual").contains("manual"), "\(text.stdout)")
        for secret in secrets {
            #expect(!text.stdout.contains(secret) && !text.stderr.contains(secret) && !json.stdout.contains(secret))
        }
    }

    @Test func statusCountsWhatRefreshesItselfAndWhatNeedsALogin() async throws {
        let sandbox = try CLISandbox()
        let secrets = try await fill(sandbox)
        #expect(try sandbox.vault("set", "api", "opaque-less", stdin: Data("gho_fakeBareStatus\n".utf8)).status == 0)

        let json = try sandbox.vault("status", "--json")
        #expect(json.status == 0, "\(json)")
        let object = try #require(json.json as? [String: Any])
        let refresh = try #require(object["refresh"] as? [String: Int])
        #expect(refresh == [
            "tokens": 6, "self": 1, "rejected": 1, "no-refresh-token": 1, "no-description": 1, "unreadable": 0,
        ])

        let text = try sandbox.vault("status")
        #expect(text.status == 0, "\(text)")
        #expect(text.stdout.contains("automatic for 1 of 6 tokens; 1 rejected (log in again)"), "\(text.stdout)")
        for secret in secrets {
            #expect(!text.stdout.contains(secret) && !json.stdout.contains(secret) && !text.stderr.contains(secret))
        }
    }
}
#endif
