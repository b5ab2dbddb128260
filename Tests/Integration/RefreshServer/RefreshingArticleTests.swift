#if Integration  // built with the package trait Integration (Scripts/test)
// DocC:imports-begin
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking  // URLRequest and URLSession on Linux
#endif
import TokenVault
// DocC:imports-end
import Testing
@testable import TokenVaultTestSupport

/// The Swift snippets of the DocC article Refreshing.md are this file's code between its
/// `// DocC:<name>-begin` and `// DocC:<name>-end` markers: they compile with every build of the
/// tests, the article must show them verbatim, and those that can run, run against the test server.
@Suite struct RefreshingArticleTests {
    /// A client of the reader's own, as the closure form's snippet names it.
    struct MyOAuthClient {
        var description: ClientRegistration
        func refresh(_ stale: OAuthToken) async throws -> OAuthToken {
            try await TokenEndpointClient().refresh(stale, using: description)
        }
    }

    /// The reader's resource server, as the 401 snippet names it.
    struct ResourceServer {
        var me: URL
        func get(with token: OAuthToken) async throws -> (status: Int, body: Data) {
            var request = URLRequest(url: me)
            request.setValue("\(token.tokenType) \(token.accessToken)", forHTTPHeaderField: "Authorization")
            let (body, response) = try await URLSession.shared.data(for: request)
            return ((response as? HTTPURLResponse)?.statusCode ?? 0, body)
        }
    }

    /// Compiled, never run: it names example.com.
    static func describe(_ vault: Vault, _ token: OAuthToken, key: CredentialKey, secret: String, request: inout URLRequest) async throws {
        // DocC:describe-begin
        // Once, after the login: how this entry is refreshed. Stored with the token.
        let client = try ClientRegistration(
            tokenEndpoint: URL(string: "https://auth.example.com/oauth/token")!,
            clientID: "my-cli",
            clientAuthentication: .clientSecretBasic(secret),   // or .clientSecretPost(secret), or .none
            scope: "read write",
            additionalParameters: ["resource": "https://api.example.com/"])
        try await vault.saveToken(token, for: key, registration: client)

        // Every time, in any process: a token valid for `leeway` seconds at least.
        let fresh = try await vault.freshToken(for: key)
        request.setValue("\(fresh.tokenType) \(fresh.accessToken)", forHTTPHeaderField: "Authorization")
        // DocC:describe-end
    }

    static func closureForm(_ vault: Vault, key: CredentialKey, client: MyOAuthClient) async throws -> OAuthToken {
        // DocC:closure-begin
        let token = try await vault.freshToken(for: key, leeway: 60) { stale in
            try await client.refresh(stale)   // your HTTP call: grant_type=refresh_token
        }
        // DocC:closure-end
        return token
    }

    static func injectedClock(_ vault: Vault, key: CredentialKey) async throws -> OAuthToken {
        // DocC:clock-begin
        let later = VaultClock(now: { Date().addingTimeInterval(3600) }, sleep: { try await Task.sleep(for: $0) })
        let token = try await vault.freshToken(for: key, client: TokenEndpointClient(clock: later))
        // DocC:clock-end
        return token
    }

    static func afterA401(_ vault: Vault, key: CredentialKey, api: ResourceServer) async throws -> OAuthToken {
        // DocC:unauthorized-begin
        var token = try await vault.freshToken(for: key)
        if try await api.get(with: token).status == 401 {
            token = try await vault.refreshAfterRejection(of: token.accessToken, for: key)
        }
        // DocC:unauthorized-end
        return token
    }

    /// The lines between `// DocC:<name>-begin` and `// DocC:<name>-end` in this file, dedented.
    static func section(_ name: String, of source: String) throws -> [String] {
        let lines = source.components(separatedBy: "\n")
        let begin = try #require(lines.firstIndex { $0.trimmingCharacters(in: .whitespaces) == "// DocC:\(name)-begin" })
        let end = try #require(lines.firstIndex { $0.trimmingCharacters(in: .whitespaces) == "// DocC:\(name)-end" })
        let body = lines[(begin + 1)..<end]
        let indent = body.filter { !$0.isEmpty }.map { $0.prefix { $0 == " " }.count }.min() ?? 0
        return body.map { $0.isEmpty ? $0 : String($0.dropFirst(indent)) }
    }

    @Test(arguments: ["imports", "describe", "closure", "clock", "unauthorized"])
    func theArticleShowsTheCompiledSnippet(_ name: String) throws {
        let source = try String(contentsOfFile: #filePath, encoding: .utf8)
        let article = try String(contentsOfFile: PackageFiles.path("Sources/TokenVault/Docs.docc/Refreshing.md"), encoding: .utf8)
        let block = "```swift\n" + (try Self.section(name, of: source)).joined(separator: "\n") + "\n```"
        #expect(article.contains(block), "Refreshing.md must show, verbatim:\n\(block)")
    }

    @Test func theClosureAndClockSnippetsRunAgainstTheServer() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("article")
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "article", account: user)
        var token = try await server.login(user: user)
        token.expiresAt = Date().addingTimeInterval(-5)
        let description = try server.publicClient()
        try await vault.saveToken(token, for: key, registration: description)

        let closure = try await Self.closureForm(vault, key: key, client: MyOAuthClient(description: description))
        #expect(closure.accessToken != token.accessToken)
        #expect(try await server.user(for: closure) == user)
        #expect(try await server.stats(user: user).refreshRequests == 1)

        // Valid for the server's lifetime by the real clock; stale an hour later by the injected one.
        let clocked = try await Self.injectedClock(vault, key: key)
        #expect(clocked.accessToken != closure.accessToken)
        #expect(try await server.stats(user: user).refreshRequests == 2)
    }

    @Test func the401SnippetRefreshesOnceAgainstTheServer() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("article-401")
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "article", account: user)
        var token = try await server.login(user: user)
        token.accessToken = "refused-\(uniqueName("at"))"  // unknown to the server: it answers 401
        token.expiresAt = Date().addingTimeInterval(3600)  // but it looks valid here
        try await vault.saveToken(token, for: key, registration: try server.publicClient())
        let api = ResourceServer(me: server.url.appendingPathComponent("api/me"))

        let replaced = try await Self.afterA401(vault, key: key, api: api)
        #expect(replaced.accessToken != token.accessToken)
        #expect(try await api.get(with: replaced).status == 200)
        #expect(try await server.stats(user: user).refreshRequests == 1)

        // The same report again with the new token's predecessor: no second refresh.
        let again = try await vault.refreshAfterRejection(of: token.accessToken, for: key)
        #expect(again.accessToken == replaced.accessToken)
        #expect(try await server.stats(user: user).refreshRequests == 1)
    }
}
#endif
