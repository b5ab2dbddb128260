#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

import Glibc

/// A vault file the user may read but not write (0400, or on a read-only mount) can still be
/// read; writing to it fails with a clear permission error and changes nothing. The commands
/// run without CAP_DAC_OVERRIDE, so that root meets the file's permissions as a user would.
@Suite struct ReadOnlyVaultTests {
    @Test func aReadOnlyVaultCanBeReadButNotWritten() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", stdin: Data("gho_fakeReadOnly1\n".utf8)).status == 0)
        #expect(chmod(sandbox.vaultFile.path, 0o400) == 0)
        let before = try Data(contentsOf: sandbox.vaultFile)
        func vault(_ arguments: [String], stdin: Data = Data()) throws -> CLIResult {
            try sandbox.run("vault", arguments + sandbox.fileVault, stdin: stdin, withoutFileOverride: true)
        }

        let get = try vault(["get", "github"])
        #expect(get.status == 0, "\(get)")
        #expect(get.stdout == "gho_fakeReadOnly1\n")
        let list = try vault(["list", "--json"])
        #expect(list.status == 0, "\(list)")
        #expect((list.json as? [[String: Any]])?.first?["service"] as? String == "github")
        let status = try vault(["status", "--json"])
        #expect(status.status == 0, "\(status)")
        #expect((status.json as? [String: Any])?["entries"] as? Int == 1)
        let missing = try vault(["delete", "nothing-here"])
        #expect(missing.status == 2, "deleting nothing needs no write: \(missing)")

        for (arguments, stdin) in [(["set", "gitlab"], "glpat-fakeReadOnly2\n"), (["delete", "github"], "")] {
            let write = try vault(arguments, stdin: Data(stdin.utf8))
            #expect(write.status == 1, "\(arguments): \(write)")
            #expect(write.stderr.contains("read-only"), "\(arguments): \(write)")
            #expect(write.stderr.contains(sandbox.vaultFile.path))
        }
        #expect(try Data(contentsOf: sandbox.vaultFile) == before, "a refused write changed the vault")
    }
}
#endif
