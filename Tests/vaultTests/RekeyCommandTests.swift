#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// `vault rekey`, run as a user would.
@Suite struct RekeyCommandTests {
    @Test func rekeyToAnotherKeyFileThenToAPassphraseFile() throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        #expect(try sandbox.vault("set", "github", stdin: Data("\(tokens.access)\n".utf8)).status == 0)
        #expect(try sandbox.vault("set", "gitlab", "ci", stdin: Data("\(tokens.refresh)\n".utf8)).status == 0)

        let newKey = sandbox.root.appendingPathComponent("new.key")
        try CLISandbox.writeKeyFile(newKey)
        let rekey = try sandbox.vault("rekey", "--new-key-file", newKey.path)
        #expect(rekey.status == 0, "\(rekey)")
        #expect(rekey.stderr.contains("2 entries"))
        #expect(!rekey.stderr.contains(tokens.access))

        // The old key no longer opens the vault; the new one does, and every entry survived.
        let old = try sandbox.vault("get", "github")
        #expect(old.status == 4, "\(old)")
        let withNew = ["--backend", "file", "--file", sandbox.vaultFile.path, "--key-file", newKey.path]
        let get = try sandbox.run("vault", ["get", "github"] + withNew)
        #expect(get.status == 0, "\(get)")
        #expect(get.stdout == tokens.access + "\n")
        #expect(try sandbox.run("vault", ["get", "gitlab", "ci"] + withNew).stdout == tokens.refresh + "\n")

        // And on to a passphrase (cheap to test: interactive cost).
        let passphraseFile = sandbox.root.appendingPathComponent("passphrase")
        #expect(FileManager.default.createFile(
            atPath: passphraseFile.path, contents: Data("correct horse battery staple\n".utf8),
            attributes: [.posixPermissions: 0o600]))
        let toPassphrase = try sandbox.run(
            "vault", ["rekey", "--new-passphrase-file", passphraseFile.path, "--kdf", "interactive"] + withNew)
        #expect(toPassphrase.status == 0, "\(toPassphrase)")
        let withPassphrase = ["--backend", "file", "--file", sandbox.vaultFile.path, "--passphrase-file", passphraseFile.path]
        let list = try sandbox.run("vault", ["list", "--json"] + withPassphrase)
        #expect(list.status == 0, "\(list)")
        #expect(list.stdout.contains("gitlab"))
        #expect(try sandbox.run("vault", ["get", "github"] + withNew).status == 4)
    }

    @Test func wrongCurrentKeyChangesNothing() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", stdin: Data("gho_fakeFakeFake\n".utf8)).status == 0)
        let before = try Data(contentsOf: sandbox.vaultFile)
        let wrong = sandbox.root.appendingPathComponent("wrong.key")
        try CLISandbox.writeKeyFile(wrong)
        let newKey = sandbox.root.appendingPathComponent("new.key")
        try CLISandbox.writeKeyFile(newKey)
        let result = try sandbox.run(
            "vault",
            ["rekey", "--new-key-file", newKey.path, "--backend", "file", "--file", sandbox.vaultFile.path, "--key-file", wrong.path])
        #expect(result.status == 4, "\(result)")
        #expect(try Data(contentsOf: sandbox.vaultFile) == before)
        #expect(try sandbox.vault("get", "github").status == 0)
    }

    @Test func missingVaultIsNotFound() throws {
        let sandbox = try CLISandbox()
        let newKey = sandbox.root.appendingPathComponent("new.key")
        try CLISandbox.writeKeyFile(newKey)
        let result = try sandbox.vault("rekey", "--new-key-file", newKey.path)
        #expect(result.status == 2, "\(result)")
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path), "rekey must not create a vault")
    }

    @Test(arguments: [
        ["rekey", "--backend", "secret-service", "--new-key-file", "/k"],
        ["rekey", "--new-key-file", "/a", "--new-passphrase-file", "/b"],
        ["rekey", "--new-key-file", "/a", "--kdf", "moderate"],
        ["rekey", "--new-passphrase-file", "/a", "--kdf", "extreme"],
    ])
    func usageErrors(_ arguments: [String]) throws {
        let sandbox = try CLISandbox()
        let result = try sandbox.run("vault", arguments)
        #expect(result.status == 64, "\(arguments): \(result)")
    }

    @Test func noNewKeyAndNoTerminalIsAUsageError() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", stdin: Data("gho_fakeFakeFake\n".utf8)).status == 0)
        let result = try sandbox.vault("rekey")
        #expect(result.status == 64, "\(result)")
        #expect(result.stderr.contains("--new-key-file"))
        #expect(result.stderr.contains("Usage: vault rekey"), "the usage shown is rekey's own: \(result)")
    }

    /// A new passphrase that is too short is refused in a rekey's words: the vault is unchanged
    /// and the old key still opens it.
    @Test func aShortNewPassphraseChangesNothing() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", stdin: Data("gho_fakeFakeFake\n".utf8)).status == 0)
        let short = sandbox.root.appendingPathComponent("short-passphrase")
        #expect(FileManager.default.createFile(atPath: short.path, contents: Data("seven77\n".utf8), attributes: [.posixPermissions: 0o600]))
        let before = try Data(contentsOf: sandbox.vaultFile)
        let result = try sandbox.vault("rekey", "--new-passphrase-file", short.path)
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("A new passphrase must be at least 8 characters") && result.stderr.contains("Nothing was changed"), "\(result)")
        #expect(!result.stderr.contains("new vault"), "\(result)")
        #expect(try Data(contentsOf: sandbox.vaultFile) == before)
        #expect(try sandbox.vault("get", "github").stdout == "gho_fakeFakeFake\n")
    }
}
#endif
