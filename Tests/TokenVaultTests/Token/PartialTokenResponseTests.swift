import Foundation
import Testing
@testable import TokenVault

/// A 200 answer with one refused field still gives its new refresh token (issue 33), and braces in
/// a stored token's strings are written so that KeePassXC has no placeholder to expand.
@Suite struct PartialTokenResponseTests {
    private let received = Date(timeIntervalSince1970: 1_800_000_000)

    private func partial(_ json: String) throws -> PartialTokenResponse? {
        let error = try #require(throws: VaultError.self) { try OAuthToken(tokenResponse: json, receivedAt: received) }
        #expect(error.code == .invalidInput)
        #expect(!error.description.contains("rt-new"), "no token value in the error")
        return PartialTokenResponse.found(in: error)
    }

    @Test func aNegativeExpiresInKeepsTheRefreshTokenAndCountsTheAccessTokenExpired() throws {
        let kept = try #require(try partial(#"{"access_token":"at-new","refresh_token":"rt-new","expires_in":-1,"scope":"a"}"#))
        #expect(kept.refused == ["expires_in"])
        let old = OAuthToken(accessToken: "at-old", refreshToken: "rt-old", idToken: "id-old", expiresAt: received.addingTimeInterval(-10))
        let merged = kept.kept(updating: old)
        #expect(merged.refreshToken == "rt-new" && merged.accessToken == "at-new" && merged.scope == "a")
        #expect(merged.expiresAt == received)
        #expect(merged.isExpired(at: received, leeway: 0))
    }

    @Test func aBadIDTokenOrRefreshExpiryIsDroppedAndNamed() throws {
        let tab = try #require(try partial("{\"access_token\":\"at-new\",\"refresh_token\":\"rt-new\",\"expires_in\":60,\"id_token\":\"a\\tb\"}"))
        #expect(tab.refused == ["id_token"])
        let merged = tab.kept(updating: OAuthToken(accessToken: "at-old", refreshToken: "rt-old"))
        #expect(merged.idToken == nil && merged.accessToken == "at-new" && merged.expiresAt == received.addingTimeInterval(60))
        let expiry = try #require(try partial(#"{"access_token":"at-new","refresh_token":"rt-new","refresh_token_expires_in":-5}"#))
        #expect(expiry.refused == ["refresh_token_expires_in"])
        #expect(expiry.kept(updating: OAuthToken(accessToken: "at-old")).refreshTokenExpiresAt == nil)
    }

    @Test func aRefusedAccessTokenKeepsTheOldOneExpired() throws {
        let kept = try #require(try partial(#"{"access_token":"at new","refresh_token":"rt-new","expires_in":60}"#))
        #expect(kept.refused == ["access_token"])
        let merged = kept.kept(updating: OAuthToken(accessToken: "at-old", refreshToken: "rt-old"))
        #expect(merged.accessToken == "at-old" && merged.refreshToken == "rt-new" && merged.expiresAt == received)
    }

    @Test func nothingToKeepWithoutAnAcceptableRefreshToken() throws {
        #expect(try partial(#"{"access_token":"at-new","expires_in":-1}"#) == nil)
        #expect(try partial("{\"access_token\":\"at-new\",\"refresh_token\":\"rt\\u0000new\",\"expires_in\":-1}") == nil)
    }

    @Test func bracesInStringsAreEscapedAndReadBack() throws {
        var token = OAuthToken(accessToken: "at", refreshToken: "rt", scope: "{USERNAME} {S:x} a\"{b}\\")
        token.additionalFields = ["{key}": .object(["n": .string("{REF:P@I:1}")])]
        let stored = try token.storedForm()
        let text = String(decoding: stored, as: UTF8.self)
        #expect(!text.dropFirst().dropLast().contains("{USERNAME}"))
        #expect(text.contains(#"\u007bUSERNAME\u007d"#))
        #expect(text.first == "{" && text.last == "}")
        let read = try OAuthToken(storedForm: stored)
        #expect(read.scope == token.scope)
        #expect(read.additionalFields == token.additionalFields)
        // Without braces in strings, the bytes are JSONEncoder's own.
        let plain = OAuthToken(accessToken: "at", scope: "repo")
        #expect(!String(decoding: try plain.storedForm(), as: UTF8.self).contains(#"\u"#))
    }
}
