#if Integration  // built with the package trait Integration (Scripts/test)
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
@testable import TokenVaultTestSupport
import TokenVault
import TokenVaultAsyncHTTPClient
import TokenVaultURLSession

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Authorized requests in one call (issue 31, point 2), through each adapter, against the test
/// server's resource endpoint (server.py `/api/data`), which checks every token by introspection
/// against the server's own token store. The token "expires mid-run" at the server
/// (`resource_expire_after`): the client still thinks it fresh, is refused, refreshes once and
/// retries once. Each app also sends its refreshes through its own HTTP stack (the adapter's
/// transport), so no request of the run goes through the built-in libcurl.
@Suite struct AuthorizedRequestTests {
    struct Item: Decodable, Sendable { var user: String; var item: Int }

    /// A logged-in user whose token is saved, refreshable, in an in-memory vault.
    static func loggedIn(_ server: TestOAuthServer, prefix: String) async throws -> (user: String, vault: Vault, key: CredentialKey) {
        let user = uniqueName(prefix)
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "authorized", account: user)
        // Tokens that live an hour: only the server's refusals (the faults below) end them, never
        // the clock of a slow run.
        try await server.resourceFault(user: user, "lifetime", seconds: 3600)
        try await vault.saveToken(try await server.login(user: user), for: key, registration: try server.publicClient())
        return (user, vault, key)
    }

    @Test func aURLSessionAppGetsDataThroughATokenThatExpiresMidRunWithOneRefresh() async throws {
        let server = try TestOAuthServer.require()
        let (user, vault, key) = try await Self.loggedIn(server, prefix: "urlsession-app")
        let transport = URLSessionTokenTransport()
        let authorizer = TokenAuthorizer(vault: vault, key: key, client: TokenEndpointClient(transport: transport))
        let before = try await vault.token(for: key)
        // The token serves two requests, then the server ends it before its expires_in.
        try await server.resourceFault(user: user, "resource_expire_after", uses: 2)

        var items: [Int] = []
        for _ in 0..<4 {
            let (data, response) = try await URLSession.shared.data(
                for: URLRequest(url: server.url.appendingPathComponent("api/data")), authorizedBy: authorizer)
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
            let item = try JSONDecoder().decode(Item.self, from: data)
            #expect(item.user == user)
            items.append(item.item)
        }
        // Four answers, one refusal (the third request's first try) in between.
        #expect(items == [1, 2, 4, 5], "\(items)")
        let stats = try await server.stats(user: user)
        #expect(stats.refreshRequests == 1 && stats.refreshSucceeded == 1, "one refresh at the server: \(stats)")
        #expect(stats.resourceRejected == 1)
        let after = try await vault.token(for: key)
        #expect(after?.accessToken != before?.accessToken, "the refreshed token was saved")
    }

    @Test func anAsyncHTTPClientAppGetsDataThroughATokenThatExpiresMidRunWithOneRefresh() async throws {
        let server = try TestOAuthServer.require()
        let (user, vault, key) = try await Self.loggedIn(server, prefix: "ahc-app")
        let transport = AsyncHTTPClientTokenTransport()
        let httpClient = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
        var failure: (any Error)?
        do {
            let authorizer = TokenAuthorizer(vault: vault, key: key, client: TokenEndpointClient(transport: transport))
            try await server.resourceFault(user: user, "resource_expire_after", uses: 2)
            var items: [Int] = []
            for _ in 0..<4 {
                let request = HTTPClientRequest(url: server.url.appendingPathComponent("api/data").absoluteString)
                let response = try await httpClient.execute(request, authorizedBy: authorizer, timeout: .seconds(30))
                #expect(response.status.code == 200)
                let body = try await response.body.collect(upTo: 1 << 16)
                let item = try JSONDecoder().decode(Item.self, from: Data(body.readableBytesView))
                #expect(item.user == user)
                items.append(item.item)
            }
            #expect(items == [1, 2, 4, 5], "\(items)")
            let stats = try await server.stats(user: user)
            #expect(stats.refreshRequests == 1 && stats.refreshSucceeded == 1, "one refresh at the server: \(stats)")
            #expect(stats.resourceRejected == 1)
        } catch {
            failure = error
        }
        try await httpClient.shutdown()
        try await transport.shutdown()
        if let failure { throw failure }
    }

    @Test func eightCallersRefusedWithTheSameTokenMakeOneRefresh() async throws {
        let server = try TestOAuthServer.require()
        let (user, vault, key) = try await Self.loggedIn(server, prefix: "authorized-eight")
        let authorizer = TokenAuthorizer(vault: vault, key: key, client: TokenEndpointClient(transport: URLSessionTokenTransport()))
        let url = server.url.appendingPathComponent("api/data")
        // The first request is the token's last at the server; then eight callers at once.
        try await server.resourceFault(user: user, "resource_expire_after", uses: 1)
        let (_, first) = try await URLSession.shared.data(for: URLRequest(url: url), authorizedBy: authorizer)
        #expect((first as? HTTPURLResponse)?.statusCode == 200)

        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    let (_, response) = try await URLSession.shared.data(for: URLRequest(url: url), authorizedBy: authorizer)
                    return (response as? HTTPURLResponse)?.statusCode ?? 0
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(statuses == Array(repeating: 200, count: 8), "\(statuses)")
        let stats = try await server.stats(user: user)
        #expect(stats.refreshRequests == 1, "eight refusals, one refresh: \(stats)")
        #expect(stats.reuseDetected == 0 && stats.familiesRevoked == 0)
    }

    @Test func aSecondRefusalIsReturnedAfterOneRefreshAndOneRetry() async throws {
        let server = try TestOAuthServer.require()
        let (user, vault, key) = try await Self.loggedIn(server, prefix: "authorized-twice")
        let authorizer = TokenAuthorizer(vault: vault, key: key, client: TokenEndpointClient(transport: URLSessionTokenTransport()))
        try await server.resourceFault(user: user, "resource_reject", count: 2)
        let (_, response) = try await URLSession.shared.data(
            for: URLRequest(url: server.url.appendingPathComponent("api/data")), authorizedBy: authorizer)
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 401)
        #expect(http.value(forHTTPHeaderField: "WWW-Authenticate")?.contains("invalid_token") == true)
        let stats = try await server.stats(user: user)
        #expect(stats.refreshRequests == 1, "one refresh, no loop: \(stats)")
        #expect(stats.resourceRequests == 2 && stats.resourceRejected == 2, "\(stats)")
    }

    @Test func aRefusedTokenWhoseGrantIsGoneAsksForANewLogin() async throws {
        let server = try TestOAuthServer.require()
        let (user, vault, key) = try await Self.loggedIn(server, prefix: "authorized-gone")
        let token = try #require(try await vault.token(for: key))
        // Another client spends the refresh token; the resource server refuses the access token once.
        try await server.spendRefreshToken(of: token)
        try await server.resourceFault(user: user, "resource_reject")
        let authorizer = TokenAuthorizer(vault: vault, key: key, client: TokenEndpointClient(transport: URLSessionTokenTransport()))
        let error = await #expect(throws: VaultError.self) {
            _ = try await URLSession.shared.data(
                for: URLRequest(url: server.url.appendingPathComponent("api/data")), authorizedBy: authorizer)
        }
        #expect(error?.code == .reauthenticationRequired, "\(String(describing: error))")
        #expect(error?.message.contains("log in again") == true, "\(error?.message ?? "")")
        #expect(error.map { !$0.message.contains(token.accessToken) && !$0.message.contains(token.refreshToken ?? "-") } == true)
    }

    @Test func eachAdapterTransportSaysWhyItGotNoAnswer() async throws {
        let nowhere = try #require(URL(string: "http://127.0.0.1:1/token"))
        let registration = try ClientRegistration(tokenEndpoint: nowhere, clientID: "nobody")
        let ahc = AsyncHTTPClientTokenTransport()
        for transport in [URLSessionTokenTransport() as any TokenTransport, ahc] {
            let client = TokenEndpointClient(maximumAttempts: 1, transport: transport)
            let error = await #expect(throws: VaultError.self) {
                _ = try await client.refresh(OAuthToken(accessToken: "at", refreshToken: "rt"), using: registration)
            }
            #expect(error?.code == .networkFailure)
            let underlying = error?.underlying as? TokenTransportError
            #expect(underlying?.code == .cannotConnect, "\(type(of: transport)): \(String(describing: error?.underlying))")
        }
        try await ahc.shutdown()
    }
}

extension TestOAuthServer {
    /// A fault of the resource endpoint `/api/data` for `user` (server.py: resource_reject with
    /// `count`, resource_expire_after with `uses`), or the lifetime of the user's tokens (`seconds`).
    func resourceFault(user: String, _ kind: String, count: Int = 1, uses: Int = 1, seconds: Int = 3600) async throws {
        var request = URLRequest(url: url.appendingPathComponent("faults"))
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data("user=\(user)&kind=\(kind)&count=\(count)&uses=\(uses)&seconds=\(seconds)".utf8)
        let (_, response) = try await URLSession.shared.data(for: request)
        try #require((response as? HTTPURLResponse)?.statusCode == 200)
    }
}
#endif
