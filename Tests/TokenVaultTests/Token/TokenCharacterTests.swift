import Foundation
import Testing
import TokenVault

/// A token holding a control character, a line break or only spaces would reach an HTTP header
/// (`curl -H "Authorization: Bearer $(vault get …)"`): it is refused where it comes in, and a
/// stored one is refused where it is read back, never printed.
@Suite struct TokenCharacterTests {
    static let now = Date(timeIntervalSince1970: 1_763_800_000)
    static let hostile = ["ok\r\nX-Injected: 1", "ok\u{1B}[31m", "ok\u{07}", "ok\u{0}tail", "   ", "two words", "caf\u{E9}"]

    @Test(arguments: hostile)
    func jsonResponseWithABadAccessTokenIsRefused(_ access: String) throws {
        let body = try JSONSerialization.data(withJSONObject: ["access_token": access, "token_type": "Bearer"])
        let error = try #require(throws: VaultError.self) { try OAuthToken(tokenResponse: body, receivedAt: Self.now) }
        #expect(error.code == .invalidInput)
        #expect(error.message.contains("access_token"), "\(error)")
        #expect(!error.message.contains(access))
    }

    @Test(arguments: hostile)
    func formResponseWithABadAccessTokenIsRefused(_ access: String) throws {
        let encoded = try #require(access.addingPercentEncoding(withAllowedCharacters: .alphanumerics))
        let error = try #require(throws: VaultError.self) {
            try OAuthToken(tokenResponse: "access_token=\(encoded)&token_type=bearer", receivedAt: Self.now)
        }
        #expect(error.code == .invalidInput)
    }

    @Test func refreshAndIDTokensMayHoldOnlyPrintableASCII() throws {
        for field in ["refresh_token", "id_token"] {
            for bad in ["r\nX: y", "r\u{0}", "  ", "r\u{7F}"] {
                let body = try JSONSerialization.data(withJSONObject: ["access_token": "good-token", field: bad])
                let error = try #require(throws: VaultError.self) { try OAuthToken(tokenResponse: body, receivedAt: Self.now) }
                #expect(error.code == .invalidInput)
                #expect(error.message.contains(field), "\(error)")
            }
        }
        // RFC 6749 Appendix A: a refresh token is VSCHAR, which includes a space and ':'.
        let token = try OAuthToken(
            tokenResponse: #"{"access_token":"good-token","refresh_token":"a b:c"}"#, receivedAt: Self.now)
        #expect(token.refreshToken == "a b:c")
    }

    @Test func tokenTypeAndOtherTypesAccessTokens() throws {
        let header = try #require(throws: VaultError.self) {
            try OAuthToken(tokenResponse: #"{"access_token":"good","token_type":"Bearer\r\nX: y"}"#, receivedAt: Self.now)
        }
        #expect(header.message.contains("token_type"), "\(header)")
        // Another type may hold any visible ASCII, but still no space or control character.
        let mac = try OAuthToken(tokenResponse: #"{"access_token":"id:k3y,\"q\"","token_type":"mac"}"#, receivedAt: Self.now)
        #expect(mac.accessToken == #"id:k3y,"q""#)
        #expect(throws: VaultError.self) {
            try OAuthToken(tokenResponse: #"{"access_token":"a b","token_type":"mac"}"#, receivedAt: Self.now)
        }
        // A bearer token is a b64token: ':' is not in it.
        #expect(throws: VaultError.self) {
            try OAuthToken(tokenResponse: #"{"access_token":"a:b","token_type":"bearer"}"#, receivedAt: Self.now)
        }
        #expect(try OAuthToken(tokenResponse: #"{"access_token":"aZ0-._~+/=="}"#, receivedAt: Self.now).accessToken == "aZ0-._~+/==")
    }

    /// Stored data written before this check (or by another program) is refused when read,
    /// with a message that does not quote it.
    @Test func aStoredTokenWithAControlCharacterIsRefusedOnRead() async throws {
        let stored = Data(#"{"v":1,"access_token":"ok\r\nX-Injected: 1","token_type":"Bearer","issued_at":0}"#.utf8)
        let error = try #require(throws: VaultError.self) { try OAuthToken(storedForm: stored) }
        #expect(error.code == .invalidInput)
        #expect(!error.message.contains("X-Injected"))

        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "api")
        try await vault.saveSecret(stored, for: key)
        let read = await #expect(throws: VaultError.self) { try await vault.token(for: key) }
        #expect(read?.code == .invalidInput)
    }

    /// A token built in code is checked when it is saved: nothing is stored.
    @Test func savingATokenWithALineBreakStoresNothing() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "api")
        await #expect(throws: VaultError.self) {
            try await vault.saveToken(OAuthToken(accessToken: "a\nb"), for: key)
        }
        #expect(try await vault.secret(for: key) == nil)
    }
}
