import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
@testable import TokenVaultMigration

/// Tokens nested in arrays and dictionaries are found, migrated and scrubbed (only the token
/// strings are removed, everything around them stays); tokens inside an `NSKeyedArchiver`
/// archive, which cannot be rewritten safely, are reported and refused, never passed over as
/// "no tokens".
@Suite struct NestedTokenMigrationTests {
    func write(_ contents: [String: Any], format: PropertyListSerialization.PropertyListFormat = .xml) throws -> (TemporaryDirectory, URL) {
        let directory = try TemporaryDirectory()
        let url = URL(fileURLWithPath: directory.file("com.example.nested.plist"))
        try PropertyListSerialization.data(fromPropertyList: contents, format: format, options: 0).write(to: url)
        return (directory, url)
    }

    @Test(arguments: [PropertyListSerialization.PropertyListFormat.xml, .binary])
    func aTokenInAnArrayOfDictionariesIsMigratedAndScrubbed(_ format: PropertyListSerialization.PropertyListFormat) async throws {
        let tokens = FakeTokens()
        let contents: [String: Any] = [
            "accounts": [["name": "octocat", "accessToken": tokens.access, "refreshToken": tokens.refresh, "launches": 3]],
            "theme": "dark",
        ]
        let (directory, url) = try write(contents, format: format)
        _ = directory
        let vault = Vault(store: MemoryStore())

        let plan = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true, dryRun: true))
        #expect(plan.entries.count == 1)
        #expect(
            Set(plan.items.filter { $0.fate == .wouldMigrate }.map(\.key))
                == ["accounts[0].accessToken", "accounts[0].refreshToken"])

        let report = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))
        #expect(report.sourceRewritten)
        #expect(report.items.first { $0.key == "accounts[0].accessToken" }?.keyPath == ["accounts", "[0]", "accessToken"])
        #expect(report.untouchedKeys == ["theme"])
        let token = try #require(try await vault.token(for: CredentialKey(service: "com.example.nested")))
        #expect(token.accessToken == tokens.access)
        #expect(token.refreshToken == tokens.refresh)

        let bytes = try Data(contentsOf: url)
        #expect(!bytes.contains(tokens.access) && !bytes.contains(tokens.refresh))
        let (after, afterFormat) = try readPlist(url)
        #expect(afterFormat == format)
        let expected: NSDictionary = ["accounts": [["name": "octocat", "launches": 3]], "theme": "dark"]
        #expect(after.isEqual(expected), "\(after)")

        // A second run finds nothing and changes nothing.
        let again = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))
        #expect(again.entries.isEmpty && !again.sourceRewritten)
        #expect(try Data(contentsOf: url) == bytes)
    }

    @Test func aTokenInANestedDictionaryIsMigrated() async throws {
        let tokens = FakeTokens()
        let (directory, url) = try write(["auth": ["session": ["access_token": tokens.access, "user": "octocat"]]])
        _ = directory
        let vault = Vault(store: MemoryStore())
        let report = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))
        #expect(report.items.map(\.key) == ["auth.session.access_token"])
        #expect(try await vault.token(for: CredentialKey(service: "com.example.nested"))?.accessToken == tokens.access)
        #expect(try readPlist(url).dictionary.isEqual(["auth": ["session": ["user": "octocat"]]] as NSDictionary))
    }

    /// Two accounts are two tokens: refused until one is named, as at the top level.
    @Test func twoNestedTokensAreRefused() async throws {
        let (directory, url) = try write([
            "accounts": [["accessToken": FakeTokens().access], ["accessToken": FakeTokens().access]]
        ])
        _ = directory
        let before = try Data(contentsOf: url)
        let error = await #expect(throws: VaultError.self) {
            try await Vault(store: MemoryStore()).migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))
        }
        #expect(error?.code == .invalidInput)
        #expect(error?.message.contains("accounts[0].accessToken") == true, "\(String(describing: error))")
        #expect(try Data(contentsOf: url) == before)
    }

    /// An archive cannot be rewritten without the app's classes: its tokens are reported as left
    /// in the plist, and the migration fails instead of saying there were none.
    @Test func tokensInAKeyedArchiveAreReportedNotSkipped() async throws {
        let tokens = FakeTokens()
        let archive = try NSKeyedArchiver.archivedData(
            withRootObject: NSDictionary(dictionary: ["accessToken": tokens.access, "user": "octocat"]), requiringSecureCoding: false)
        let (directory, url) = try write(["session": archive, "theme": "dark"], format: .binary)
        _ = directory
        let before = try Data(contentsOf: url)
        let vault = Vault(store: MemoryStore())
        for dryRun in [true, false] {
            let error = await #expect(throws: VaultError.self) {
                try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true, dryRun: dryRun))
            }
            #expect(error?.code == .invalidInput)
            #expect(error?.message.contains("'session' holds an NSKeyedArchiver archive") == true, "\(String(describing: error))")
            #expect(error?.message.contains("'accessToken'") == true, "\(String(describing: error))")
            #expect(error.map { !$0.message.contains(tokens.access) } == true)
        }
        #expect(try Data(contentsOf: url) == before)
        #expect(try await vault.keys().isEmpty)
    }

    /// An app's own model class, archived with NSCoding (`encode(_:forKey:)`), keeps its names as
    /// the keys of its object's dictionary in the archive, not as strings of their own: it is
    /// refused too (it passed as "no tokens found" before). Values are never shown, not even a
    /// token whose text looks like a token's name.
    @Test func tokensInAnArchivedModelClassAreReportedAndNoValueIsShown() async throws {
        let access = "gho_archived_access_token"
        let refresh = "ARCHIVED_refresh_98765"
        let model = try NSKeyedArchiver.archivedData(
            withRootObject: ArchivedSession(accessToken: access, refreshToken: refresh), requiringSecureCoding: false)
        let dictionary = try NSKeyedArchiver.archivedData(
            withRootObject: NSDictionary(dictionary: ["auth": ["access_token": refresh], "note": "refresh_token_soon"]),
            requiringSecureCoding: false)
        for (archive, names) in [(model, ["'accessToken'", "'refreshToken'"]), (dictionary, ["'access_token'"])] {
            let (directory, url) = try write(["session": archive, "theme": "dark"], format: .binary)
            _ = directory
            let before = try Data(contentsOf: url)
            let error = await #expect(throws: VaultError.self) {
                try await Vault(store: MemoryStore()).migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true, dryRun: true))
            }
            for name in names {
                #expect(error?.message.contains(name) == true, "\(String(describing: error))")
            }
            for value in [access, refresh, "refresh_token_soon"] {
                #expect(error.map { !$0.message.contains(value) } == true, "a value was shown: \(String(describing: error))")
            }
            #expect(try Data(contentsOf: url) == before)
        }
    }

    /// A `token` inside a dictionary about push notifications or CSRF is not an OAuth token, as
    /// `deviceToken` and `csrfToken` are not at the top level.
    @Test func tokensUnderPushOrCSRFAreNotOAuthTokens() async throws {
        let (directory, url) = try write([
            "push": ["token": "apns-device-token-0123456789"], "settings": ["csrf": ["token": "csrf-value-0123"]],
        ])
        _ = directory
        let before = try Data(contentsOf: url)
        let report = try await Vault(store: MemoryStore()).migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: true))
        #expect(report.entries.isEmpty)
        #expect(try Data(contentsOf: url) == before)
    }

    /// An app migrating its own suite at start-up: the nested token is scrubbed from its cached
    /// copy too, so the next setting it writes does not bring the token back.
    @Test func anAppWithTheSuiteLoadedDoesNotWriteANestedTokenBack() throws {
        let sandbox = try Sandbox()
        let tokens = FakeTokens()
        let domain = "com.example.nested-app"
        let result = try Products.run(
            "tutorial-defaults", ["migrate", "nested", domain], environment: sandbox.environment, stdin: tokens.stdin)
        #expect(result.status == 0, "\(result.stderr)")
        let summary = try #require(try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any])
        #expect(summary["vault_matches"] as? Bool == true)
        #expect(summary["source_rewritten"] as? Bool == true)
        #expect(summary["cache_still_has_tokens"] as? Bool == false)
        let url = sandbox.config.appendingPathComponent("\(domain).plist")
        let bytes = try Data(contentsOf: url)
        #expect(!bytes.contains(tokens.access) && !bytes.contains(tokens.refresh))
        let after = try readPlist(url).dictionary
        #expect(after["didMigrate"] as? Bool == true)
        #expect((after["accounts"] as? [[String: Any]])?.first?["name"] as? String == "octocat")
    }
}

/// An app's token model as apps archive it into UserDefaults with NSCoding.
final class ArchivedSession: NSObject, NSCoding {
    let accessToken: String
    let refreshToken: String
    init(accessToken: String, refreshToken: String) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
    }
    required init?(coder: NSCoder) {
        accessToken = coder.decodeObject(forKey: "accessToken") as? String ?? ""
        refreshToken = coder.decodeObject(forKey: "refreshToken") as? String ?? ""
    }
    func encode(with coder: NSCoder) {
        coder.encode(accessToken, forKey: "accessToken")
        coder.encode(refreshToken, forKey: "refreshToken")
    }
}
