#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Logging
import Testing
@testable import TokenVaultTestSupport
import TokenVault

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The library's own refresh grant (`Vault.freshToken(for:)` with a stored description) against
/// the real authlib server, each failure mode driven by the server, counted by the server.
@Suite struct RefreshGrantTests {
    /// A clock an hour ahead: every stored token has expired, without waiting for it.
    static let anHourLater = VaultClock(now: { Date().addingTimeInterval(3600) }, sleep: { try await Task.sleep(for: $0) })

    /// A fresh login of a new user stored in a memory vault with `description`.
    private func seeded(
        _ server: TestOAuthServer, _ prefix: String, description: ClientRegistration? = nil, confidential: Bool = false
    ) async throws -> (Vault, CredentialKey, OAuthToken, String) {
        let user = uniqueName(prefix)
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "grant", account: user)
        let token = try await server.login(user: user, confidential: confidential)
        try await vault.saveToken(token, for: key, registration: try description ?? server.publicClient())
        return (vault, key, token, user)
    }

    func code(of body: () async throws -> Void) async -> (VaultError.Code?, String) {
        do {
            try await body()
            return (nil, "")
        } catch let error as VaultError {
            return (error.code, error.message)
        } catch {
            return (nil, "\(type(of: error))")
        }
    }

    @Test func aFreshTokenCostsNoRequest() async throws {
        let server = try TestOAuthServer.require()
        let (vault, key, token, user) = try await seeded(server, "fresh")
        #expect(try await vault.freshToken(for: key, leeway: 1) == token.storedRoundTrip())
        #expect(try await server.stats(user: user).refreshRequests == 0)
    }

    @Test func refreshWithRotationStoresTheNewRefreshToken() async throws {
        let server = try TestOAuthServer.require()
        let (vault, key, token, user) = try await seeded(server, "rotate")
        let fresh = try await vault.freshToken(for: key, client: TokenEndpointClient(clock: Self.anHourLater))
        #expect(fresh.accessToken != token.accessToken)
        #expect(fresh.refreshToken != token.refreshToken)
        #expect(try await vault.token(for: key) == fresh)
        #expect(try await server.user(for: fresh) == user)
        let stats = try await server.stats(user: user)
        #expect(stats.refreshRequests == 1)
        #expect(stats.refreshSucceeded == 1)
    }

    @Test func refreshWithoutRotationKeepsTheOldRefreshToken() async throws {
        let server = try TestOAuthServer.require()
        let (vault, key, token, user) = try await seeded(server, "norotate")
        try await server.fault(user: user, "no_rotation")
        let fresh = try await vault.freshToken(for: key, client: TokenEndpointClient(clock: Self.anHourLater))
        #expect(fresh.accessToken != token.accessToken)
        #expect(fresh.refreshToken == token.refreshToken, "a response without refresh_token keeps the old one")
        #expect(try await vault.token(for: key)?.refreshToken == token.refreshToken)
        // And the kept refresh token still works.
        let again = try await vault.refreshToken(for: key)
        #expect(again.accessToken != fresh.accessToken)
        #expect(try await server.stats(user: user).refreshSucceeded == 2)
    }

    @Test(arguments: [false, true])
    func aConfidentialClientAuthenticates(post: Bool) async throws {
        let server = try TestOAuthServer.require()
        let (vault, key, token, user) = try await seeded(
            server, "confidential", description: try server.confidentialClient(post: post), confidential: true)
        let fresh = try await vault.refreshToken(for: key)
        #expect(fresh.accessToken != token.accessToken)
        #expect(try await server.user(for: fresh) == user)
    }

    @Test func invalidClientIsAConfigurationErrorAndLeavesTheTokenAlone() async throws {
        let server = try TestOAuthServer.require()
        let wrong = "tv-wrong-secret-5e5e5e5e"
        let (vault, key, token, user) = try await seeded(
            server, "badclient", description: try server.confidentialClient(secret: wrong), confidential: true)
        let (code, message) = await code { _ = try await vault.refreshToken(for: key) }
        #expect(code == .configurationError, "\(message)")
        #expect(message.contains("invalid_client"))
        #expect(!message.contains(wrong) && !message.contains(TestOAuthServer.confidentialSecret))
        #expect(try await vault.token(for: key) == token.storedRoundTrip())
        #expect(try await vault.refreshTokenRejection(for: key) == nil, "a client error is no verdict on the refresh token")
        #expect(try await server.stats(user: user).refreshSucceeded == 0)
    }

    @Test func invalidGrantAsksForALoginOnceAndStoresTheVerdict() async throws {
        let server = try TestOAuthServer.require()
        let (vault, key, token, user) = try await seeded(server, "invalidgrant")
        try await server.spendRefreshToken(of: token)
        let client = TokenEndpointClient(clock: Self.anHourLater)
        for _ in 0..<3 {
            let (code, message) = await code { _ = try await vault.freshToken(for: key, client: client) }
            #expect(code == .reauthenticationRequired, "\(message)")
        }
        let stored = try #require(try await vault.token(for: key))
        #expect(stored.accessToken == token.accessToken && stored.refreshToken == token.refreshToken)
        #expect(try await vault.refreshTokenRejection(for: key)?.error == "invalid_grant")
        let stats = try await server.stats(user: user)
        #expect(stats.refreshRequests == 2, "one by the other client, one by the vault; never again")
        #expect(stats.refreshRejected == 1)
        // A new login clears the verdict.
        try await vault.saveToken(try await server.login(user: user), for: key, registration: try server.publicClient())
        #expect(try await vault.refreshTokenRejection(for: key) == nil)
        _ = try await vault.refreshToken(for: key)
    }

    @Test func http500ThenSuccessIsRetried() async throws {
        let server = try TestOAuthServer.require()
        let (vault, key, token, user) = try await seeded(server, "five-hundred")
        try await server.fault(user: user, "status500")
        let client = TokenEndpointClient(initialBackoff: .milliseconds(50), clock: Self.anHourLater)
        let fresh = try await vault.freshToken(for: key, client: client)
        #expect(fresh.accessToken != token.accessToken)
        let stats = try await server.stats(user: user)
        #expect(stats.refreshRequests == 2)
        #expect(stats.faultsServed == 1)
        #expect(stats.refreshSucceeded == 1)
    }

    @Test func http429WaitsForRetryAfter() async throws {
        let server = try TestOAuthServer.require()
        let (vault, key, _, user) = try await seeded(server, "four-two-nine")
        try await server.fault(user: user, "status429", retryAfter: 2)
        // The back-off alone would retry after 10 ms: only Retry-After explains a 2 s gap.
        let client = TokenEndpointClient(initialBackoff: .milliseconds(10), clock: Self.anHourLater)
        _ = try await vault.freshToken(for: key, client: client)
        let stats = try await server.stats(user: user)
        #expect(stats.refreshRequests == 2)
        #expect(stats.refreshSucceeded == 1)
        let times = stats.refreshTimes
        try #require(times.count == 2)
        #expect(times[1] - times[0] >= 1.9, "the retry came \(times[1] - times[0]) s after the 429, not after Retry-After: 2")
    }

    @Test func aRetryAfterLongerThanAllowedIsAClearError() async throws {
        let server = try TestOAuthServer.require()
        let (vault, key, _, user) = try await seeded(server, "retry-long")
        try await server.fault(user: user, "status503", retryAfter: 3600)
        let (code, message) = await code { _ = try await vault.refreshToken(for: key) }
        #expect(code == .networkFailure)
        #expect(message.contains("3600"), "\(message)")
        #expect(try await server.stats(user: user).refreshRequests == 1)
    }

    @Test func aServerThatNeverAnswersFailsWithinTheBound() async throws {
        let server = try TestOAuthServer.require()
        let (vault, key, token, user) = try await seeded(server, "hang")
        try await server.fault(user: user, "hang", count: 2, hangSeconds: 60)
        let client = TokenEndpointClient(requestTimeout: .seconds(1), maximumAttempts: 2, initialBackoff: .milliseconds(10))
        let started = ContinuousClock.now
        let (code, message) = await code { _ = try await vault.refreshToken(for: key, client: client) }
        let elapsed = ContinuousClock.now - started
        #expect(code == .networkFailure, "\(message)")
        #expect(message.contains("2 time(s)") && message.contains("time-out"), "\(message)")
        // The server holds each request for 60 s: anything well under that is the client's own
        // bound (two 1 s attempts), with room for a heavily loaded machine.
        #expect(elapsed < .seconds(30), "two 1 s attempts took \(elapsed)")
        #expect(try await vault.token(for: key) == token.storedRoundTrip())
        #expect(try await server.stats(user: user).faultsServed == 2)
    }

    @Test func anHTMLErrorPageIsAnHTTPErrorNotAParseFailure() async throws {
        let server = try TestOAuthServer.require()
        let (vault, key, token, user) = try await seeded(server, "html")
        try await server.fault(user: user, "html")
        let (code, message) = await code { _ = try await vault.refreshToken(for: key) }
        #expect(code == .httpError, "\(message)")
        #expect(message.contains("HTTP 403") && message.contains("text/html"), "\(message)")
        #expect(!message.contains("<"), "the page itself is not quoted")
        #expect(try await vault.token(for: key) == token.storedRoundTrip())
        #expect(try await server.stats(user: user).refreshRequests == 1, "a 403 is not retried")
    }

    @Test func aRefusedAccessTokenIsRefreshedOnceForEveryCallerThatReportsIt() async throws {
        let server = try TestOAuthServer.require()
        let (vault, key, token, user) = try await seeded(server, "compare")
        let results = try await withThrowingTaskGroup(of: OAuthToken.self) { group in
            for _ in 0..<8 {
                group.addTask { try await vault.refreshAfterRejection(of: token.accessToken, for: key) }
            }
            return try await group.reduce(into: [OAuthToken]()) { $0.append($1) }
        }
        let stored = try #require(try await vault.token(for: key))
        #expect(stored.accessToken != token.accessToken)
        #expect(Set(results.map(\.accessToken)) == [stored.accessToken])
        // A late report of the same 401 gets the stored token without a request.
        #expect(try await vault.refreshAfterRejection(of: token.accessToken, for: key) == stored)
        #expect(try await server.stats(user: user).refreshRequests == 1)
    }

    @Test func anUnreachableEndpointIsANetworkFailureWithTheReason() async throws {
        let description = try ClientRegistration(tokenEndpoint: try #require(URL(string: "http://127.0.0.1:1/token")), clientID: "c")
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "grant", account: "unreachable")
        try await vault.saveToken(OAuthToken(accessToken: "at", refreshToken: "rt"), for: key, registration: description)
        let (code, message) = await code {
            _ = try await vault.refreshToken(for: key, client: TokenEndpointClient(initialBackoff: .milliseconds(10)))
        }
        #expect(code == .networkFailure)
        #expect(message.contains("refused"), "\(message)")
    }
}

/// Keeps every log line, message and metadata, as text.
final class RefreshLogCapture: LogHandler, @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [String] = []
    var lines: [String] { lock.withLock { stored } }
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        lock.withLock { stored.append("\(event.level) \(event.message) \(merged)") }
    }
}

extension RefreshGrantTests {
    @Test func logsAndErrorsShowNoSecret() async throws {
        let server = try TestOAuthServer.require()
        let capture = RefreshLogCapture()
        let vault = Vault(store: MemoryStore(), logger: Logger(label: "test") { _ in capture })
        let user = uniqueName("logs")
        let key = try CredentialKey(service: "grant", account: user)
        let wrong = "tv-wrong-secret-logs-4242"
        var secrets = [TestOAuthServer.confidentialSecret, wrong]
        var messages: [String] = []

        let first = try await server.login(user: user, confidential: true)
        try await vault.saveToken(first, for: key, registration: try server.confidentialClient())
        let refreshed = try await vault.refreshToken(for: key)
        secrets += [first.accessToken, try #require(first.refreshToken), refreshed.accessToken, try #require(refreshed.refreshToken)]

        // invalid_client with a wrong secret, then invalid_grant with a spent refresh token.
        try await vault.saveToken(refreshed, for: key, registration: try server.confidentialClient(secret: wrong))
        let (refused, message) = await code { _ = try await vault.refreshToken(for: key) }
        #expect(refused == .configurationError)
        messages.append(message)
        try await vault.saveToken(refreshed, for: key, registration: try server.confidentialClient())
        _ = try await server.refreshBehindTheVault(refreshed, confidential: true)
        let (rejected, rejectedMessage) = await code { _ = try await vault.refreshToken(for: key) }
        #expect(rejected == .reauthenticationRequired)
        messages.append(rejectedMessage)

        #expect(!capture.lines.isEmpty, "the vault logged its refreshes")
        for text in capture.lines + messages + [String(describing: try await vault.registration(for: key))] {
            for secret in secrets {
                #expect(!text.contains(secret), "a secret shows in: \(text)")
            }
        }
    }
}

extension OAuthToken {
    /// The token as it reads back from a vault (times are whole seconds there).
    func storedRoundTrip() throws -> OAuthToken {
        try OAuthToken(storedForm: storedForm())
    }
}
#endif
