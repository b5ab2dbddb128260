import Foundation
import Testing
import TokenVault

/// A secret another program stored as one line of text (`echo -n "$TOKEN" | secret-tool store …`)
/// is a bearer token when it is one: it reads as a token, not as an opaque secret.
@Suite struct StoredBareTokenTests {
    /// An unsigned JWT whose payload is `claims`.
    static func jwt(_ claims: String) -> String {
        func segment(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        return segment(#"{"alg":"HS256","typ":"JWT"}"#) + "." + segment(claims) + ".c2lnbmF0dXJl"
    }

    /// `echo -n "$TOKEN" | secret-tool store …` stores the bare token as text: it reads as a token.
    @Test func aStoredBareTokenLineIsAToken() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "github", account: "octocat")
        for stored in ["gho_16C7e42F292c6912E7710c838347Ae178B4a", "gho_16C7e42F292c6912E7710c838347Ae178B4a\n"] {
            try await vault.saveSecret(Data(stored.utf8), for: key)
            let token = try #require(try await vault.token(for: key))
            #expect(token.accessToken == "gho_16C7e42F292c6912E7710c838347Ae178B4a")
            #expect(token.expiresAt == nil)
            #expect(token.tokenType == "Bearer")
        }
        let jwt = Self.jwt(#"{"exp":1500000000}"#)
        try await vault.saveSecret(Data(jwt.utf8), for: key)
        #expect(try await vault.token(for: key)?.expiresAt == Date(timeIntervalSince1970: 1_500_000_000))

        // Not one bearer-token line: still an opaque secret.
        for opaque in ["plain secret", "a\nb", "line\n\n", "x:y"] {
            try await vault.saveSecret(Data(opaque.utf8), for: key)
            let error = await #expect(throws: VaultError.self) { try await vault.token(for: key) }
            #expect(error?.message == "The entry github/octocat holds an opaque secret, not a token.")
        }
    }
}
