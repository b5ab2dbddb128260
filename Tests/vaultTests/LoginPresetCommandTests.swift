#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// Issue 35: `vault login PROVIDER --dry-run` shows every request a preset makes (no network, no
/// vault, never the client secret), and the new options' mistakes are usage errors.
@Suite struct LoginPresetCommandTests {
    static let secret = "preset-secret-7f3a9c21"

    static func dryRun(_ sandbox: CLISandbox, _ arguments: [String]) throws -> CLIResult {
        let path = sandbox.root.appendingPathComponent("client.secret").path
        if !FileManager.default.fileExists(atPath: path) {
            try #require(FileManager.default.createFile(atPath: path, contents: Data("\(secret)\n".utf8), attributes: [.posixPermissions: 0o600]))
        }
        let result = try sandbox.run("vault", ["login"] + arguments + ["--client-secret-file", path, "--dry-run"] + sandbox.fileVault)
        #expect(result.status == 0, "\(arguments): \(result)")
        #expect(!result.stdout.contains(secret) && !result.stderr.contains(secret), "\(arguments) showed the secret")
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path), "\(arguments) created the vault")
        return result
    }

    @Test(arguments: [
        (["atlassian", "--client-id", "jira-app"], [
            "https://auth.atlassian.com/authorize?", "audience=api.atlassian.com", "prompt=consent",
            "scope=read%3Ajira-work+read%3Ajira-user+offline_access", "redirect URI http://127.0.0.1:8976/callback",
            "POSTs to https://auth.atlassian.com/oauth/token", "client_secret=(the client secret from", "developer.atlassian.com",
        ]),
        (["github", "--client-id", "Iv1.abc"], [
            "Grant: device authorization (RFC 8628)", "POSTs to https://github.com/login/device/code",
            "POSTs to https://github.com/login/oauth/access_token", "grant_type=urn:ietf:params:oauth:grant-type:device_code",
            "docs.github.com", "vault logout needs --forget-anyway",
        ]),
        (["mail", "--provider", "google", "--client-id", "g.apps"], [
            "https://accounts.google.com/o/oauth2/v2/auth?", "access_type=offline", "prompt=consent", "http://127.0.0.1:PORT/callback",
            "revokes at https://oauth2.googleapis.com/revoke", "developers.google.com",
        ]),
        (["microsoft", "--tenant", "contoso.onmicrosoft.com", "--client-id", "00000000-app"], [
            "POSTs to https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/devicecode", "scope=openid profile offline_access",
            "learn.microsoft.com",
        ]),
        (["gitlab", "--instance", "https://gitlab.example.com", "--client-id", "gl-app", "--redirect-port", "9123"], [
            "https://gitlab.example.com/oauth/authorize?", "redirect URI http://127.0.0.1:9123/callback",
            "revokes at https://gitlab.example.com/oauth/revoke", "docs.gitlab.com",
        ]),
    ])
    func aPresetShowsEveryRequestItWouldMake(_ arguments: [String], _ shown: [String]) throws {
        let sandbox = try CLISandbox()
        let result = try Self.dryRun(sandbox, arguments)
        for text in shown {
            #expect(result.stdout.contains(text), "\(arguments) does not show \(text):\n\(result.stdout)")
        }
    }

    @Test func authParamsGoToTheAuthorizationRequestAndParamsToTheTokenRequest() throws {
        let sandbox = try CLISandbox()
        let result = try Self.dryRun(sandbox, [
            "work", "--authorize-url", "https://login.example.com/authorize", "--token-url", "https://login.example.com/token",
            "--client-id", "cli", "--auth-param", "audience=api.example.com", "--auth-param", "prompt=login", "--param", "resource=https://api.example.com",
            "--redirect-uri", "http://localhost:7777/oauth/done",
        ])
        let lines = result.stdout.split(separator: "\n").map(String.init)
        let authorization = try #require(lines.first { $0.contains("https://login.example.com/authorize?") })
        #expect(authorization.contains("audience=api.example.com") && authorization.contains("prompt=login"), "\(authorization)")
        #expect(authorization.contains("redirect_uri=http%3A%2F%2Flocalhost%3A7777%2Foauth%2Fdone"), "\(authorization)")
        // The token request carries --param, never --auth-param.
        let token = lines.drop { !$0.contains("POSTs to https://login.example.com/token") }.prefix { !$0.hasPrefix("Later") }
        #expect(token.contains { $0.contains("resource=https://api.example.com") }, "\(token)")
        #expect(!token.contains { $0.contains("audience=") || $0.contains("prompt=") }, "\(token)")
        #expect(token.contains { $0.contains("Authorization: Basic (client id cli and the client secret from") })
    }

    @Test(arguments: [
        ["work", "--authorize-url", "https://x.example/a", "--token-url", "https://x.example/t", "--client-id", "c", "--auth-param", "state=1"],
        ["work", "--authorize-url", "https://x.example/a", "--token-url", "https://x.example/t", "--client-id", "c", "--auth-param", "novalue"],
        ["work", "--authorize-url", "https://x.example/a", "--token-url", "https://x.example/t", "--client-id", "c", "--redirect-uri", "https://127.0.0.1:80/cb"],
        ["work", "--authorize-url", "https://x.example/a", "--token-url", "https://x.example/t", "--client-id", "c", "--redirect-uri", "http://127.0.0.1/cb"],
        ["work", "--authorize-url", "https://x.example/a", "--token-url", "https://x.example/t", "--client-id", "c", "--redirect-uri", "http://example.com:80/cb"],
        ["work", "--authorize-url", "https://x.example/a", "--token-url", "https://x.example/t", "--client-id", "c", "--redirect-port", "70000"],
        ["work", "--authorize-url", "https://x.example/a", "--token-url", "https://x.example/t", "--client-id", "c", "--redirect-port", "1", "--redirect-uri", "http://127.0.0.1:2/cb"],
        ["atlassian"],
        ["work", "--provider", "nosuch", "--client-id", "c"],
        ["work", "--tenant", "x", "--authorize-url", "https://x.example/a", "--token-url", "https://x.example/t", "--client-id", "c"],
    ])
    func aLoginOptionMistakeIsAUsageError(_ arguments: [String]) throws {
        let sandbox = try CLISandbox()
        let result = try sandbox.run("vault", ["login"] + arguments + sandbox.fileVault)
        #expect(result.status == 64, "\(arguments): \(result)")
        #expect(result.stderr.contains("Usage: vault login"), "\(arguments): \(result)")
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path), "\(arguments) created the vault")
    }
}
#endif
