import Foundation
import Testing
import TokenVault
@testable import TokenVaultMigration

/// Which plist keys the migration takes, by name and value, without `--key`.
@Suite struct TokenDetectorNameTests {
    func report(_ contents: [String: Any]) async throws -> MigrationReport {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("detector-\(UUID().uuidString).plist")
        defer { _ = try? FileManager.default.removeItem(at: url) }
        try PropertyListSerialization.data(fromPropertyList: contents, format: .xml, options: 0).write(to: url)
        return try await Vault(store: MemoryStore()).migrateDefaults(
            plistAt: url, options: MigrationOptions(removeSource: false, dryRun: true))
    }

    func migratedKeys(_ contents: [String: Any]) async throws -> [String] {
        try await report(contents).items.filter { $0.fate == .wouldMigrate }.map(\.key).sorted()
    }

    @Test(arguments: [
        "accessToken", "access_token", "AccessToken", "oauthToken", "OAuthToken", "authToken", "bearerToken",
        "apiToken", "token", "githubToken", "jwt", "oauth", "OAuth", "o_auth", "bearer", "Bearer", "auth_token",
    ])
    func accessTokenNames(_ name: String) async throws {
        #expect(try await migratedKeys([name: "fake-token-value-123", "theme": "dark"]) == [name])
    }

    @Test func accessRefreshAndIDTokensGroup() async throws {
        let keys = try await migratedKeys([
            "access_token": "a-fake", "refresh_token": "r-fake", "id_token": "i-fake", "userName": "octocat",
        ])
        #expect(keys == ["access_token", "id_token", "refresh_token"])
    }

    @Test(arguments: [
        "loadingOAuthToken", "isLoggedIn", "hasToken", "tokenType", "tokenExpiry", "accessTokenExpirationDate",
        "deviceToken", "pushToken", "tokenEndpointURL", "username", "lastTokenRefresh",
    ])
    func namesThatAreNotSecretsAreLeftAlone(_ name: String) async throws {
        #expect(try await migratedKeys([name: "not-a-secret"]) == [])
    }

    /// What the report says about a key it left alone must be true: a string it did not take
    /// was not judged "not a token"; its name was not recognised, and `--key` takes it.
    @Test func leftAloneNotesSayWhy() async throws {
        let items = try await report([
            "oauthProvider": "github", "loadingOAuthToken": true, "accessToken": "fake-access-1",
        ]).items
        let provider = try #require(items.first { $0.key == "oauthProvider" })
        #expect(provider.fate == .leftAlone)
        #expect(provider.note == "name not recognised as a token; name it with --key to migrate it")
        let flag = try #require(items.first { $0.key == "loadingOAuthToken" })
        #expect(flag.fate == .leftAlone)
        #expect(flag.note == "the value is not a token")
    }

    @Test func nonStringValuesUnderTokenNamesAreLeftAlone() async throws {
        #expect(try await migratedKeys(["loadingOAuthToken": true, "accessTokenCount": 3, "accessToken": Date()]) == [])
    }

    @Test(arguments: [
        ["access": "fake-a", "refresh": "fake-r"], ["access_token": "fake-a", "refresh_token": "fake-r"],
        ["accessToken": "fake-a", "refreshToken": "fake-r", "expiresAt": 1_900_000_000],
    ] as [[String: any Sendable]])
    func tokenModelsInDataDictionariesAndJSONStrings(_ model: [String: any Sendable]) async throws {
        let json = try JSONSerialization.data(withJSONObject: model)
        #expect(try await migratedKeys(["blob": json]) == ["blob"])
        #expect(try await migratedKeys(["session": model]) == ["session"])
        #expect(try await migratedKeys(["credentials": String(decoding: json, as: UTF8.self)]) == ["credentials"])
        let plistData = try PropertyListSerialization.data(fromPropertyList: model, format: .binary, options: 0)
        #expect(try await migratedKeys(["stored": plistData]) == ["stored"])
        let xmlData = try PropertyListSerialization.data(fromPropertyList: model, format: .xml, options: 0)
        #expect(try await migratedKeys(["stored": xmlData]) == ["stored"])
        #expect(try await migratedKeys(["stored": Data("\n  ".utf8) + xmlData]) == ["stored"])
    }

    @Test func dataThatIsNotATokenModelIsLeftAlone() async throws {
        let json = try JSONSerialization.data(withJSONObject: ["theme": "dark"])
        #expect(try await migratedKeys(["settings": json, "avatar": Data([1, 2, 3])]) == [])
    }
}
