#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

/// Secrets typed at a terminal: echo off, read straight into secure memory, never cut short.
@Suite struct TerminalInputTests {
    /// Types `token` and Enter at the prompt of `vault set`; returns the exit status.
    func typeToken(_ bytes: [UInt8], sandbox: CLISandbox, account: String) throws -> (status: Int32, screen: String) {
        let session = try PseudoTerminalSession(sandbox, ["set", "api", account] + sandbox.fileVault)
        #expect(session.waitFor("(input hidden): "), "no prompt; the terminal showed: \(session.screen)")
        session.type(bytes + [0x0D])
        let result = session.finish()
        return (result.status, session.screen)
    }

    @Test func aTokenOfTheLongestLengthIsStoredWhole() throws {
        let sandbox = try CLISandbox()
        let token = "t" + String(repeating: "a", count: 4094) + "z"  // 4096 bytes
        let typed = try typeToken(Array(token.utf8), sandbox: sandbox, account: "longest")
        #expect(typed.status == 0, "\(typed.screen)")
        #expect(!typed.screen.contains("aaaa"), "echo was on")
        let get = try sandbox.vault("get", "api", "longest")
        #expect(get.stdout == token + "\n", "stored \(get.stdout.count - 1) of 4096 bytes")
    }

    /// One byte more is refused with a clear error, not silently cut at 4096 bytes.
    @Test func aLongerTokenIsRefusedNotTruncated() throws {
        let sandbox = try CLISandbox()
        let token = String(repeating: "b", count: 4096) + "TAIL"
        let typed = try typeToken(Array(token.utf8), sandbox: sandbox, account: "toolong")
        #expect(typed.status == 1, "\(typed.screen)")
        #expect(typed.screen.contains("longer than 4096 bytes"), "\(typed.screen)")
        #expect(!typed.screen.contains("bbbb") && !typed.screen.contains("TAIL"), "the secret was shown")
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path), "something was stored")
    }

    /// Ctrl-U erases the line, even one that was too long: what is typed after it counts.
    @Test func ctrlUAfterTooMuchStartsAgain() throws {
        let sandbox = try CLISandbox()
        let typed = try typeToken(
            Array(repeating: UInt8(ascii: "c"), count: 5000) + [0x15] + Array("gho_fakeRetyped1".utf8), sandbox: sandbox,
            account: "retyped")
        #expect(typed.status == 0, "\(typed.screen)")
        #expect(try sandbox.vault("get", "api", "retyped").stdout == "gho_fakeRetyped1\n")
    }

    /// `status` names the key it actually used: a passphrase typed at the terminal, not "none".
    @Test func statusReportsATypedPassphrase() async throws {
        let sandbox = try CLISandbox()
        let passphraseFile = sandbox.root.appendingPathComponent("passphrase")
        #expect(FileManager.default.createFile(
            atPath: passphraseFile.path, contents: Data("correct horse battery staple\n".utf8),
            attributes: [.posixPermissions: 0o600]))
        let store = try await EncryptedFileStore.open(
            path: sandbox.vaultFile.path, keySource: .passphraseFile(passphraseFile.path), options: .init(kdf: .interactive))
        try await store.save(Data("fake-secret".utf8), for: CredentialKey(service: "api", account: "ci"), contentType: .binary)

        let session = try PseudoTerminalSession(
            sandbox, ["status", "--backend", "file", "--file", sandbox.vaultFile.path], controllingTerminal: true)
        #expect(session.waitFor("Passphrase for \(sandbox.vaultFile.path): "), "no prompt; the terminal showed: \(session.screen)")
        session.type("correct horse battery staple\r")
        let result = session.finish()
        #expect(result.status == 0, "\(session.screen) \(result.stdout)")
        #expect(result.stdout.contains("passphrase (typed)"), "\(result.stdout)")
        #expect(!result.stdout.contains("none given"), "\(result.stdout)")
        #expect(result.stdout.contains("entries:"))
    }
}
#endif
