import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
@testable import TokenVaultMigration

import Glibc

/// The migration engine against plists that Foundation's own `UserDefaults` wrote, into a
/// memory vault. The same engine runs behind `vault migrate`, which Tests/vaultTests drives.
@Suite struct DefaultsMigrationTests {
    let domain = "com.example.tutorial"

    /// Where Foundation put the plist: checked, not assumed.
    func foundationPlist(_ sandbox: Sandbox) throws -> URL {
        let url = sandbox.config.appendingPathComponent("\(domain).plist")
        #expect(FileManager.default.fileExists(atPath: url.path), "Foundation did not write \(url.path)")
        #expect(try DefaultsLocation.plistURL(forDomain: domain, environment: sandbox.environment) == url)
        return url
    }

    @Test func foundationWritesWhereDefaultsLocationSays() throws {
        let sandbox = try Sandbox()
        try Products.writeTutorialDefaults("strings", domain: domain, tokens: FakeTokens(), in: sandbox)
        let url = try foundationPlist(sandbox)
        #expect(try readPlist(url).format == .xml)
        // Without XDG_CONFIG_HOME, Foundation and DefaultsLocation both use ~/.config.
        var environment = sandbox.environment
        environment["XDG_CONFIG_HOME"] = nil
        let result = try Products.run(
            "tutorial-defaults", ["write", "strings", "other.domain"], environment: environment, stdin: FakeTokens().stdin)
        #expect(result.status == 0)
        let expected = try DefaultsLocation.plistURL(forDomain: "other.domain", environment: environment)
        #expect(expected.path == sandbox.home.appendingPathComponent(".config/other.domain.plist").path)
        #expect(FileManager.default.fileExists(atPath: expected.path))
    }

    @Test func stringKeysAreMigratedAndScrubbed() async throws {
        let sandbox = try Sandbox()
        let tokens = FakeTokens()
        try Products.writeTutorialDefaults("strings", domain: domain, tokens: tokens, in: sandbox)
        let url = try foundationPlist(sandbox)
        #expect(try Data(contentsOf: url).contains(tokens.access))

        let vault = Vault(store: MemoryStore())
        let report = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))

        let key = try CredentialKey(service: domain)
        let token = try #require(try await vault.token(for: key))
        #expect(token.accessToken == tokens.access)
        #expect(token.refreshToken == tokens.refresh)
        let bytes = try Data(contentsOf: url)
        #expect(!bytes.contains(tokens.access))
        #expect(!bytes.contains(tokens.refresh))
        #expect(report.sourceRewritten)
        #expect(report.entries == [key])
        #expect(report.items.map(\.key) == ["accessToken", "refreshToken"])
        #expect(report.items.allSatisfy { $0.fate == .migrated })
        #expect(try readPlist(url).dictionary.count == 0)
        #expect(try readPlist(url).format == .xml)
    }

    @Test func jsonDataModelIsOneToken() async throws {
        let sandbox = try Sandbox()
        let tokens = FakeTokens()
        try Products.writeTutorialDefaults("model", domain: domain, tokens: tokens, in: sandbox)
        let url = try foundationPlist(sandbox)
        let vault = Vault(store: MemoryStore())
        let report = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(account: "octocat", removeSource: true))

        let token = try #require(try await vault.token(for: CredentialKey(service: domain, account: "octocat")))
        #expect(token.accessToken == tokens.access)
        #expect(token.refreshToken == tokens.refresh)
        #expect(report.items.count == 1)
        #expect(report.items.first?.key == "token")
        #expect(report.items.first?.role == .tokenModel)
        let bytes = try Data(contentsOf: url)
        // The JSON model is base64 inside the XML; the key itself must be gone.
        #expect(try readPlist(url).dictionary["token"] == nil)
        #expect(!bytes.contains("token"))
    }

    @Test func unrelatedKeysStayExactlyAsTheyWere() async throws {
        let sandbox = try Sandbox()
        let tokens = FakeTokens()
        try Products.writeTutorialDefaults("mixed", domain: domain, tokens: tokens, in: sandbox)
        let url = try foundationPlist(sandbox)
        let before = try readPlist(url).dictionary
        let modeBefore = try permissions(url)

        let vault = Vault(store: MemoryStore())
        let report = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))

        let after = try readPlist(url).dictionary
        let expected = before.mutableCopy() as! NSMutableDictionary
        expected.removeObjects(forKeys: ["accessToken", "refreshToken"])
        #expect(after.isEqual(expected))
        #expect(after["loadingOAuthToken"] as? Bool == false)
        #expect(try permissions(url) == modeBefore)
        let bytes = try Data(contentsOf: url)
        #expect(!bytes.contains(tokens.access))
        #expect(!bytes.contains(tokens.refresh))
        let loading = try #require(report.items.first { $0.key == "loadingOAuthToken" })
        #expect(loading.fate == .leftAlone)
        #expect(loading.role == .notAToken)
        #expect(report.untouchedKeys.contains("username"))
        #expect(!report.untouchedKeys.contains("accessToken"))
    }

    @Test func binaryPlistInTheMacOSLayoutStaysBinary() async throws {
        let sandbox = try Sandbox()
        let tokens = FakeTokens()
        let preferences = sandbox.home.appendingPathComponent("Library/Preferences")
        try FileManager.default.createDirectory(at: preferences, withIntermediateDirectories: true)
        let url = preferences.appendingPathComponent("\(domain).plist")
        let model = try JSONSerialization.data(withJSONObject: ["access": tokens.access, "refresh": tokens.refresh])
        let contents: [String: Any] = [
            "token": model, "loadingOAuthToken": true, "username": "octocat", "launchCount": 7,
            "lastSync": Date(timeIntervalSince1970: 1_700_000_000),
        ]
        try PropertyListSerialization.data(fromPropertyList: contents, format: .binary, options: 0).write(to: url)
        #expect(chmod(url.path, 0o640) == 0)
        let before = try readPlist(url).dictionary

        let vault = Vault(store: MemoryStore())
        _ = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))

        let bytes = try Data(contentsOf: url)
        #expect(bytes.prefix(8) == Data("bplist00".utf8))
        #expect(!bytes.contains(tokens.access))
        let (after, format) = try readPlist(url)
        #expect(format == .binary)
        let expected = before.mutableCopy() as! NSMutableDictionary
        expected.removeObject(forKey: "token")
        #expect(after.isEqual(expected))
        #expect(after.count == contents.count - 1)
        #expect(try permissions(url) == 0o640)
        #expect(try await vault.token(for: CredentialKey(service: domain))?.accessToken == tokens.access)
    }

    @Test func secondRunChangesNothing() async throws {
        let sandbox = try Sandbox()
        try Products.writeTutorialDefaults("mixed", domain: domain, tokens: FakeTokens(), in: sandbox)
        let url = try foundationPlist(sandbox)
        let vault = Vault(store: MemoryStore())
        _ = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))
        let bytes = try Data(contentsOf: url)
        let stored = try await vault.secret(for: CredentialKey(service: domain))

        let again = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))
        #expect(again.isEmpty)
        #expect(!again.sourceRewritten)
        #expect(try Data(contentsOf: url) == bytes)
        #expect(try await vault.secret(for: CredentialKey(service: domain)) == stored)
    }

    @Test func dryRunChangesNothing() async throws {
        let sandbox = try Sandbox()
        try Products.writeTutorialDefaults("strings", domain: domain, tokens: FakeTokens(), in: sandbox)
        let url = try foundationPlist(sandbox)
        let bytes = try Data(contentsOf: url)
        let vault = Vault(store: MemoryStore())
        let report = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true, dryRun: true))
        #expect(report.dryRun)
        #expect(report.items.allSatisfy { $0.fate == .wouldMigrate })
        #expect(report.entries == [try CredentialKey(service: domain)])
        #expect(try Data(contentsOf: url) == bytes)
        #expect(try await vault.keys().isEmpty)
    }

    @Test func keepSourceCopiesThenALaterRunScrubs() async throws {
        let sandbox = try Sandbox()
        let tokens = FakeTokens()
        try Products.writeTutorialDefaults("strings", domain: domain, tokens: tokens, in: sandbox)
        let url = try foundationPlist(sandbox)
        let bytes = try Data(contentsOf: url)
        let vault = Vault(store: MemoryStore())
        let report = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: false))
        #expect(report.items.allSatisfy { $0.fate == .copied })
        #expect(try Data(contentsOf: url) == bytes)
        #expect(try await vault.token(for: CredentialKey(service: domain))?.accessToken == tokens.access)

        // The vault holds the same token, so a later run does not need --overwrite to scrub.
        let later = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))
        #expect(later.items.allSatisfy { $0.fate == .alreadyInVault })
        #expect(!(try Data(contentsOf: url)).contains(tokens.access))
    }

    @Test func aDifferentEntryIsNotOverwrittenUnlessAsked() async throws {
        let sandbox = try Sandbox()
        let tokens = FakeTokens()
        try Products.writeTutorialDefaults("strings", domain: domain, tokens: tokens, in: sandbox)
        let url = try foundationPlist(sandbox)
        let bytes = try Data(contentsOf: url)
        let key = try CredentialKey(service: domain)
        let vault = Vault(store: MemoryStore())
        try await vault.saveToken(OAuthToken(accessToken: "an-older-token-already-there"), for: key)
        let existing = try await vault.secret(for: key)

        let error = await #expect(throws: VaultError.self) {
            try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))
        }
        #expect(error?.code == .alreadyExists)
        #expect(try Data(contentsOf: url) == bytes)
        #expect(try await vault.secret(for: key) == existing)

        _ = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(overwrite: true, removeSource: true))
        #expect(try await vault.token(for: key)?.accessToken == tokens.access)
    }

    @Test(arguments: [
        ("corrupt", Data("<?xml version=\"1.0\"?><plist><dict><key>accessToken</key><string>abc".utf8)),
        ("not a dictionary", try! PropertyListSerialization.data(fromPropertyList: ["a", "b"], format: .xml, options: 0)),
        ("empty", Data()),
        ("binary garbage", Data("bplist00".utf8) + Data(repeating: 0xFF, count: 40)),
    ])
    func badPlistsGetAClearErrorAndChangeNothing(_ name: String, _ contents: Data) async throws {
        let sandbox = try Sandbox()
        let url = sandbox.config.appendingPathComponent("\(domain).plist")
        try contents.write(to: url)
        let vault = Vault(store: MemoryStore())
        let error = await #expect(throws: VaultError.self, "\(name)") {
            try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))
        }
        #expect(error?.code == .invalidInput)
        #expect(error?.message.contains(url.lastPathComponent) == true)
        #expect(try Data(contentsOf: url) == contents)
        #expect(try await vault.keys().isEmpty)
    }

    @Test func aMissingPlistIsNotFound() async throws {
        let sandbox = try Sandbox()
        let vault = Vault(store: MemoryStore())
        let error = await #expect(throws: VaultError.self) {
            try await vault.migrateDefaults(
                plistAt: sandbox.config.appendingPathComponent("nope.plist"), options: MigrationOptions(removeSource: true))
        }
        #expect(error?.code == .notFound)
    }

    /// The plist's directory cannot be written: the vault write is rolled back and the plist stays.
    /// Runs in a child process so that, when the tests run as root, the child can be denied.
    @Test func anUnwritableDirectoryRollsTheVaultBack() throws {
        let sandbox = try Sandbox()
        let tokens = FakeTokens()
        try Products.writeTutorialDefaults("mixed", domain: domain, tokens: tokens, in: sandbox)
        let url = try foundationPlist(sandbox)
        let bytes = try Data(contentsOf: url)
        #expect(chmod(sandbox.config.path, 0o500) == 0)
        defer { _ = chmod(sandbox.config.path, 0o700) }

        let result = try Products.run(
            "tutorial-defaults", ["migrate-plist", url.path], environment: sandbox.environment, withoutFileOverride: true)
        #expect(result.status == 1)
        let summary = try #require(try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any])
        #expect(summary["error"] as? String == "permission-denied")
        #expect(summary["vault_keys"] as? [String] == [])
        #expect((summary["message"] as? String)?.contains(sandbox.config.path) == true)
        #expect(try Data(contentsOf: url) == bytes)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: sandbox.config.path)
        #expect(leftovers == ["\(domain).plist"])
    }

    /// A store whose read-back differs: the migration must roll back and leave the plist alone.
    @Test func aFailedReadBackRollsBackAndKeepsThePlist() async throws {
        let sandbox = try Sandbox()
        try Products.writeTutorialDefaults("strings", domain: domain, tokens: FakeTokens(), in: sandbox)
        let url = try foundationPlist(sandbox)
        let bytes = try Data(contentsOf: url)
        let store = GarblingStore()
        let error = await #expect(throws: VaultError.self) {
            try await Vault(store: store).migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))
        }
        #expect(error?.code == .integrityFailure)
        #expect(try Data(contentsOf: url) == bytes)
        #expect(await store.keys(service: nil).isEmpty)
    }

    @Test func anAppWithTheSuiteLoadedDoesNotWriteTheTokensBack() throws {
        let sandbox = try Sandbox()
        let tokens = FakeTokens()
        let result = try Products.run(
            "tutorial-defaults", ["migrate", "mixed", domain], environment: sandbox.environment, stdin: tokens.stdin)
        #expect(result.status == 0, "\(result.stderr)")
        let summary = try #require(try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any])
        #expect(summary["vault_matches"] as? Bool == true)
        #expect(summary["source_rewritten"] as? Bool == true)
        #expect(summary["cache_still_has_tokens"] as? Bool == false)
        let url = try foundationPlist(sandbox)
        let bytes = try Data(contentsOf: url)
        #expect(!bytes.contains(tokens.access))
        #expect(!bytes.contains(tokens.refresh))
        #expect(try readPlist(url).dictionary["didMigrate"] as? Bool == true)
    }

    @Test func explicitKeysTakeExactlyThoseKeys() async throws {
        let sandbox = try Sandbox()
        let url = sandbox.config.appendingPathComponent("custom.plist")
        let contents: [String: Any] = [
            "ghp": "ghp_fakeFakeFakeFakeFake", "accessToken": "other-token-stays", "note": "hello",
        ]
        try PropertyListSerialization.data(fromPropertyList: contents, format: .xml, options: 0).write(to: url)
        let vault = Vault(store: MemoryStore())
        let report = try await vault.migrateDefaults(
            plistAt: url, options: MigrationOptions(service: "github", keys: ["ghp", "absent"], removeSource: true))
        #expect(try await vault.token(for: CredentialKey(service: "github"))?.accessToken == "ghp_fakeFakeFakeFakeFake")
        let after = try readPlist(url).dictionary
        #expect(after["ghp"] == nil)
        #expect(after["accessToken"] as? String == "other-token-stays")
        #expect(report.items.first { $0.key == "absent" }?.fate == .notPresent)
    }

    @Test func twoSeparateTokensAreRefusedUntilNamed() async throws {
        let sandbox = try Sandbox()
        let url = sandbox.config.appendingPathComponent("two.plist")
        let model = try JSONSerialization.data(withJSONObject: ["access_token": "model-access-token-value"])
        let contents: [String: Any] = ["accessToken": "string-access-token-value", "token": model]
        try PropertyListSerialization.data(fromPropertyList: contents, format: .xml, options: 0).write(to: url)
        let bytes = try Data(contentsOf: url)
        let vault = Vault(store: MemoryStore())
        let error = await #expect(throws: VaultError.self) {
            try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))
        }
        #expect(error?.code == .invalidInput)
        #expect(error.map { !$0.message.contains("access-token-value") } == true)
        #expect(try Data(contentsOf: url) == bytes)
        _ = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(keys: ["token"], removeSource: true))
        #expect(try await vault.token(for: CredentialKey(service: "two"))?.accessToken == "model-access-token-value")
    }

    @Test func reportAndErrorsNeverShowAToken() async throws {
        let sandbox = try Sandbox()
        let tokens = FakeTokens()
        try Products.writeTutorialDefaults("mixed", domain: domain, tokens: tokens, in: sandbox)
        let url = try foundationPlist(sandbox)
        let report = try await Vault(store: MemoryStore()).migrateDefaults(
            plistAt: url, options: MigrationOptions(removeSource: false, dryRun: true))
        let encoded = String(decoding: try JSONEncoder().encode(report), as: UTF8.self)
        #expect(!encoded.contains(tokens.access))
        #expect(!encoded.contains(tokens.refresh))
        #expect(!"\(report)".contains(tokens.access))
    }
}

/// A store that hands back different bytes than it was given, as a corrupting disk would.
actor GarblingStore: CredentialStore {
    private var entries: [CredentialKey: Data] = [:]
    nonisolated var backend: BackendKind { .custom("garbling") }
    func load(_ key: CredentialKey) -> Data? { entries[key].map { $0 + Data([0x20]) } }
    func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) { entries[key] = secret }
    func delete(_ key: CredentialKey) -> Bool { entries.removeValue(forKey: key) != nil }
    func keys(service: String?) -> [CredentialKey] { entries.keys.sorted() }
}
