import Foundation
import Testing
import TokenVault

@Suite struct OAuthTokenTests {
    static let now = Date(timeIntervalSince1970: 1_763_800_000)

    static func sample() -> OAuthToken {
        OAuthToken(
            accessToken: "gho_16C7e42F292c6912E7710c838347Ae178B4a",
            tokenType: "Bearer",
            refreshToken: "ghr_refreshrefreshrefresh0123456789",
            idToken: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln",
            scope: "repo user",
            issuedAt: now,
            expiresAt: now.addingTimeInterval(3600),
            refreshTokenExpiresAt: now.addingTimeInterval(86_400),
            additionalFields: ["mac_key": .string("another-secret-value-123")]
        )
    }

    @Test func expiryHonoursLeeway() {
        let token = Self.sample()
        #expect(!token.isExpired(at: Self.now))
        #expect(!token.isExpired(at: Self.now.addingTimeInterval(3600 - 61)))
        #expect(token.isExpired(at: Self.now.addingTimeInterval(3600 - 60)), "the default leeway is 60 s")
        #expect(!token.isExpired(at: Self.now.addingTimeInterval(3600 - 60), leeway: 0))
        #expect(token.isExpired(at: Self.now.addingTimeInterval(3600), leeway: 0))
        #expect(token.isExpired(at: Self.now, leeway: 7200))
    }

    @Test func unknownExpiryNeverExpires() {
        var token = Self.sample()
        token.expiresAt = nil
        #expect(!token.isExpired(at: .distantFuture))
    }

    @Test func canRefresh() {
        var token = Self.sample()
        #expect(token.canRefresh(at: Self.now))
        #expect(!token.canRefresh(at: Self.now.addingTimeInterval(86_400)))
        token.refreshTokenExpiresAt = nil
        #expect(token.canRefresh(at: .distantFuture))
        token.refreshToken = nil
        #expect(!token.canRefresh(at: Self.now))
        token.refreshToken = ""
        #expect(!token.canRefresh(at: Self.now))
    }

    @Test func refreshResponseWithoutRefreshTokenKeepsTheOldOne() throws {
        let old = Self.sample()
        let response = try OAuthToken(
            tokenResponse: #"{"access_token":"new-access-token-000000000","token_type":"Bearer","expires_in":60}"#,
            receivedAt: Self.now)
        let merged = old.updated(byRefresh: response)
        #expect(merged.accessToken == "new-access-token-000000000")
        #expect(merged.refreshToken == old.refreshToken)
        #expect(merged.refreshTokenExpiresAt == old.refreshTokenExpiresAt)
        #expect(merged.idToken == old.idToken)
        #expect(merged.scope == old.scope)
        #expect(merged.expiresAt == Self.now.addingTimeInterval(60))

        let rotated = try OAuthToken(
            tokenResponse: #"{"access_token":"x-new","refresh_token":"rotated-refresh","expires_in":60}"#,
            receivedAt: Self.now)
        #expect(old.updated(byRefresh: rotated).refreshToken == "rotated-refresh")
    }

    // MARK: Stored form

    @Test func storedFormRoundTrips() throws {
        let token = Self.sample()
        let data = try token.storedForm()
        #expect(try OAuthToken(storedForm: data) == token)
        let text = String(decoding: data, as: UTF8.self)
        #expect(!text.contains("\n"), "the stored form is compact")
        #expect(text.contains(#""v":1"#))
    }

    /// A date that is not a time (NaN, as a binary plist can hold) trapped in storedForm();
    /// it is stored as 0, so an expiry that is not a time reads back as long past.
    @Test func storedFormOfDatesThatAreNotTimes() throws {
        var token = Self.sample()
        token.expiresAt = Date(timeIntervalSince1970: .nan)
        token.refreshTokenExpiresAt = Date(timeIntervalSince1970: .infinity)
        let back = try OAuthToken(storedForm: token.storedForm())
        #expect(back.expiresAt == Date(timeIntervalSince1970: 0))
        #expect(back.isExpired(at: Self.now))
        #expect(try #require(back.refreshTokenExpiresAt) > Self.now.addingTimeInterval(1e15))
    }

    @Test func decodesTheFixtureWrittenByRelease010() throws {
        // Written on 2026-11-22 by version 0.1.0. This file must keep decoding in every release.
        let url = try #require(Bundle.module.url(forResource: "Fixtures/stored-token-v1", withExtension: "json"))
        let data = try Data(contentsOf: url)
        let token = try OAuthToken(storedForm: data)
        #expect(token.accessToken == "tv-fixture-access-token-0123456789abcdef")
        #expect(token.refreshToken == "tv-fixture-refresh-token-fedcba9876543210")
        #expect(token.idToken == "tv-fixture-id-token-abcdefghijklmnop")
        #expect(token.tokenType == "Bearer")
        #expect(token.scopes == ["repo", "user"])
        #expect(token.issuedAt == Date(timeIntervalSince1970: 1_763_800_000))
        #expect(token.expiresAt == Date(timeIntervalSince1970: 1_763_803_600))
        #expect(token.refreshTokenExpiresAt == Date(timeIntervalSince1970: 1_779_352_000))
        #expect(token.additionalFields == ["session_state": .string("b1b2b3"), "not-before-policy": .number(0)])
        // And this release writes the same bytes back.
        #expect(try token.storedForm() == data)
    }

    @Test func refusesAFutureStoredVersion() throws {
        let data = Data(#"{"v":2,"access_token":"a","token_type":"Bearer","issued_at":0}"#.utf8)
        let error = try #require(throws: VaultError.self) { try OAuthToken(storedForm: data) }
        #expect(error.code == .unsupportedVersion)
    }

    @Test func refusesBytesThatAreNotAStoredToken() throws {
        for bytes in [Data("plain secret".utf8), Data(#"{"access_token":"a"}"#.utf8), Data([0xff])] {
            let error = try #require(throws: VaultError.self) { try OAuthToken(storedForm: bytes) }
            #expect(error.code == .integrityFailure)
        }
    }

    // MARK: Redaction

    @Test func noSecretInAnyRendering() {
        let token = Self.sample()
        var dumped = ""
        dump(token, to: &dumped)
        let renderings = [
            token.description, token.debugDescription, "\(token)", String(reflecting: token), dumped,
            "\([token])", "\(Optional(token) as Any)",
        ]
        let secrets = [token.accessToken, token.refreshToken!, token.idToken!, "another-secret-value-123"]
        for rendering in renderings {
            for secret in secrets {
                #expect(!rendering.contains(secret), "a rendering shows a secret")
                // Not even the part after the four-character prefix.
                #expect(!rendering.contains(String(secret.dropFirst(4).prefix(8))))
            }
        }
        #expect(token.description.contains(#""gho_…" (40 chars)"#))
        #expect(token.description.contains("mac_key"), "field names are shown, values are not")
    }

    @Test func shortTokensShowNoCharacters() {
        let token = OAuthToken(accessToken: "abcd1234", refreshToken: "xyz")
        #expect(!token.description.contains("abcd"))
        #expect(!token.description.contains("xyz"))
        #expect(token.description.contains("(8 chars)"))
    }
}
