#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

/// A token response whose token would inject an HTTP header is refused, and nothing is stored
/// or printed.
@Suite struct TokenInjectionCommandTests {
    @Test func aResponseWithAHeaderInjectionIsRefusedAndNothingPrinted() throws {
        let sandbox = try CLISandbox()
        for body in [#"{"access_token":"gho_ok\r\nX-Injected: 1","token_type":"bearer"}"#, "access_token=gho_ok%0D%0AX-Injected%3A+1"] {
            let set = try sandbox.vault("set", "github", stdin: Data(body.utf8))
            #expect(set.status == 1, "\(set)")
            #expect(set.stderr.contains("access_token"), "\(set)")
            #expect(!set.stderr.contains("X-Injected"))
        }
        #expect(try sandbox.vault("get", "github").status == 2)
    }
}
#endif
