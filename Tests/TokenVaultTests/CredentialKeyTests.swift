import Testing
import TokenVault

@Suite struct CredentialKeyTests {
    @Test func refusesEmptyParts() {
        #expect(throws: VaultError.self) { try CredentialKey(service: "", account: "a") }
        #expect(throws: VaultError.self) { try CredentialKey(service: "s", account: "") }
    }
}
