#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// Issue 15: global options work before the subcommand, as users of git, docker and kubectl type
/// them, and after it, with the same meaning, in help and in shell completion.
@Suite struct GlobalOptionPositionTests {
    @Test func beforeAfterAndMixedMeanTheSame() throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        let global = sandbox.fileVault

        let set = try sandbox.run("vault", global + ["set", "github", "octocat"], stdin: Data("\(tokens.access)\n".utf8))
        #expect(set.status == 0, "\(set)")
        #expect(set.stderr.contains("in the file backend"))

        let before = try sandbox.run("vault", global + ["get", "github", "octocat"])
        let after = try sandbox.run("vault", ["get", "github", "octocat"] + global)
        let mixed = try sandbox.run("vault", Array(global[0..<2]) + ["get", "github", "octocat"] + Array(global[2...]))
        for result in [before, after, mixed] {
            #expect(result.status == 0, "\(result)")
            #expect(result.stdout == "\(tokens.access)\n")
        }

        let status = try sandbox.run("vault", global + ["status", "--json"])
        let object = try #require(status.json as? [String: Any], "\(status)")
        #expect(object["requested_backend"] as? String == "file")
        #expect((object["file"] as? [String: Any])?["path"] as? String == sandbox.vaultFile.path)
    }

    @Test(arguments: [
        ["--backend", "bogus", "get", "github"],
        ["get", "github", "--backend", "bogus"],
        ["--backend", "memory", "list"],
        ["--key-file", "/a", "get", "github", "--passphrase-file", "/b"],
        ["--backend", "secret-service", "rekey", "--new-key-file", "/k"],
    ])
    func usageErrorsInEitherPosition(_ arguments: [String]) throws {
        let result = try CLISandbox().run("vault", arguments)
        #expect(result.status == 64, "\(arguments): \(result)")
    }

    /// The root command parses the global options too, but help needs no vault: a bad
    /// environment is an error (exit 1) for the commands that use one, and only for them.
    @Test func helpWorksWhateverTheEnvironmentHolds() throws {
        let sandbox = try CLISandbox()
        let memory = ["TOKEN_VAULT_BACKEND": "memory"]
        for arguments in [[], ["help", "set"], ["--help"], ["get", "--help"]] {
            let result = try sandbox.run("vault", arguments, environment: memory)
            #expect(result.status == 0, "\(arguments): \(result)")
            #expect(result.stdout.contains("USAGE: vault"), "\(arguments)")
        }
        for arguments in [["get", "github"], ["list"], ["status"], ["delete", "github"]] {
            let result = try sandbox.run("vault", arguments, environment: memory)
            #expect(result.status == 1, "\(arguments): \(result)")
            #expect(result.stderr.contains("TOKEN_VAULT_BACKEND=memory"), "\(arguments)")
        }
    }

    @Test func rootHelpListsTheGlobalOptionsAndTheirValues() throws {
        let help = try CLISandbox().run("vault", ["--help"])
        #expect(help.stdout.contains("USAGE: vault [--backend <backend>] [--file <path>]"))
        #expect(help.stdout.contains("(values: auto, secret-service, file, postgres)"))
        let rekey = try CLISandbox().run("vault", ["help", "rekey"])
        #expect(rekey.stdout.contains("(values: interactive, moderate, sensitive)"), "\(rekey.stdout)")
    }

    /// Real bash runs the completion script vault generates, as `complete -F` would call it.
    @Test func bashCompletesGlobalOptionsInBothPositions() throws {
        let sandbox = try CLISandbox()
        let script = try sandbox.run("vault", ["--generate-completion-script", "bash"])
        #expect(script.status == 0, "\(script)")
        let scriptFile = sandbox.root.appendingPathComponent("vault.bash")
        try Data(script.stdout.utf8).write(to: scriptFile)
        let driver = """
            source "$1"
            complete_words() {
                COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
                COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
                _vault vault "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
                echo "${COMPREPLY[*]}"
            }
            complete_words vault --backend ''
            complete_words vault --backend file g
            complete_words vault --b
            complete_words vault get github --backend ''
            complete_words vault --backend file get github --b
            complete_words vault rekey --kdf ''
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = ["-c", driver, "bash", scriptFile.path]
        process.environment = sandbox.environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.count >= 6, "\(text)")
        guard lines.count >= 6 else { return }
        #expect(lines[0] == "auto secret-service file postgres")
        // Both subcommands that start with g: git-credential is listed since it shows in --help.
        #expect(lines[1] == "get git-credential")
        #expect(lines[2] == "--backend")
        #expect(lines[3] == "auto secret-service file postgres")
        #expect(lines[4] == "--backend")
        #expect(lines[5] == "interactive moderate sensitive")
    }
}
#endif
