#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// Issue 13 item 7: stdout or stderr that cannot be written is an error with exit code 74
/// (EX_IOERR) and a message where one can still go, never a trap with a stack trace. The
/// redirections are real: `/dev/full` and a descriptor closed by the shell.
@Suite struct OutputFailureTests {
    /// Runs `vault ARGUMENTS… <redirection>` through `/bin/sh`, with the token on stdin.
    private func vault(
        _ sandbox: CLISandbox, _ arguments: [String], redirecting redirection: String, stdin: Data = Data()
    ) throws -> CLIResult {
        let vault = Products.directory.appendingPathComponent("vault").path
        // The support target's runner reads stdout and stderr at once.
        let result = try ChildProcess.run(
            "/bin/sh", ["-c", "exec \"$0\" \"$@\" \(redirection)", vault] + arguments + sandbox.fileVault,
            environment: sandbox.environment, stdin: stdin)
        return CLIResult(status: result.status, stdout: result.stdoutText, stderr: result.stderr)
    }

    private func expectNoTrap(_ result: CLIResult) {
        #expect(!result.stderr.contains("Fatal error"), "\(result)")
        #expect(!result.stderr.contains("Stack dump") && !result.stderr.contains("Current stack trace"), "\(result)")
    }

    @Test func getIntoAFullDiskExits74() throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        #expect(try sandbox.vault("set", "github", stdin: Data("\(tokens.access)\n".utf8)).status == 0)

        let result = try vault(sandbox, ["get", "github"], redirecting: ">/dev/full")
        #expect(result.status == 74, "\(result)")
        #expect(result.stderr == "vault: Could not write to standard output: No space left on device.\n")
        #expect(!result.stderr.contains(tokens.access))
        expectNoTrap(result)

        for arguments in [["get", "github", "--json"], ["list"], ["list", "--json"], ["status"], ["status", "--json"]] {
            let other = try vault(sandbox, arguments, redirecting: ">/dev/full")
            #expect(other.status == 74, "\(arguments): \(other)")
            expectNoTrap(other)
        }
    }

    @Test func getWithStdoutClosedExits74() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", stdin: Data("\(FakeTokens().access)\n".utf8)).status == 0)
        let result = try vault(sandbox, ["get", "github"], redirecting: ">&-")
        #expect(result.status == 74, "\(result)")
        #expect(result.stderr.contains("Could not write to standard output"))
        expectNoTrap(result)
    }

    /// The token is saved before the note that says so; the note cannot be written, so the exit
    /// code says so, and the token is there.
    @Test func setWithStderrClosedSavesAndExits74() throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        let result = try vault(sandbox, ["set", "github"], redirecting: "2>&-", stdin: Data("\(tokens.access)\n".utf8))
        #expect(result.status == 74, "\(result)")
        #expect(result.stdout.isEmpty)
        #expect(try sandbox.vault("get", "github").stdout == "\(tokens.access)\n")

        let full = try vault(sandbox, ["set", "github"], redirecting: "2>/dev/full", stdin: Data("\(FakeTokens().access)\n".utf8))
        #expect(full.status == 74, "\(full)")
    }

    /// With stderr closed, an error keeps its own exit code, and no file that vault opens ends
    /// up in the place of stderr (a message would then be written into it).
    @Test func anErrorWithStderrClosedKeepsItsCodeAndWritesNoFile() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", stdin: Data("\(FakeTokens().access)\n".utf8)).status == 0)
        let before = try Data(contentsOf: sandbox.vaultFile)
        let missing = try vault(sandbox, ["get", "gitlab"], redirecting: "2>&-")
        #expect(missing.status == 2, "\(missing)")
        let expired = try vault(sandbox, ["delete", "gitlab"], redirecting: "2>&-")
        #expect(expired.status == 2, "\(expired)")
        #expect(try Data(contentsOf: sandbox.vaultFile) == before, "nothing was written into the vault file")
    }
}
#endif
