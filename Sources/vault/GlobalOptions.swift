import ArgumentParser
import Foundation
import TokenVault

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The options every subcommand takes: which backend, and for the encrypted file, where it is
/// and how to unlock it. Each falls back to its environment variable.
struct GlobalOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "auto, secret-service or file (env TOKEN_VAULT_BACKEND; default auto).", valueName: "backend"),
        completion: .list(["auto", "secret-service", "file"]))
    var backend: String?

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

    func validate() throws {
        _ = try configuration()
    }

    /// The configuration from the environment, with these options taking precedence.
    func configuration(
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> VaultConfiguration {
        if keyFile != nil && passphraseFile != nil {
            throw ValidationError("Give --key-file or --passphrase-file, not both.")
        }
        var environment = environment
        if keyFile != nil || passphraseFile != nil {
            // An option replaces whichever kind of key the environment names.
            environment["TOKEN_VAULT_KEY_FILE"] = nil
            environment["TOKEN_VAULT_PASSPHRASE_FILE"] = nil
        }
        var configuration: VaultConfiguration
        do {
            configuration = try VaultConfiguration.fromEnvironment(environment)
        } catch let error as VaultError {
            throw ValidationError(error.message)
        }
        if let backend {
            guard let chosen = VaultConfiguration.Backend(rawValue: backend), chosen != .memory else {
                throw ValidationError("--backend must be auto, secret-service or file; it is '\(backend)'.")
            }
            configuration.backend = chosen
        }
        // Whatever its source: `vault` runs once and exits, so a memory vault would lose every
        // token it was given, and `vault migrate` would scrub the plist into it.
        if configuration.backend == .memory {
            throw ValidationError(
                "TOKEN_VAULT_BACKEND=memory is for tests of the library; the vault command keeps nothing in memory after it exits. Use auto, secret-service or file."
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

    /// Opens the vault, creating a file vault (and its directory) if it does not exist yet: for
    /// commands that write. When the encrypted file will be used, no key was given and there is
    /// a terminal, asks for the passphrase there with echo off (twice when creating the file).
    func openVault(forcingFile: Bool = false, createIfMissing: Bool = true) async throws -> Vault {
        var configuration = try configuration()
        if forcingFile { configuration.backend = .file }
        configuration.createIfMissing = createIfMissing
        let probe = await Self.probe(for: configuration)
        let (usesFile, _) = Self.backendPlan(configuration, probe: probe)
        return try await open(configuration, usesFile: usesFile, probe: probe).vault
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
    /// - Parameter probe: the Secret Service probe, if the caller already ran it (`status` shows it).
    func openExistingVault(probe known: SecretServiceProbe? = nil) async throws -> ExistingVault {
        var configuration = try configuration()
        configuration.createIfMissing = false
        let probe = if let known { known } else { await Self.probe(for: configuration) }
        let (usesFile, reason) = Self.backendPlan(configuration, probe: probe)
        let path = configuration.resolvedFilePath
        if usesFile, !Self.exists(path) {
            return .noVaultYet(path: path, reason: reason)
        }
        let (vault, keySource) = try await open(configuration, usesFile: usesFile, probe: probe)
        return .opened(vault, keySource: keySource)
    }

    private func open(
        _ configuration: VaultConfiguration, usesFile: Bool, probe: SecretServiceProbe?
    ) async throws -> (vault: Vault, keySource: VaultConfiguration.KeySource?) {
        var configuration = configuration
        if configuration.keySource == nil, usesFile, let terminal = Terminal.openControllingTerminal() {
            defer { _ = close(terminal) }
            configuration.keySource = .passphrase(try askPassphrase(for: configuration.resolvedFilePath, terminal: terminal))
        }
        return (try await Vault.open(configuration, probe: probe), configuration.keySource)
    }

    /// The Secret Service probe, once per command, when the backend choice depends on it.
    static func probe(for configuration: VaultConfiguration) async -> SecretServiceProbe? {
        switch configuration.backend {
        case .auto, .secretService: await SecretServiceStore.probe(timeout: configuration.probeTimeout)
        case .file, .memory: nil
        }
    }

    /// Whether the encrypted file will be used, and why (as `Vault.open` would put it).
    private static func backendPlan(_ configuration: VaultConfiguration, probe: SecretServiceProbe?) -> (usesFile: Bool, reason: String) {
        switch configuration.backend {
        case .file: return (true, "the encrypted file was requested")
        case .auto:
            guard let probe else { return (true, "auto: the Secret Service was not probed") }
            return probe.outcome == .available
                ? (false, "auto: the Secret Service is available")
                : (true, "auto: the Secret Service is not usable (\(probe.summary))")
        case .secretService: return (false, "the Secret Service was requested")
        case .memory: return (false, "the memory backend was requested")
        }
    }

    /// Whether something is at `path`. Only a definite "no such file" counts as missing: any
    /// other failure (such as a directory we may not search) is left for the open to report.
    static func exists(_ path: String) -> Bool {
        var status = stat()
        if stat(path, &status) == 0 { return true }
        return errno != ENOENT && errno != ENOTDIR
    }

    private func askPassphrase(for path: String, terminal: Int32) throws -> SecretBytes {
        let creating = !FileManager.default.fileExists(atPath: path)
        let passphrase = try Terminal.readSecret(
            prompt: creating ? "New passphrase for \(path): " : "Passphrase for \(path): ", input: terminal, output: terminal)
        guard passphrase.count > 0 else {
            throw VaultError(.invalidInput, "The passphrase must not be empty.")
        }
        if creating {
            let again = try Terminal.readSecret(prompt: "Repeat the passphrase: ", input: terminal, output: terminal)
            guard again == passphrase else {
                throw VaultError(.invalidInput, "The two passphrases differ; nothing was created.")
            }
        }
        return passphrase
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
