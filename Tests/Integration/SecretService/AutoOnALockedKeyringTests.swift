#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

import Glibc

/// Issue 13 item 4, end to end: the `vault` command under `auto` on a real gnome-keyring that is
/// locked, on a private bus, with a key file configured. One key's history never ends up in two
/// backends unseen: the locked keyring is reported as locked, the file is used only when named.
@Suite(.timeLimit(.minutes(3))) struct AutoOnALockedKeyringTests {
    private static let password = "auto-locked-test-password"

    /// Runs `vault` on the bus with `stdin`, to its end.
    private func vault(
        _ arguments: [String], stdin: String = "", bus: PrivateBus, directory: TemporaryDirectory, keyFile: String
    ) async throws -> (status: Int32, stdout: String, stderr: String) {
        let path = try Products.executable("vault")
        let environment = bus.environment.merging(
            ["TOKEN_VAULT_FILE": directory.file("tokens.vault"), "TOKEN_VAULT_KEY_FILE": keyFile]) { $1 }
        let errorPath = directory.file("stderr-\(UUID().uuidString.prefix(8))")
        return try await offPool {
            let child = try ChildProcess(path, arguments, environment: environment, input: true, output: true, errorPath: errorPath)
            child.input!.write(Data(stdin.utf8))
            try child.input!.close()
            let output = child.readAll()
            let raw = child.wait()
            let status: Int32 = (raw & 0x7f) == 0 ? (raw >> 8) & 0xff : -1
            let errors = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
            return (status, String(decoding: output, as: UTF8.self), errors)
        }
    }

    @Test func autoNeverSplitsOneKeyAcrossTheKeyringAndTheFile() async throws {
        let bus = try await PrivateBus.start()
        try await bus.startKeyring(password: Self.password)
        let directory = try TemporaryDirectory()
        let keyFile = try directory.keyFile()
        let file = directory.file("tokens.vault")
        func run(_ arguments: [String], stdin: String = "") async throws -> (status: Int32, stdout: String, stderr: String) {
            try await vault(arguments, stdin: stdin, bus: bus, directory: directory, keyFile: keyFile)
        }

        // Unlocked: auto stores in the keyring.
        let first = try await run(["set", "github", "octocat"], stdin: "gho_first-token\n")
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stderr.contains("secret-service"))
        try await bus.lockLogin()

        // Locked, with a key file configured: set is refused as locked and writes no file.
        let second = try await run(["set", "github", "octocat"], stdin: "gho_second-token\n")
        #expect(second.status == 6, "\(second.stderr)")
        #expect(second.stderr.contains("locked"))
        #expect(second.stderr.contains("--backend file"))
        #expect(!FileManager.default.fileExists(atPath: file), "auto must not fall back to the file")

        // get says locked too, not "no vault yet".
        let get = try await run(["get", "github", "octocat"])
        #expect(get.status == 6, "\(get.stderr)")
        #expect(get.stderr.contains("locked"))
        #expect(!get.stderr.contains("no vault yet"))
        #expect(get.stdout.isEmpty)

        let status = try await run(["status", "--json"])
        #expect(status.status == 6, "\(status.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])
        #expect(object["backend"] is NSNull)
        #expect((object["error"] as? [String: Any])?["code"] as? String == "locked")

        // Naming the file uses it, on purpose.
        let explicit = try await run(["set", "github", "octocat", "--backend", "file"], stdin: "gho_file-token\n")
        #expect(explicit.status == 0, "\(explicit.stderr)")
        #expect(FileManager.default.fileExists(atPath: file))

        // Unlocked again (a new login): auto reads the keyring and says that the file is there too.
        await bus.stopKeyring()
        try await bus.startKeyring(password: Self.password)
        let after = try await run(["get", "github", "octocat"])
        #expect(after.status == 0, "\(after.stderr)")
        #expect(after.stdout == "gho_first-token\n")
        #expect(after.stderr.contains("warning:"), "the unused file is named: \(after.stderr)")
        #expect(after.stderr.contains(file))

        let shown = try await run(["status", "--json"])
        #expect(shown.status == 0, "\(shown.stderr)")
        let state = try #require(try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any])
        #expect(state["backend"] as? String == "secret-service")
        #expect((state["warnings"] as? [String])?.count == 1)
        let fileState = try #require(state["file"] as? [String: Any])
        #expect(fileState["exists"] as? Bool == true)
        #expect(fileState["used"] as? Bool == false)
        let text = try await run(["status"])
        #expect(text.stdout.contains("exists, not used: auto uses the Secret Service"), "\(text.stdout)")
    }
}
#endif
