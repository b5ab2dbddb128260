#if CLI  // the vault command exists with the package trait CLI
import ArgumentParser
import Testing

@testable import VaultCLI

/// What the parser accepts and refuses, and the message it gives, checked in process: a failure
/// here names the line, and no binary starts. What a user sees end to end (exit codes, stderr)
/// stays with the tests that run the built `vault` (ExitCodeTests, TokenCommandTests, …).
@Suite struct ParseTests {
    /// The message `vault` prints for `arguments`, or nil when they parse.
    private static func refusal(_ arguments: [String]) -> String? {
        do {
            _ = try VaultCommand.parseAsRoot(arguments)
            return nil
        } catch {
            return VaultCommand.message(for: error)
        }
    }

    @Test func getReadsItsOptionsWhereverTheyStand() throws {
        let parsed = try VaultCommand.parseAsRoot(["get", "--fresh", "github", "octocat", "--header"])
        let get = try #require(parsed as? VaultCommand.Get)
        #expect(get.entry.service == "github" && get.entry.account == "octocat")
        #expect(get.fresh && get.header && !get.json)
    }

    @Test func getRefusesHeaderWithJSON() {
        #expect(Self.refusal(["get", "github", "--json", "--header"]) == "Give --header or --json, not both.")
    }

    /// A token typed on the command line is refused, and the message does not repeat it.
    @Test func setRefusesATokenInArgvWithoutEchoingIt() throws {
        let message = try #require(Self.refusal(["set", "github", "octocat", "gho_typedInArgv1"]))
        #expect(message.contains("from stdin only"), "\(message)")
        #expect(!message.contains("gho_typedInArgv1"), "\(message)")
    }

    @Test func setRefusesANonPositiveLifetime() {
        #expect(Self.refusal(["set", "github", "--expires-in", "0"]) == "--expires-in must be a positive number of seconds.")
    }

    @Test func runNeedsACommandAfterTheSeparator() throws {
        let message = try #require(Self.refusal(["run", "--env", "TOKEN=github"]))
        #expect(message.hasPrefix("Give the command to run after --"), "\(message)")
        let parsed = try VaultCommand.parseAsRoot(["run", "--env", "GITHUB_TOKEN=github/octocat", "--", "env", "-0"])
        let run = try #require(parsed as? VaultCommand.Run)
        #expect(run.variables == ["GITHUB_TOKEN=github/octocat"])
        #expect(run.command == ["env", "-0"])
    }

    @Test func runRefusesABadVariableName() throws {
        #expect(Self.refusal(["run", "--env", "1BAD=github", "--", "true"]) != nil)
        #expect(Self.refusal(["run", "--env", "GOOD=github", "--env", "GOOD=gitlab", "--", "true"]) != nil)
    }
}
#endif
