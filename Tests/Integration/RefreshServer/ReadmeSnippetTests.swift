#if Integration  // built with the package trait Integration (Scripts/test)
// README:imports-begin
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking  // URLRequest and URLSession on Linux
#endif
import TokenVault
// README:imports-end
import Testing
@testable import TokenVaultTestSupport

/// The README's "Fresh tokens" snippet is this file's code between the README markers, so it is
/// compiled with every build, and this test checks that the README still shows exactly that code.
@Suite struct ReadmeSnippetTests {
    /// Compiled, never run: it would open the user's vault and call GitHub.
    static func preface() async throws {
        // README:preface-begin
        let vault = try await Vault.open(.fromEnvironment())
        let key = try CredentialKey(service: "github", account: "octocat")
        let tokenEndpoint = URL(string: "https://github.com/login/oauth/access_token")!
        let api = URL(string: "https://api.github.com/user")!
        // README:preface-end
        _ = (vault, key, tokenEndpoint, api)
    }

    /// Compiled, and run against the test server by the test below.
    static func readmeSnippet(
        _ vault: Vault, _ token: OAuthToken, key: CredentialKey, tokenEndpoint: URL, api: URL
    ) async throws -> String? {
        // README:body-begin
        // Once, after the login: how this entry is refreshed. Any process can then refresh it.
        let client = try ClientRegistration(tokenEndpoint: tokenEndpoint, clientID: "tokenvault-example")
        try await vault.saveToken(token, for: key, registration: client)

        // Every time: a token valid for 60 s at least, one refresh per expiry across all processes.
        do {
            let fresh = try await vault.freshToken(for: key)
            var request = URLRequest(url: api)
            request.setValue("\(fresh.tokenType) \(fresh.accessToken)", forHTTPHeaderField: "Authorization")
            let (body, _) = try await URLSession.shared.data(for: request)
            // README:body-end
            return String(data: body, encoding: .utf8)
            // README:catch-begin
        } catch let error as VaultError where error.code == .reauthenticationRequired {
            // The refresh token was rejected: log in again (vault login, or your own flow).
            // README:catch-end
            return nil
        }
    }

    /// The lines between `// README:<name>-begin` and `// README:<name>-end` in this file, dedented.
    static func section(_ name: String, of source: String) throws -> [String] {
        let lines = source.components(separatedBy: "\n")
        let begin = try #require(lines.firstIndex { $0.trimmingCharacters(in: .whitespaces) == "// README:\(name)-begin" })
        let end = try #require(lines.firstIndex { $0.trimmingCharacters(in: .whitespaces) == "// README:\(name)-end" })
        let body = lines[(begin + 1)..<end]
        let indent = body.filter { !$0.isEmpty }.map { $0.prefix { $0 == " " }.count }.min() ?? 0
        return body.map { $0.isEmpty ? $0 : String($0.dropFirst(indent)) }
    }

    @Test func theReadmeShowsTheCompiledSnippet() throws {
        let source = try String(contentsOfFile: #filePath, encoding: .utf8)
        let readmePath = PackageFiles.path("README.md")
        let readme = try String(contentsOfFile: readmePath, encoding: .utf8)
        let expected = try Self.section("imports", of: source) + [""] + Self.section("preface", of: source) + [""]
            + Self.section("body", of: source) + Self.section("catch", of: source) + ["}"]
        let block = "```swift\n" + expected.joined(separator: "\n") + "\n```"
        #expect(readme.contains(block), "README.md must show, verbatim:\n\(block)")
    }

    @Test func theSnippetRunsAgainstTheServer() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("readme")
        var token = try await server.login(user: user)
        token.expiresAt = Date().addingTimeInterval(-5)
        let body = try await Self.readmeSnippet(
            Vault(store: MemoryStore()), token, key: try CredentialKey(service: "github", account: user), tokenEndpoint: server.url.appendingPathComponent("token"),
            api: server.url.appendingPathComponent("api/me"))
        #expect(body?.contains(user) == true, "\(body ?? "nil")")
        #expect(try await server.stats(user: user).refreshRequests == 1)
    }
}
#endif
