#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import Dispatch
import TokenVault

struct VaultCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vault",
        abstract: "Keep OAuth tokens and other credentials in the Secret Service or an encrypted file.",
        discussion: """
            Every subcommand takes the global options --backend, --file, --key-file, \
            --passphrase-file and --allow-insecure-permissions, before or after its name with the \
            same meaning (vault --backend file get github is vault get github --backend file); \
            each can also come from \
            the environment (TOKEN_VAULT_BACKEND, TOKEN_VAULT_FILE, TOKEN_VAULT_KEY_FILE, \
            TOKEN_VAULT_PASSPHRASE_FILE, TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS=1). With no key \
            and a terminal present, a file vault asks for its passphrase. A vault, key or \
            passphrase file that group or others can read is refused unless \
            --allow-insecure-permissions is given.

            \(ExitStatus.helpTable)
            """,
        version: TokenVaultVersion.current,
        subcommands: [SetToken.self, Get.self, List.self, Delete.self, Status.self, Migrate.self, Rekey.self, Copy.self, Login.self, Logout.self, Refresh.self, RotateDPoPKey.self, Run.self, GitCredential.self, Agent.self, Unlock.self, Lock.self]
    )

    /// The global options, accepted before the subcommand as git, docker and kubectl users type
    /// them. ArgumentParser parses the root command's options wherever they stand on the line,
    /// and a subcommand's `@OptionGroup var global: GlobalOptions` then receives this same value
    /// (an option group of a type the parent decoded is reused, not parsed again). So both
    /// positions mean the same, and help and completion list the options at both levels.
    @OptionGroup var global: GlobalOptions

    /// Parses the command line on the calling (main) thread, then runs the command, and turns a
    /// ``VaultError`` into a message on stderr and its exit code, the one place where that happens.
    /// Usage errors keep ArgumentParser's handling (exit 64).
    ///
    /// `vault --version` and plain `get` lines are read by ``FastPath`` (the same values, without
    /// ArgumentParser's reflection); every other line by ArgumentParser.
    ///
    /// Parsing is synchronous, so `--version`, `--help` and usage errors end the process before
    /// Swift's concurrency runtime starts a thread. Only a command that runs goes async: it runs in
    /// a task while the main thread serves the main queue (`dispatchMain`), as an `async` main does.
    static func start() -> Never {
        StandardStreams.occupyClosedDescriptors()
        RawArguments.refuseNonUTF8()
        let command: any ParsableCommand
        do {
            // Before anything reads a secret: no core dump of this process may hold one.
            try ProcessHardening.disableCoreDumps()
            switch FastPath.parse(Array(CommandLine.arguments.dropFirst())) {
            case .version?:
                try Output.line(TokenVaultVersion.current)
                Self.exit()
            case .get(let line)?:
                // A plain `get` asks the agent here, on this thread, before any ArgumentParser
                // value is made, and ends when it answered: the common cold read through the
                // agent starts no thread at all. (The agent serves no backend `vault` hands over.)
                if try line.answerFromAgent() { Self.exit() }
                Get.agentAsked = true
                command = line.command
            case nil:
                command = try parseAsRoot()
            }
            // `vault` has no PostgreSQL backend, DPoP signer or ID-token verifier: a command that
            // needs one runs in `vault-full` instead, before anything is read or written.
            try BackendHandoff.handOverIfNeeded(command)
        } catch {
            fail(error)
        }
        guard let asyncCommand = command as? any AsyncParsableCommand else {
            var command = command
            do { try command.run() } catch { fail(error) }
            Self.exit()
        }
        let box = CommandBox(command: asyncCommand)
        Task.detached {
            do {
                try await box.run()
            } catch {
                // A DPoP-bound entry `vault` cannot sign for: the same command, from the start, in
                // `vault-full` (nothing was written or sent).
                do { try box.rerunIfNeeded(after: error) } catch { fail(error) }
                fail(error)
            }
            Self.exit()
        }
        dispatchMain()
    }

    /// Ends the process with the message and exit code `error` calls for.
    private static func fail(_ error: any Error) -> Never {
        switch error {
        case let error as VaultError:
            // A message that cannot be written leaves the exit code to say what happened.
            do { try Output.error(error.message) } catch {}
            Self.exit(withError: ExitCode(ExitStatus.code(for: error.code)))
        case let error as OutputFailure:
            do { try Output.error(error.description) } catch {}
            Self.exit(withError: ExitCode(ExitStatus.outputFailed))
        default:
            Self.exit(withError: error)
        }
    }
}

/// Carries the parsed command into the task that runs it. The command is a value parsed from the
/// command line and only that task touches it after the hand-over.
private final class CommandBox: @unchecked Sendable {  // a parsed command, touched by one task after the hand-over
    private var command: any AsyncParsableCommand

    init(command: any AsyncParsableCommand) {
        self.command = command
    }

    func run() async throws {
        try await command.run()
    }

    func rerunIfNeeded(after error: any Error) throws {
        try BackendHandoff.rerunIfNeeded(command, after: error)
    }
}
#endif
