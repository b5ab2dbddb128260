#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

import Glibc

/// Names on the command line are bytes: `vault` refuses those that are not UTF-8 instead of
/// letting Swift repair them into U+FFFD (when `caf\xE8` silently overwrote `caf\xE9`), and it
/// never prints a stored name's bidirectional overrides as they are.
@Suite struct NameCommandTests {
    /// Runs `vault` through `sh`, which passes `printf`'s raw bytes as arguments.
    static func runRaw(_ sandbox: CLISandbox, _ script: String, stdin: String = "") throws -> CLIResult {
        // The support target's runner reads stdout and stderr at once.
        let environment = sandbox.environment.merging([
            "VAULT": Products.directory.appendingPathComponent("vault").path, "VAULT_FILE": sandbox.vaultFile.path,
            "VAULT_KEY": sandbox.keyFile.path,
        ]) { $1 }
        let result = try ChildProcess.run("/bin/sh", ["-c", script], environment: environment, stdin: Data(stdin.utf8))
        return CLIResult(status: result.status, stdout: result.stdoutText, stderr: result.stderr)
    }

    @Test func namesThatAreNotUTF8AreRefused() throws {
        let sandbox = try CLISandbox()
        let options = #"--backend file --file "$VAULT_FILE" --key-file "$VAULT_KEY""#
        let first = try Self.runRaw(sandbox, #""$VAULT" set "$(printf 'caf\351')" "# + options, stdin: "gho_fakeFirst1\n")
        #expect(first.status == 64, "\(first)")
        #expect(first.stderr.contains("Argument 2 is not valid UTF-8"), "\(first)")
        let second = try Self.runRaw(sandbox, #""$VAULT" set "$(printf 'caf\350')" "# + options, stdin: "gho_fakeSecond2\n")
        #expect(second.status == 64, "\(second)")
        // Nothing was stored under either name, nor under the repaired one.
        let list = try sandbox.vault("list", "--json")
        #expect(list.stdout.contains("caf") == false, "\(list.stdout)")
        #expect(!first.stderr.contains("gho_fake") && !second.stderr.contains("gho_fake"))
    }

    @Test func bidirectionalOverridesAreRefusedInNewNames() throws {
        let sandbox = try CLISandbox()
        let set = try sandbox.vault("set", "moc.\u{202E}elpmaxe", stdin: Data("gho_fakeBidi1\n".utf8))
        #expect(set.status == 64, "\(set)")
        #expect(set.stderr.contains("bidirectional"), "\(set)")
    }

    /// A name an older release stored (it accepted these) is listed escaped, never as it is.
    @Test func listEscapesNamesReadFromTheStore() async throws {
        let sandbox = try CLISandbox()
        let store = try await EncryptedFileStore.open(path: sandbox.vaultFile.path, keySource: .keyFile(sandbox.keyFile.path))
        try await store.save(
            Data(#"{"v":1,"access_token":"gho_fakeOld1","token_type":"Bearer","issued_at":0}"#.utf8),
            for: CredentialKey(storedService: "moc.\u{202E}elpmaxe", account: "a\u{2066}b"), contentType: .json)
        let list = try sandbox.vault("list")
        #expect(list.status == 0, "\(list)")
        #expect(list.stdout.contains(#"moc.\u{202E}elpmaxe"#), "\(list.stdout)")
        #expect(list.stdout.contains(#"a\u{2066}b"#), "\(list.stdout)")
        #expect(!list.stdout.unicodeScalars.contains { (0x202A...0x202E).contains($0.value) || (0x2066...0x2069).contains($0.value) })
    }
}
#endif
