#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

import Glibc

/// `vault migrate` on plists written by Foundation's own `UserDefaults`, into a file vault.
@Suite struct MigrateCommandTests {
    let domain = "com.example.tutorial"

    /// What the vault holds, as `vault list --json` says.
    func entries(_ sandbox: CLISandbox) throws -> [String] {
        let result = try sandbox.vault("list", "--json")
        #expect(result.status == 0, "\(result)")
        return (result.json as? [[String: Any]] ?? []).map { "\($0["service"] ?? "")/\($0["account"] ?? "")" }
    }

    @Test(arguments: ["strings", "model", "mixed"])
    func tutorialShapesMigrateByDomain(_ shape: String) throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        let url = try sandbox.writeTutorialDefaults(shape, domain: domain, tokens: tokens)
        let before = try readPlist(url).dictionary
        let modeBefore = try FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? NSNumber

        let result = try sandbox.vault("migrate", "--domain", domain)
        #expect(result.status == 0, "\(result)")
        #expect(!result.stdout.contains(tokens.access) && !result.stderr.contains(tokens.access))
        #expect(!result.stdout.contains(tokens.refresh) && !result.stderr.contains(tokens.refresh))
        #expect(result.stderr.contains("backups"))

        let bytes = try Data(contentsOf: url)
        #expect(!bytes.contains(tokens.access))
        #expect(!bytes.contains(tokens.refresh))
        let after = try readPlist(url)
        #expect(after.format == .xml)
        let expected = before.mutableCopy() as! NSMutableDictionary
        expected.removeObjects(forKeys: ["accessToken", "refreshToken", "token"])
        #expect(after.dictionary.isEqual(expected))
        #expect(try FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? NSNumber == modeBefore)
        if shape == "mixed" {
            #expect(after.dictionary["loadingOAuthToken"] as? Bool == false)
        }

        #expect(try sandbox.vault("get", domain).stdout == "\(tokens.access)\n")
        let object = try #require(try sandbox.vault("get", domain, "--json").json as? [String: Any])
        #expect(object["refresh_token"] as? String == tokens.refresh)
    }

    @Test func binaryPlistInTheMacOSLayout() throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        let preferences = sandbox.home.appendingPathComponent("Library/Preferences")
        try FileManager.default.createDirectory(at: preferences, withIntermediateDirectories: true)
        let url = preferences.appendingPathComponent("com.example.mac.plist")
        let model = try JSONSerialization.data(withJSONObject: ["access": tokens.access, "refresh": tokens.refresh])
        let contents: [String: Any] = ["token": model, "loadingOAuthToken": true, "username": "octocat"]
        try PropertyListSerialization.data(fromPropertyList: contents, format: .binary, options: 0).write(to: url)
        let before = try readPlist(url).dictionary

        let result = try sandbox.vault("migrate", "--plist", url.path, "--account", "octocat", "--json")
        #expect(result.status == 0, "\(result)")
        let report = try #require(result.json as? [String: Any])
        #expect(report["format"] as? String == "binary")
        #expect(report["source_rewritten"] as? Bool == true)
        let items = try #require(report["items"] as? [[String: Any]])
        #expect(items.first { $0["key"] as? String == "token" }?["fate"] as? String == "migrated")
        #expect(items.first { $0["key"] as? String == "loadingOAuthToken" }?["fate"] as? String == "left-alone")
        #expect(!result.stdout.contains(tokens.access))

        let bytes = try Data(contentsOf: url)
        #expect(bytes.prefix(8) == Data("bplist00".utf8))
        #expect(!bytes.contains(tokens.access))
        let expected = before.mutableCopy() as! NSMutableDictionary
        expected.removeObject(forKey: "token")
        #expect(try readPlist(url).dictionary.isEqual(expected))
        #expect(try sandbox.vault("get", "com.example.mac", "octocat").stdout == "\(tokens.access)\n")
    }

    @Test func aSecondRunChangesNothing() throws {
        let sandbox = try CLISandbox()
        let url = try sandbox.writeTutorialDefaults("mixed", domain: domain, tokens: FakeTokens())
        #expect(try sandbox.vault("migrate", "--domain", domain).status == 0)
        let plist = try Data(contentsOf: url)
        let vault = try Data(contentsOf: sandbox.vaultFile)

        let again = try sandbox.vault("migrate", "--domain", domain)
        #expect(again.status == 0, "\(again)")
        #expect(again.stdout.contains("No tokens found"))
        #expect(try Data(contentsOf: url) == plist)
        #expect(try Data(contentsOf: sandbox.vaultFile) == vault)
    }

    @Test func aDryRunChangesNothing() throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        let url = try sandbox.writeTutorialDefaults("strings", domain: domain, tokens: tokens)
        let plist = try Data(contentsOf: url)
        let result = try sandbox.vault("migrate", "--domain", domain, "--dry-run")
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("Dry run"))
        #expect(result.stdout.contains("accessToken"))
        #expect(result.stdout.contains("would-migrate"))
        #expect(!result.stdout.contains(tokens.access))
        #expect(try Data(contentsOf: url) == plist)
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path), "a dry run created the vault")
        #expect(try entries(sandbox).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path), "list created the vault")
    }

    @Test func keepSourceLeavesThePlist() throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        let url = try sandbox.writeTutorialDefaults("strings", domain: domain, tokens: tokens)
        let plist = try Data(contentsOf: url)
        let result = try sandbox.vault("migrate", "--domain", domain, "--keep-source")
        #expect(result.status == 0, "\(result)")
        #expect(try Data(contentsOf: url) == plist)
        #expect(try sandbox.vault("get", domain).stdout == "\(tokens.access)\n")
    }

    /// After --keep-source, a second migration finds the same token already in the vault: it
    /// writes nothing, scrubs the plist, and says so rather than "Wrote …".
    @Test func aTokenTheVaultAlreadyHoldsIsNotSaidToBeWritten() throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        let url = try sandbox.writeTutorialDefaults("strings", domain: domain, tokens: tokens)
        #expect(try sandbox.vault("migrate", "--domain", domain, "--keep-source").stdout.contains("Wrote \(domain)"))
        let vault = try Data(contentsOf: sandbox.vaultFile)
        let result = try sandbox.vault("migrate", "--domain", domain)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("already-in-vault"), "\(result)")
        #expect(result.stdout.contains("The vault already held \(domain)") && !result.stdout.contains("Wrote"), "\(result)")
        #expect(try Data(contentsOf: sandbox.vaultFile) == vault, "the vault was written")
        #expect(!(try Data(contentsOf: url)).contains(Data(tokens.access.utf8)), "the plist kept the token")
    }

    @Test func anExistingEntryIsNotOverwrittenWithoutOverwrite() throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        let url = try sandbox.writeTutorialDefaults("strings", domain: domain, tokens: tokens)
        #expect(try sandbox.vault("set", domain, stdin: Data("an-older-fake-token\n".utf8)).status == 0)
        let plist = try Data(contentsOf: url)

        let refused = try sandbox.vault("migrate", "--domain", domain)
        #expect(refused.status == 1, "\(refused)")
        #expect(refused.stderr.contains("--overwrite"))
        #expect(try Data(contentsOf: url) == plist)
        #expect(try sandbox.vault("get", domain).stdout == "an-older-fake-token\n")

        let replaced = try sandbox.vault("migrate", "--domain", domain, "--overwrite")
        #expect(replaced.status == 0, "\(replaced)")
        #expect(try sandbox.vault("get", domain).stdout == "\(tokens.access)\n")
    }

    @Test func aCorruptPlistGetsAClearErrorAndNothingChanges() throws {
        let sandbox = try CLISandbox()
        let url = sandbox.config.appendingPathComponent("\(domain).plist")
        let corrupt = Data("<?xml version=\"1.0\"?><plist><dict><key>accessToken</key><string>fake".utf8)
        try corrupt.write(to: url)
        let result = try sandbox.vault("migrate", "--domain", domain)
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("not a readable property list"))
        #expect(!result.stderr.contains("Swift/") && !result.stderr.contains("Fatal"))
        #expect(try Data(contentsOf: url) == corrupt)
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path), "a failed migration created the vault")
    }

    @Test func aMissingPlistIsNotFound() throws {
        let sandbox = try CLISandbox()
        let result = try sandbox.vault("migrate", "--domain", "no.such.domain")
        #expect(result.status == 2, "\(result)")
    }

    @Test func anUnwritablePlistDirectoryChangesNothing() throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        let url = try sandbox.writeTutorialDefaults("mixed", domain: domain, tokens: tokens)
        // A vault with another entry, so that "unchanged" means something and the only thing
        // that cannot be written is the plist's directory.
        #expect(try sandbox.vault("set", "other", stdin: Data("gho_fakeOther1\n".utf8)).status == 0)
        let plist = try Data(contentsOf: url)
        #expect(chmod(sandbox.config.path, 0o500) == 0)
        defer { _ = chmod(sandbox.config.path, 0o700) }

        let result = try sandbox.run(
            "vault", ["migrate", "--domain", domain] + sandbox.fileVault, withoutFileOverride: true)
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains(sandbox.config.path))
        #expect(!result.stderr.contains(tokens.access))
        #expect(try Data(contentsOf: url) == plist)
        #expect(try entries(sandbox) == ["other/default"])
    }

    /// Once the rewritten plist has been renamed into place, the tokens are gone from it, so
    /// the vault must keep them whatever happens next. A plist directory that may be written
    /// and searched but not read (0300) lets the rename succeed and then makes opening the
    /// directory for its fsync fail: a real failure after the rename, with no test seam.
    @Test func aFailureAfterTheRenameKeepsTheTokensInTheVault() throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        let url = try sandbox.writeTutorialDefaults("mixed", domain: domain, tokens: tokens)
        #expect(chmod(sandbox.config.path, 0o300) == 0)
        defer { _ = chmod(sandbox.config.path, 0o700) }

        let result = try sandbox.run(
            "vault", ["migrate", "--domain", domain] + sandbox.fileVault, withoutFileOverride: true)
        #expect(chmod(sandbox.config.path, 0o700) == 0)
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.contains("could not be synced"), "\(result)")
        #expect(result.stderr.contains(sandbox.config.path))
        #expect(!result.stderr.contains(tokens.access))
        let bytes = try Data(contentsOf: url)
        #expect(!bytes.contains(tokens.access), "the plist was rewritten")
        #expect(try sandbox.vault("get", domain).stdout == "\(tokens.access)\n", "the vault kept the token")
    }

    @Test func explicitKeysAndService() throws {
        let sandbox = try CLISandbox()
        let url = sandbox.config.appendingPathComponent("custom.plist")
        let contents: [String: Any] = ["ghp": "ghp_fakeExplicit12345", "note": "hello"]
        try PropertyListSerialization.data(fromPropertyList: contents, format: .xml, options: 0).write(to: url)
        let result = try sandbox.vault("migrate", "--plist", url.path, "--key", "ghp", "--service", "github")
        #expect(result.status == 0, "\(result)")
        #expect(try sandbox.vault("get", "github").stdout == "ghp_fakeExplicit12345\n")
        #expect(try readPlist(url).dictionary["note"] as? String == "hello")
        #expect(try readPlist(url).dictionary["ghp"] == nil)
    }
}
#endif
