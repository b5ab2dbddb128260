import ArgumentParser
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
        subcommands: [SetToken.self, Get.self, List.self, Delete.self, Status.self, Migrate.self, Rekey.self, Copy.self, Login.self, Refresh.self, GitCredential.self]
    )

    /// The global options, accepted before the subcommand as git, docker and kubectl users type
    /// them. ArgumentParser parses the root command's options wherever they stand on the line,
    /// and a subcommand's `@OptionGroup var global: GlobalOptions` then receives this same value
    /// (an option group of a type the parent decoded is reused, not parsed again). So both
    /// positions mean the same, and help and completion list the options at both levels.
    @OptionGroup var global: GlobalOptions

    /// Runs the command and turns a ``VaultError`` into a message on stderr and its exit code,
    /// the one place where that happens. Usage errors keep ArgumentParser's handling (exit 64).
    static func main() async {
        StandardStreams.occupyClosedDescriptors()
        RawArguments.refuseNonUTF8()
        do {
            // Before anything reads a secret: no core dump of this process may hold one.
            try ProcessHardening.disableCoreDumps()
            var command = try parseAsRoot()
            // `vault` has no PostgreSQL backend built in: a command that names it runs in
            // `vault-postgres` instead, before anything is read or written.
            if VaultProgram.postgres == nil, (command as? any PostgresAware)?.usesPostgres == true {
                try PostgresHandoff.execute()
            }
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let error as VaultError {
            // A message that cannot be written leaves the exit code to say what happened.
            do { try Output.error(error.message) } catch {}
            Self.exit(withError: ExitCode(ExitStatus.code(for: error.code)))
        } catch let error as OutputFailure {
            do { try Output.error(error.description) } catch {}
            Self.exit(withError: ExitCode(ExitStatus.outputFailed))
        } catch {
            Self.exit(withError: error)
        }
    }
}
