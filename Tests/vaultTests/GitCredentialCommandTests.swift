#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// `vault git-credential` never asks anyone anything: git runs it with no way to answer, and a
/// prompt on the user's terminal in the middle of `git push` would hang or confuse. Run here with a
/// controlling terminal, where `vault get` does ask for a file vault's passphrase.
@Suite struct GitCredentialCommandTests {
    @Test func getNeverAsksForAPassphraseEvenWithATerminal() throws {
        let sandbox = try CLISandbox()
        let token = "tv-git-cli-\(UUID().uuidString)"
        let set = try sandbox.vault("set", "git.example.com", "alice", stdin: Data("\(token)\n".utf8))
        #expect(set.status == 0, "\(set)")

        // The vault file exists, no key is given, and /dev/tty is a terminal: the request is typed
        // there (a blank line ends it), and the helper must fail without a prompt.
        let session = try PseudoTerminalSession(
            sandbox, ["git-credential", "--backend", "file", "--file", sandbox.vaultFile.path, "get"],
            controllingTerminal: true)
        session.type("protocol=https\rhost=git.example.com\rusername=alice\r\r")
        let result = session.finish()
        #expect(result.status == 6, "\(session.screen)")
        #expect(result.stdout.isEmpty)
        #expect(!session.screen.contains("Passphrase"), "it prompted: \(session.screen)")
        #expect(session.screen.contains("needs a key"), "\(session.screen)")
        #expect(!session.screen.contains(token))

        // With the key, the same request is answered.
        let answered = try sandbox.run(
            "vault", ["git-credential"] + sandbox.fileVault + ["get"],
            stdin: Data("protocol=https\nhost=git.example.com\nusername=alice\n\n".utf8))
        #expect(answered.status == 0 && answered.stdout == "username=alice\npassword=\(token)\n", "\(answered)")
    }

    @Test func getOnAVaultThatDoesNotExistAnswersNothingAndCreatesNothing() throws {
        let sandbox = try CLISandbox()
        let result = try sandbox.run(
            "vault", ["git-credential"] + sandbox.fileVault + ["get"],
            stdin: Data("protocol=https\nhost=git.example.com\n\n".utf8))
        #expect(result.status == 0 && result.stdout.isEmpty && result.stderr.isEmpty, "\(result)")
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path))
    }
}
#endif
