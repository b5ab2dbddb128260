#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

/// `vault set` of a bare JWT keeps the expiry its `exp` claim gives, as a response does.
@Suite struct BareJWTCommandTests {
    static func jwt(exp: Int) -> String {
        func segment(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        return segment(#"{"alg":"HS256"}"#) + "." + segment(#"{"sub":"1","exp":\#(exp)}"#) + ".c2ln"
    }

    @Test func aBareJWTExpiresAtItsExpClaim() throws {
        let sandbox = try CLISandbox()
        let expired = Self.jwt(exp: 1_500_000_000)
        let set = try sandbox.vault("set", "api", stdin: Data("\(expired)\n".utf8))
        #expect(set.status == 0, "\(set)")
        #expect(set.stderr.contains("expires 2017-07-14T02:40:00Z"), "\(set)")
        let get = try sandbox.vault("get", "api")
        #expect(get.status == 3, "\(get)")
        #expect(get.stdout.isEmpty)
        #expect(try sandbox.vault("get", "api", "--allow-expired").stdout == expired + "\n")
        // --expires-in would contradict the claim.
        let both = try sandbox.vault("set", "api", "--expires-in", "60", stdin: Data(expired.utf8))
        #expect(both.status == 64, "\(both)")
    }
}
#endif
