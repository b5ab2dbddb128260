import ArgumentParser
import TokenVault

@main
struct VaultCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vault",
        abstract: "Keep OAuth tokens and other credentials in the Secret Service or an encrypted file.",
        discussion: """
            Every subcommand takes the global options --backend, --file, --key-file, \
            --passphrase-file and --allow-insecure-permissions, each of which can also come from \
            the environment (TOKEN_VAULT_BACKEND, TOKEN_VAULT_FILE, TOKEN_VAULT_KEY_FILE, \
            TOKEN_VAULT_PASSPHRASE_FILE, TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS=1). With no key \
            and a terminal present, a file vault asks for its passphrase. A vault, key or \
            passphrase file that group or others can read is refused unless \
            --allow-insecure-permissions is given.

            \(ExitStatus.helpTable)
            """,
        version: TokenVaultVersion.current,
        subcommands: [SetToken.self, Get.self, List.self, Delete.self, Status.self, Migrate.self, Rekey.self, Login.self, Refresh.self, GitCredential.self]
    )

    /// Runs the command and turns a ``VaultError`` into a message on stderr and its exit code,
    /// the one place where that happens. Usage errors keep ArgumentParser's handling (exit 64).
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let error as VaultError {
            Output.error(error.message)
            Self.exit(withError: ExitCode(ExitStatus.code(for: error.code)))
        } catch {
            Self.exit(withError: error)
        }
    }
}
