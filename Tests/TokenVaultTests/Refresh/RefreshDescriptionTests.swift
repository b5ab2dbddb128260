import Foundation
import Testing
@testable import TokenVault

/// The stored refresh description: backward compatible, secret-free in every rendering, and only
/// for endpoints that keep tokens off the wire.
@Suite struct RefreshDescriptionTests {
    static let secret = "tv-client-secret-DO-NOT-SHOW-7f3a9c"

    static func description(_ url: String = "https://auth.example.com/oauth/token") throws -> ClientRegistration {
        try ClientRegistration(
            tokenEndpoint: try #require(URL(string: url)), clientID: "cli-app",
            clientAuthentication: .clientSecretBasic(secret), scope: "read write",
            additionalParameters: ["resource": "https://api.example.com/"])
    }

    @Test func anEntryWrittenByRelease010ReadsWithoutADescription() async throws {
        let url = try #require(Bundle.module.url(forResource: "Fixtures/stored-token-v1", withExtension: "json"))
        let data = try Data(contentsOf: url)
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "fixture", account: "a")
        try await vault.store.save(data, for: key, contentType: .json)
        #expect(try await vault.registration(for: key) == nil)
        #expect(try await vault.token(for: key)?.accessToken == "tv-fixture-access-token-0123456789abcdef")
        // It expired in 2025: without a description there is nothing to refresh with.
        await #expect(throws: VaultError.self) { _ = try await vault.freshToken(for: key) }
        do {
            _ = try await vault.freshToken(for: key)
        } catch let error as VaultError {
            #expect(error.code == .expired)
        }
        #expect(try await vault.store.load(key) == data, "reading changed nothing")
    }

    @Test func theDescriptionIsStoredWithTheTokenAndOldReadersStillReadTheToken() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "svc", account: "a")
        let token = OAuthToken(accessToken: "at-1", refreshToken: "rt-1", issuedAt: Date(timeIntervalSince1970: 1_800_000_000))
        let description = try Self.description()
        try await vault.saveToken(token, for: key, registration: description)

        #expect(try await vault.registration(for: key) == description)
        #expect(try await vault.token(for: key) == token)
        let stored = try #require(try await vault.store.load(key))
        // A release that knows nothing of descriptions reads the same token from these bytes.
        #expect(try OAuthToken(storedForm: stored) == token)
        let text = try #require(String(data: stored, encoding: .utf8))
        #expect(text.contains("\"refresh\":{"))
        #expect(text.contains("\"auth\":\"client_secret_basic\""))

        // Saving without naming a registration keeps it; naming none drops it, and the entry is
        // then byte for byte what a release without registrations writes.
        try await vault.saveToken(token, for: key)
        #expect(try await vault.registration(for: key) == description)
        try await vault.saveToken(token, for: key, registration: nil)
        #expect(try await vault.registration(for: key) == nil)
        #expect(try await vault.store.load(key) == (try token.storedForm()))
    }

    @Test func theClientSecretNeverShows() throws {
        let description = try Self.description()
        for rendering in [
            description.description, description.debugDescription, String(reflecting: description), "\(description)",
            description.clientAuthentication.description, String(reflecting: description.clientAuthentication),
        ] {
            #expect(!rendering.contains(Self.secret), "\(rendering)")
        }
        var dumped = ""
        dump(description, to: &dumped)
        #expect(!dumped.contains(Self.secret), "dump shows the secret")
        #expect(description.description.contains("client_secret_basic"))
    }

    @Test(arguments: [
        "http://127.0.0.1:8080/token", "http://127.9.8.7/token", "http://localhost:9/token", "http://[::1]:9/token",
        "https://auth.example.com/token",
    ])
    func acceptsHTTPSAndLoopback(_ url: String) throws {
        _ = try Self.description(url)
    }

    @Test(arguments: [
        "http://auth.example.com/token", "http://128.0.0.1/token", "http://127.0.0.1.evil.example/token",
        "http://localhost.evil.example/token", "ftp://auth.example.com/token", "http://10.0.0.1/token",
    ])
    func refusesPlainHTTPOffLoopback(_ url: String) throws {
        do {
            _ = try Self.description(url)
            Issue.record("accepted \(url)")
        } catch let error as VaultError {
            #expect(error.code == .configurationError)
            #expect(!error.message.contains(Self.secret))
        }
    }

    @Test func idTokenClaimsAreDecodedAndScopesAreASet() throws {
        let payload = Data(#"{"sub":"user-42","email":"a@example.com"}"#.utf8).base64EncodedString()
            .replacingOccurrences(of: "=", with: "")
        let token = OAuthToken(accessToken: "at", idToken: "eyJhbGciOiJub25lIn0.\(payload).sig", scope: "read write admin")
        #expect(token.unverifiedIDTokenClaims?["sub"] == .string("user-42"))
        #expect(OAuthToken(accessToken: "at", idToken: "not-a-jwt").unverifiedIDTokenClaims == nil)
        #expect(token.scopeSet == ["read", "write", "admin"])
        #expect(token.hasScopes(["write", "read"]))
        #expect(!token.hasScopes(["read", "delete"]))
    }

    @Test func formEncodingFollowsTheURLStandard() {
        #expect(FormEncoding.encode("a b+c&d=e/é*~") == "a+b%2Bc%26d%3De%2F%C3%A9*%7E")
    }

    @Test func pkceChallengeMatchesRFC7636AppendixB() throws {
        #expect(try AuthorizationCodeLogin.challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
    }
}
