#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
import TokenVault

extension VaultCommand {
    struct Run: AsyncParsableCommand, UsesGlobalOptions {
        static let configuration = CommandConfiguration(
            commandName: "run",
            abstract: "Run a command with fresh access tokens in its environment, never on its command line.",
            usage: "vault run --env NAME=SERVICE[/ACCOUNT] [--env ...] [<global options>] -- <command> [<argument> ...]",
            discussion: """
                Gets each token as `vault get --fresh` does (refreshed first when it expires within \
                60 s and the entry holds a refresh description, one refresh across every process), \
                puts it in the environment variable NAME, and starts the command with the rest of \
                vault's environment. The token is in no argument of any process, so ps does not show it:

                  vault run --env GH_TOKEN=github/octocat -- gh api user
                  vault run --env TOKEN=api -- sh -c \\
                      'printf "Authorization: Bearer %s\\n" "$TOKEN" |
                       curl -H @- https://api.example.com/'

                (printf is built into sh, so the token is in no argument there either.)

                If a token cannot be had, the command is not started and vault exits with its own \
                code (2 no such entry, 3 expired and not refreshable, 6 token endpoint unreachable, \
                7 log in again, ...). Otherwise vault waits for the command and exits with its status, \
                or 128 + the signal that ended it, as a shell does; a command that is not found exits \
                127, one that cannot be run 126.

                SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to vault are passed to the \
                command (not those the terminal sends to the whole foreground group, which the \
                command receives itself, nor those vault was started ignoring, which the command \
                ignores too). The command inherits vault's standard streams and any descriptor \
                vault was given, but none that vault opened (the vault file, its lock files). \
                TOKEN_VAULT_* variables pass through: they name files and settings, never a secret, \
                so a script can ask the same vault again (vault get --fresh --rejected-token-file -). \
                When the tokens came from the agent (vault agent), TOKEN_VAULT_AGENT_SOCKET names its \
                socket, so that a long job can ask it again when the token has expired.
                """
        )

        @OptionGroup var global: GlobalOptions

        @Option(
            name: .customLong("env"),
            help: ArgumentHelp(
                "Put the access token of SERVICE (account ACCOUNT, default 'default') in the variable NAME (repeatable).",
                valueName: "NAME=SERVICE[/ACCOUNT]"))
        var variables: [String] = []

        @Argument(
            parsing: .postTerminator,
            help: ArgumentHelp("The command and its arguments, after --.", valueName: "command"))
        var command: [String] = []

        func validate() throws {
            try global.validateConfiguration()
            _ = try Self.bindings(variables)
            guard !command.isEmpty else {
                throw ValidationError("Give the command to run after --, as in: vault run --env TOKEN=github -- ./deploy.sh")
            }
            guard !command[0].isEmpty else { throw ValidationError("The command to run must not be empty.") }
        }

        func run() async throws {
            let bindings = try Self.bindings(variables)
            // What was open and what was ignored before vault opened anything: the caller's.
            let inheritance = ChildLauncher.Inheritance.current()
            let values = try await Self.tokens(for: bindings, global: global, command: command[0])
            let status = try ChildLauncher.run(command, setting: values, inheritance: inheritance)
            if status != 0 { throw ExitCode(status) }
        }

        /// One `--env NAME=SERVICE[/ACCOUNT]`.
        struct Binding: Equatable {
            var name: String
            var key: CredentialKey
        }

        /// The `--env` values, checked: each a valid, distinct variable name and a valid key.
        static func bindings(_ variables: [String]) throws -> [Binding] {
            guard !variables.isEmpty else {
                throw ValidationError("Give at least one --env NAME=SERVICE[/ACCOUNT]: the token to put in the command's environment.")
            }
            var seen = Set<String>()
            return try variables.map { variable in
                let parts = variable.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard parts.count == 2, !parts[1].isEmpty else {
                    throw ValidationError("--env takes NAME=SERVICE[/ACCOUNT], such as GITHUB_TOKEN=github/octocat.")
                }
                let name = String(parts[0])
                guard isVariableName(name) else {
                    throw ValidationError(
                        "--env: '\(name)' is not an environment variable name (letters, digits and _, not starting with a digit).")
                }
                guard !name.hasPrefix("TOKEN_VAULT_") else {
                    throw ValidationError("--env: \(name) would replace one of the vault's own settings; choose another name.")
                }
                guard seen.insert(name).inserted else {
                    throw ValidationError("--env: \(name) is given twice.")
                }
                // The first / separates the service from the account: a service holding a / cannot be named here.
                let entry = parts[1].split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
                do {
                    let key = try CredentialKey(
                        service: String(entry[0]), account: entry.count == 2 ? String(entry[1]) : CredentialKey.defaultAccount)
                    return Binding(name: name, key: key)
                } catch let error as VaultError {
                    throw ValidationError("--env \(name): \(error.message)")
                }
            }
        }

        /// POSIX's portable name: letters, digits and `_`, not starting with a digit.
        static func isVariableName(_ name: String) -> Bool {
            guard let first = name.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { return false }
            return name.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"):
                    true
                default: false
                }
            }
        }

        /// Each variable's token, as `vault get --fresh` gets it. The vault is let go before the
        /// command starts: vault holds no lock or descriptor of it while the command runs.
        /// - Throws: the first token's error, its message naming the variable and saying that
        ///   the command was not started.
        static func tokens(for bindings: [Binding], global: GlobalOptions, command: String) async throws -> [(String, String)] {
            // The vault is opened only for a token the agent does not serve.
            var opened: Vault?
            func vault() async throws -> Vault {
                if let opened { return opened }
                switch try await global.openExistingVault() {
                case .opened(let vault, _):
                    opened = vault
                    return vault
                case .noVaultYet(let path, _):
                    throw VaultError.nothingStored(for: bindings[0].key, noVaultAt: path, then: "\(command) was not started.")
                }
            }
            var values: [(String, String)] = []
            var fetched: [CredentialKey: String] = [:]
            // The agent's socket, for a long job to ask again (vault get --fresh finds it there).
            var agentSocket: String?
            for binding in bindings {
                if let known = fetched[binding.key] {
                    values.append((binding.name, known))
                    continue
                }
                do {
                    if let answer = try AgentCLI.token(for: binding.key, fresh: true, global: global) {
                        let token = try FreshToken.checked(answer.token.oauthToken, refreshed: answer.token.fresh, key: binding.key)
                        fetched[binding.key] = token.accessToken
                        values.append((binding.name, token.accessToken))
                        agentSocket = answer.socket
                        continue
                    }
                    let token = try await FreshToken.usable(try await vault(), key: binding.key)
                    fetched[binding.key] = token.accessToken
                    values.append((binding.name, token.accessToken))
                } catch let error as VaultError {
                    throw VaultError(error.code, "\(binding.name): \(error.message) \(command) was not started.", underlying: error)
                }
            }
            if let agentSocket { values.append(("TOKEN_VAULT_AGENT_SOCKET", agentSocket)) }
            return values
        }
    }
}
#endif
