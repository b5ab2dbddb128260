import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
@testable import TokenVaultMigration

/// Messages read as English: "an access token", not "a access token".
@Suite struct MigrationMessageTests {
    @Test func twoAccessTokensAreNamedWithTheRightArticle() async throws {
        let directory = try TemporaryDirectory()
        let url = URL(fileURLWithPath: directory.file("com.example.two.plist"))
        let contents: [String: Any] = ["accessToken": FakeTokens().access, "access_token": FakeTokens().access]
        try PropertyListSerialization.data(fromPropertyList: contents, format: .xml, options: 0).write(to: url)
        let error = await #expect(throws: VaultError.self) {
            try await Vault(store: MemoryStore()).migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))
        }
        #expect(error?.message.contains("keys that each look like an access token ('accessToken', 'access_token')") == true, "\(String(describing: error))")
        #expect(error?.message.contains("a access") == false)
    }
}
