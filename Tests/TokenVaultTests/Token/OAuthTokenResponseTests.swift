import Foundation
import Testing
import TokenVault

/// Parsing real token-endpoint response shapes (fixtures in Fixtures/responses).
@Suite struct OAuthTokenResponseTests {
    static let received = Date(timeIntervalSince1970: 1_763_800_000)

    static func fixture(_ name: String) throws -> Data {
        let url = try #require(Bundle.module.url(forResource: "Fixtures/responses/\(name)", withExtension: nil))
        return try Data(contentsOf: url)
    }

    @Test func githubFormEncoded() throws {
        let token = try OAuthToken(tokenResponse: Self.fixture("github-form.txt"), receivedAt: Self.received)
        #expect(token.accessToken == "gho_16C7e42F292c6912E7710c838347Ae178B4a")
        #expect(token.tokenType == "bearer")
        #expect(token.scope == "repo,gist")
        #expect(token.scopes == ["repo", "gist"])
        #expect(token.refreshToken == nil)
        #expect(token.expiresAt == nil)
        #expect(token.issuedAt == Self.received)
        #expect(!token.canRefresh())
        #expect(!token.isExpired(at: Self.received.addingTimeInterval(10 * 365 * 86_400)))
    }

    @Test func githubAppJSONWithRefreshExpiry() throws {
        let token = try OAuthToken(tokenResponse: Self.fixture("github-app-json.json"), receivedAt: Self.received)
        #expect(token.accessToken.hasPrefix("ghu_"))
        #expect(token.refreshToken?.hasPrefix("ghr_") == true)
        #expect(token.expiresAt == Self.received.addingTimeInterval(28_800))
        #expect(token.refreshTokenExpiresAt == Self.received.addingTimeInterval(15_811_200))
        #expect(token.scopes == [])
        #expect(token.canRefresh(at: Self.received))
        #expect(!token.canRefresh(at: Self.received.addingTimeInterval(15_811_200)))
        #expect(token.additionalFields.isEmpty)
    }

    @Test func atlassian() throws {
        let token = try OAuthToken(tokenResponse: Self.fixture("atlassian.json"), receivedAt: Self.received)
        #expect(token.tokenType == "Bearer")
        #expect(token.expiresAt == Self.received.addingTimeInterval(3600))
        #expect(token.scopes == ["read:jira-work", "offline_access"])
        #expect(token.refreshToken != nil)
    }

    @Test func googleWithIDToken() throws {
        let token = try OAuthToken(tokenResponse: Self.fixture("google.json"), receivedAt: Self.received)
        #expect(token.accessToken.hasPrefix("ya29."))
        #expect(token.idToken?.split(separator: ".").count == 3)
        #expect(token.expiresAt == Self.received.addingTimeInterval(3599))
        #expect(token.scopes == ["https://www.googleapis.com/auth/drive.metadata.readonly", "openid"])
    }

    @Test func jwtExpiryWhenNoExpiresIn() throws {
        let token = try OAuthToken(tokenResponse: Self.fixture("jwt-no-expires-in.json"), receivedAt: Self.received)
        // exp in the fixture's payload is 1763886400.
        #expect(token.expiresAt == Date(timeIntervalSince1970: 1_763_886_400))
        #expect(!token.isExpired(at: Date(timeIntervalSince1970: 1_763_886_400 - 61)))
        #expect(token.isExpired(at: Date(timeIntervalSince1970: 1_763_886_400 - 59)))
    }

    @Test func expiresInAsNumericStringKeepsOtherFields() throws {
        let token = try OAuthToken(tokenResponse: Self.fixture("azure-string-expires.json"), receivedAt: Self.received)
        #expect(token.expiresAt == Self.received.addingTimeInterval(3599))
        #expect(token.additionalFields["ext_expires_in"] == .string("3599"))
        #expect(token.additionalFields["resource"] == .string("https://management.core.windows.net/"))
        #expect(token.additionalFields["access_token"] == nil)
    }

    @Test func expiresInBeatsJWTExp() throws {
        // A JWT whose exp says one thing, and an expires_in that says another: expires_in wins.
        let jwt = try JSONDecoder().decode([String: String].self, from: Self.fixture("jwt-no-expires-in.json"))["access_token"]!
        let body = #"{"access_token":"\#(jwt)","token_type":"Bearer","expires_in":60}"#
        let token = try OAuthToken(tokenResponse: body, receivedAt: Self.received)
        #expect(token.expiresAt == Self.received.addingTimeInterval(60))
    }

    @Test func jsonErrorResponseIsATypedError() throws {
        let error = try #require(throws: VaultError.self) {
            try OAuthToken(tokenResponse: Self.fixture("invalid-grant.json"))
        }
        #expect(error.code == .tokenEndpointError)
        #expect(error.oauthError?.error == "invalid_grant")
        #expect(error.oauthError?.errorDescription == "Refresh token has been revoked")
        #expect(error.oauthError?.requiresReauthentication == true)
    }

    @Test func formErrorResponseIsATypedError() throws {
        let error = try #require(throws: VaultError.self) {
            try OAuthToken(tokenResponse: Self.fixture("github-error-form.txt"))
        }
        #expect(error.code == .tokenEndpointError)
        #expect(error.oauthError?.error == "bad_verification_code")
        #expect(error.oauthError?.errorDescription == "The code passed is incorrect or expired.")
        #expect(error.oauthError?.errorURI?.hasPrefix("https://docs.github.com/") == true)
        #expect(error.oauthError?.requiresReauthentication == false)
    }

    @Test func formDecodingHandlesPlusAndPercent() throws {
        let token = try OAuthToken(tokenResponse: "access_token=a%2Bb%2Fc%3D%3D&token_type=bearer&scope=read+write")
        #expect(token.accessToken == "a+b/c==")
        #expect(token.scopes == ["read", "write"])
        // A `+` is a space in a form, and a bearer token holds no space.
        #expect(throws: VaultError.self) { try OAuthToken(tokenResponse: "access_token=a+b&token_type=bearer") }
        let mac = try OAuthToken(tokenResponse: "access_token=a%3Db%26c&token_type=mac")
        #expect(mac.accessToken == "a=b&c")
    }

    @Test func missingTokenTypeDefaultsToBearer() throws {
        let token = try OAuthToken(tokenResponse: #"{"access_token":"abc"}"#)
        #expect(token.tokenType == "Bearer")
    }

    @Test(arguments: [
        ("", "empty"),
        ("   \n", "blank"),
        ("not a token response", "prose"),
        ("[1,2,3]", "JSON array"),
        (#"{"token_type":"bearer"}"#, "no access token"),
        (#"{"access_token":""}"#, "empty access token"),
        (#"{"access_token":42}"#, "numeric access token"),
        (#"{"access_token":"a","expires_in":"soon"}"#, "expires_in not numeric"),
        (#"{"access_token":"a","expires_in":-5}"#, "negative expires_in"),
        (#"{"access_token":"a","expires_in":true}"#, "boolean expires_in"),
        (#"{"access_token":"a","expires_in":1e300}"#, "absurd expires_in"),
        (#"{"access_token":"a","token_type":7}"#, "numeric token type"),
        (#"{"access_token":"a","refresh_token":{}}"#, "object refresh token"),
        ("access_token=%zz", "bad percent escape"),
        ("access_token=a&access_token=b", "repeated field"),
        (#"{"access_token":"a""#, "truncated JSON"),
    ])
    func malformedBodiesAreInvalidInput(body: String, label: String) {
        let error = #expect(throws: VaultError.self, "\(label)") { try OAuthToken(tokenResponse: body) }
        #expect(error?.code == .invalidInput, "\(label)")
    }

    @Test func nonUTF8BodyIsInvalidInput() {
        let error = #expect(throws: VaultError.self) { try OAuthToken(tokenResponse: Data([0xff, 0xfe, 0x00])) }
        #expect(error?.code == .invalidInput)
    }

    @Test func errorMessagesNeverQuoteTheBody() {
        let secret = "sup3r-s3cret-value-that-must-not-leak"
        for body in [
            #"{"access_token":"\#(secret)","expires_in":"x"}"#,
            #"{"access_token":"\#(secret)""#,
            "access_token=\(secret)&access_token=\(secret)",
            "access_token=\(secret)%zz",
        ] {
            do {
                _ = try OAuthToken(tokenResponse: body)
                Issue.record("expected a failure")
            } catch {
                #expect(!"\(error)".contains(secret))
                #expect(!String(reflecting: error).contains(secret))
            }
        }
    }
}
