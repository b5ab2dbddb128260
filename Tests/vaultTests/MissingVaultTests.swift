#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// Looking must not create: `list`, `status`, `get`, `delete` and `migrate --dry-run` on a vault
/// that does not exist yet leave no file and no directory behind. Only `set` and a real
/// `migrate` create the vault.
@Suite struct MissingVaultTests {
    /// A vault whose directory does not exist either.
    func nestedVault(_ sandbox: CLISandbox) -> (file: URL, directory: URL) {
        let directory = sandbox.root.appendingPathComponent("vaults/nested")
        return (directory.appendingPathComponent("tokens.vault"), sandbox.root.appendingPathComponent("vaults"))
    }

    @Test func readOnlyCommandsCreateNothing() throws {
        let sandbox = try CLISandbox()
        let (file, directory) = nestedVault(sandbox)

        let list = try sandbox.vault("list", file: file)
        #expect(list.status == 0, "\(list)")
        #expect(list.stdout.isEmpty)
        #expect(list.stderr.contains("No vault yet at \(file.path)"))
        let json = try sandbox.vault("list", "--json", file: file)
        #expect(json.status == 0, "\(json)")
        #expect((json.json as? [Any])?.isEmpty == true)

        let status = try sandbox.vault("status", file: file)
        #expect(status.status == 0, "\(status)")
        #expect(status.stdout.contains("\(file.path) (does not exist yet"))
        #expect(status.stdout.contains("file"))
        let statusJSON = try #require(try sandbox.vault("status", "--json", file: file).json as? [String: Any])
        #expect(statusJSON["backend"] as? String == "file")
        #expect((statusJSON["file"] as? [String: Any])?["exists"] as? Bool == false)
        #expect(statusJSON["entries"] as? Int == 0)
        #expect(statusJSON["error"] == nil)

        let get = try sandbox.vault("get", "github", file: file)
        #expect(get.status == 2, "\(get)")
        #expect(get.stderr.contains("no vault yet at \(file.path)"))
        let delete = try sandbox.vault("delete", "github", file: file)
        #expect(delete.status == 2, "\(delete)")

        #expect(!FileManager.default.fileExists(atPath: directory.path), "a read-only command created \(directory.path)")
    }

    /// The default location under XDG_DATA_HOME, the backend chosen by `auto` (no D-Bus here).
    /// A vault path that is a dangling symbolic link: `set` refuses to create through it, so
    /// `status` says so instead of promising that `set` creates it.
    @Test func statusOfADanglingLinkSaysNoVaultIsCreatedThroughIt() throws {
        let sandbox = try CLISandbox()
        let link = sandbox.root.appendingPathComponent("link.vault")
        let target = sandbox.root.appendingPathComponent("elsewhere/tokens.vault")
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: target.path)
        let status = try sandbox.vault("status", file: link)
        #expect(status.status == 0, "\(status)")
        #expect(status.stdout.contains("a symbolic link to \(target.path), which does not exist"), "\(status)")
        #expect(!status.stdout.contains("creates it"), "\(status)")
        let set = try sandbox.vault("set", "github", file: link, stdin: Data("gho_fakeLinked1\n".utf8))
        #expect(set.status == 1 && set.stderr.contains("never created through a link"), "\(set)")
        #expect(!FileManager.default.fileExists(atPath: target.path))
    }

    @Test func readOnlyCommandsCreateNothingAtTheDefaultLocation() throws {
        let sandbox = try CLISandbox()
        let environment = ["TOKEN_VAULT_KEY_FILE": sandbox.keyFile.path]
        for arguments in [["list"], ["status"], ["status", "--json"], ["get", "github"]] {
            let result = try sandbox.run("vault", arguments, environment: environment)
            #expect(result.status == (arguments[0] == "get" ? 2 : 0), "\(arguments): \(result)")
        }
        let directory = sandbox.data.appendingPathComponent("token-vault")
        #expect(!FileManager.default.fileExists(atPath: directory.path), "a read-only command created \(directory.path)")

        // `set` is what creates it, with private permissions.
        let set = try sandbox.run("vault", ["set", "github"], stdin: Data("gho_fakeCreates1\n".utf8), environment: environment)
        #expect(set.status == 0, "\(set)")
        let file = directory.appendingPathComponent("tokens.vault")
        #expect(try FileManager.default.attributesOfItem(atPath: directory.path)[.posixPermissions] as? Int == 0o700)
        #expect(try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? Int == 0o600)
        let list = try sandbox.run("vault", ["list", "--json"], environment: environment)
        #expect((list.json as? [[String: Any]])?.count == 1, "\(list)")
    }

    @Test func aDryRunCreatesNoVault() throws {
        let sandbox = try CLISandbox()
        let (file, directory) = nestedVault(sandbox)
        let tokens = FakeTokens()
        let url = try sandbox.writeTutorialDefaults("strings", domain: "com.example.dry", tokens: tokens)
        let result = try sandbox.vault("migrate", "--domain", "com.example.dry", "--dry-run", file: file)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("would-migrate"))
        #expect(!FileManager.default.fileExists(atPath: directory.path), "a dry run created \(directory.path)")
        #expect(try Data(contentsOf: url).contains(tokens.access))
    }

    /// A migration that finds nothing, or fails while validating, does not create a vault either.
    @Test func aMigrationThatChangesNothingCreatesNoVault() throws {
        let sandbox = try CLISandbox()
        let (file, directory) = nestedVault(sandbox)
        let plain = sandbox.config.appendingPathComponent("plain.plist")
        try PropertyListSerialization.data(fromPropertyList: ["theme": "dark"], format: .xml, options: 0).write(to: plain)
        let nothing = try sandbox.vault("migrate", "--plist", plain.path, file: file)
        #expect(nothing.status == 0, "\(nothing)")
        #expect(nothing.stdout.contains("No tokens found"))

        let corrupt = sandbox.config.appendingPathComponent("corrupt.plist")
        try Data("<?xml version=\"1.0\"?><plist><dict><key>accessToken</key>".utf8).write(to: corrupt)
        let failed = try sandbox.vault("migrate", "--plist", corrupt.path, file: file)
        #expect(failed.status == 1, "\(failed)")
        #expect(!FileManager.default.fileExists(atPath: directory.path), "a migration that changed nothing created \(directory.path)")

        // A real migration of real tokens does create it.
        let url = try sandbox.writeTutorialDefaults("strings", domain: "com.example.real", tokens: FakeTokens())
        let real = try sandbox.vault("migrate", "--plist", url.path, file: file)
        #expect(real.status == 0, "\(real)")
        #expect(FileManager.default.fileExists(atPath: file.path))
    }
}
#endif
