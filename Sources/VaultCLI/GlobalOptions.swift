#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
import TokenVault
internal import TokenVaultSystem

/// The `vault` process's environment, read once. `ProcessInfo.environment` builds a new
/// dictionary from `environ` on every call (0.4 M instructions each with a usual environment), and a
/// cold `vault get` asked for it seven times; `vault` never changes its own environment. It is
/// read by ``SystemCall/environment()``, the same dictionary in a tenth of the instructions
/// (callgrind of a cold `vault get` through the agent: 0.79 M for Foundation's).
enum ProcessEnvironment {
    static let current = SystemCall.environment()
}

/// The options every subcommand takes: which backend, and for the encrypted file, where it is
/// and how to unlock it. Each falls back to its environment variable.
struct GlobalOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Which backend (env TOKEN_VAULT_BACKEND; default auto).", valueName: "backend"))
    var backend: BackendArgument?

    @Option(help: ArgumentHelp(
        "The encrypted vault file (env TOKEN_VAULT_FILE; default $XDG_DATA_HOME/token-vault/tokens.vault).",
        valueName: "path"), completion: .file())
    var file: String?

    @Option(help: ArgumentHelp(
        "A file holding the file vault's 32-byte key (env TOKEN_VAULT_KEY_FILE).", valueName: "path"), completion: .file())
    var keyFile: String?

    @Option(help: ArgumentHelp(
        "A file holding the file vault's passphrase (env TOKEN_VAULT_PASSPHRASE_FILE).", valueName: "path"),
        completion: .file())
    var passphraseFile: String?

    @Flag(help: ArgumentHelp(
        "Accept a vault, key or passphrase file that group or others can read (env TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS=1)."))
    var allowInsecurePermissions = false

    /// Checks what the command line alone says. The root command decodes these options too
    /// (they may stand before the subcommand), and `vault`, `vault help set` or `--help` must work
    /// whatever the environment holds; so the environment is checked by each subcommand's
    /// `validate()`, through ``validateConfiguration()``.
    func validate() throws {
        if keyFile != nil && passphraseFile != nil {
            throw ValidationError("Give --key-file or --passphrase-file, not both.")
        }
        if let file, file.isEmpty { throw ValidationError("--file must not be empty.") }
    }

    /// Checks the whole configuration before the command runs, for every subcommand that uses a
    /// vault: what the command line says is a usage error (exit 64). What the environment says
    /// (TOKEN_VAULT_*, a credentials directory holding both a key and a passphrase) is not a
    /// fault of the command line: ``configuration(environment:)`` throws it as a ``VaultError``
    /// (`invalidInput`, exit 1, without the usage text), which the command's run reports.
    func validateConfiguration() throws {
        do {
            _ = try configuration()
        } catch is VaultError {
            // Reported by run(), which reads the same configuration first.
        }
    }

    /// The configuration from the environment, with these options taking precedence.
    func configuration(
        environment: [String: String] = ProcessEnvironment.current
    ) throws -> VaultConfiguration {
        try values.configuration(environment: environment)
    }

    /// The options as plain values (``FastPath`` makes the options from them).
    var values: GlobalValues {
        get {
            GlobalValues(
                backend: backend, file: file, keyFile: keyFile, passphraseFile: passphraseFile,
                allowInsecurePermissions: allowInsecurePermissions)
        }
        set {
            backend = newValue.backend
            file = newValue.file
            keyFile = newValue.keyFile
            passphraseFile = newValue.passphraseFile
            allowInsecurePermissions = newValue.allowInsecurePermissions
        }
    }

    /// Opens the vault, creating a file vault (and its directory) if it does not exist yet: for
    /// commands that write. When the encrypted file will be used, no key was given and there is
    /// a terminal, asks for the passphrase there with echo off (twice when creating the file).
    func openVault(forcingFile: Bool = false, createIfMissing: Bool = true) async throws -> Vault {
        var configuration = try configuration()
        if forcingFile { configuration.backend = .file }
        configuration.createIfMissing = createIfMissing
        let plan = await BackendPlan.make(for: configuration)
        try Self.warn(plan)
        return try await open(configuration, plan: plan).vault
    }

    /// What a read-only command finds: the vault, or no vault yet.
    enum ExistingVault {
        /// The vault, and the key that actually opened it (a typed passphrase included).
        case opened(Vault, keySource: VaultConfiguration.KeySource?)
        /// The file backend would be used, and its file does not exist: nothing to read.
        case noVaultYet(path: String, reason: String)
    }

    /// Opens the vault only if it exists: never creates a file or a directory, and does not ask
    /// for a passphrase for a vault that is not there. For commands that only read (and dry runs).
    /// - Parameter plan: the backend plan, if the caller already made it (`status` shows it, and
    ///   its warnings, itself).
    func openExistingVault(plan known: BackendPlan? = nil) async throws -> ExistingVault {
        var configuration = try configuration()
        configuration.createIfMissing = false
        let plan: BackendPlan
        if let known {
            plan = known
        } else {
            plan = await BackendPlan.make(for: configuration)
            try Self.warn(plan)
        }
        if plan.usesFile, !plan.fileExists {
            return .noVaultYet(path: plan.filePath, reason: plan.reason)
        }
        do {
            let (vault, keySource) = try await open(configuration, plan: plan)
            return .opened(vault, keySource: keySource)
        } catch let error as VaultError where error.code == .notFound && plan.registeredBackend != nil {
            // A registered backend (a database) that holds no vault yet: as a file not made yet.
            return .noVaultYet(path: plan.location ?? plan.reason, reason: error.message)
        } catch let error as VaultError
            where error.code == .backendUnavailable && configuration.keySource == nil && plan.usesFile
            && AgentCLI.holdsVaultOpen(global: self)
        {
            // No key here, but an agent of this user holds the vault unlocked: say what it can do.
            throw VaultError(
                error.code,
                "\(error.message) The running agent holds this vault unlocked, but this command reads the vault itself; through the agent, `vault get`, `run`, `set`, `delete`, `list`, `status` and `git-credential get` need no key.",
                underlying: error)
        }
    }

    private func open(
        _ configuration: VaultConfiguration, plan: BackendPlan
    ) async throws -> (vault: Vault, keySource: VaultConfiguration.KeySource?) {
        var configuration = configuration
        if configuration.keySource == nil, plan.usesFile, let terminal = Terminal.openControllingTerminal() {
            defer { SystemCall.closeAfterUse(terminal) }
            let path = plan.filePath
            configuration.keySource = .passphrase(
                plan.fileExists
                    ? try Terminal.readPassphrase(prompt: "Passphrase for \(path): ", terminal: terminal)
                    : try Terminal.readNewPassphrase(
                        prompt: "New passphrase for \(path): ", repeatPrompt: "Repeat the passphrase: ",
                        ifTheyDiffer: "nothing was created", terminal: terminal))
        }
        return (try await Vault.open(configuration, plan: plan), configuration.keySource)
    }

    /// Shows the plan's warnings on stderr.
    private static func warn(_ plan: BackendPlan) throws {
        for warning in plan.warnings { try Output.warning(warning) }
    }
}

/// The service and account arguments of `set`, `get` and `delete`.
struct EntryArguments: ParsableArguments {
    @Argument(help: "The service, such as github.")
    var service: String

    @Argument(help: "The account within the service.")
    var account: String = CredentialKey.defaultAccount

    func validate() throws {
        _ = try key()
    }

    func key() throws -> CredentialKey {
        do {
            return try CredentialKey(service: service, account: account)
        } catch let error as VaultError {
            throw ValidationError(error.message)
        }
    }
}

/// The global options' values without ArgumentParser's property wrappers, which ``FastPath``
/// reads a `get` line into (making a ``GlobalOptions`` costs a cold `vault get` the wrappers'
/// generic set-up), and what the configuration is made from.
struct GlobalValues: Sendable {
    var backend: BackendArgument?
    var file: String?
    var keyFile: String?
    var passphraseFile: String?
    var allowInsecurePermissions = false

    /// The configuration from the environment, with these options taking precedence.
    func configuration(
        environment: [String: String] = ProcessEnvironment.current
    ) throws -> VaultConfiguration {
        if keyFile != nil && passphraseFile != nil {
            throw ValidationError("Give --key-file or --passphrase-file, not both.")
        }
        var environment = environment
        if keyFile != nil || passphraseFile != nil {
            // An option replaces whichever kind of key the environment names, a systemd
            // credential included: an explicit setting wins, even over a credentials directory
            // that holds both a key and a passphrase (which alone is refused as ambiguous).
            environment["TOKEN_VAULT_KEY_FILE"] = nil
            environment["TOKEN_VAULT_PASSPHRASE_FILE"] = nil
            environment["CREDENTIALS_DIRECTORY"] = nil
        }
        if backend == nil, let value = environment["TOKEN_VAULT_BACKEND"], !value.isEmpty, value != "memory",
            BackendArgument(rawValue: value) == nil
        {
            throw VaultError(
                .invalidInput,
                "TOKEN_VAULT_BACKEND must be one of \(BackendArgument.allCases.map(\.rawValue).joined(separator: ", ")), not '\(value)'.")
        }
        if backend != nil { environment["TOKEN_VAULT_BACKEND"] = nil }
        var configuration = try VaultConfiguration.fromEnvironment(environment)
        // One command, an operation or two: watching the keyring's item signals would cost two
        // calls to the bus that it never recoups.
        configuration.secretService.watchesChanges = false
        if let backend { configuration.backend = backend.backend }
        // Whatever its source: `vault` runs once and exits, so a memory vault would lose every
        // token it was given, and `vault migrate` would scrub the plist into it.
        if configuration.backend == .memory {
            throw VaultError(
                .invalidInput,
                "TOKEN_VAULT_BACKEND=memory is for tests of the library; the vault command keeps nothing in memory after it exits. Use auto, secret-service, file or postgres."
            )
        }
        if let file {
            guard !file.isEmpty else { throw ValidationError("--file must not be empty.") }
            configuration.filePath = file
        }
        if let keyFile { configuration.keySource = .keyFile(keyFile) }
        if let passphraseFile { configuration.keySource = .passphraseFile(passphraseFile) }
        if allowInsecurePermissions { configuration.allowInsecurePermissions = true }
        return configuration
    }
}
#endif
