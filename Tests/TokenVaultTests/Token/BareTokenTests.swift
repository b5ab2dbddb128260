import Foundation
import Testing
import TokenVault

/// A bare token (pasted on its own, or stored as one line of text by another program) is a
/// bearer token; a bare JWT expires when its `exp` claim says.
@Suite struct BareTokenTests {
    static let now = Date(timeIntervalSince1970: 1_763_800_000)

    /// An unsigned JWT whose payload is `claims`.
    static func jwt(_ claims: String) -> String {
        func segment(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        return segment(#"{"alg":"HS256","typ":"JWT"}"#) + "." + segment(claims) + ".c2lnbmF0dXJl"
    }

    @Test func aBareJWTExpiresAtItsExpClaim() throws {
        let token = try OAuthToken(bareToken: Self.jwt(#"{"sub":"1","exp":1500000000}"#), receivedAt: Self.now)
        #expect(token.expiresAt == Date(timeIntervalSince1970: 1_500_000_000))
        #expect(token.isExpired(at: Self.now))
        #expect(token.tokenType == "Bearer")
        #expect(try OAuthToken(bareToken: "ghp_plain0123", receivedAt: Self.now).expiresAt == nil)
        for bad in ["two words", "a\nb", "a:b", "=", ""] {
            #expect(throws: VaultError.self) { try OAuthToken(bareToken: bad) }
        }
    }
}
