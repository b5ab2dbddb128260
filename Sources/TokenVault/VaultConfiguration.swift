public import FoundationEssentials
internal import TokenVaultSystem

/// How to open a ``Vault``: which backend, and for the encrypted file, where it is and how to unlock it.
///
/// Read one from the environment with ``fromEnvironment(_:)``:
///
/// | variable | meaning |
/// |---|---|
/// | `TOKEN_VAULT_BACKEND` | `auto` (default), `secret-service`, `file`, `memory` or `postgres` (once registered, see ``VaultBackends``) |
/// | `TOKEN_VAULT_FILE` | the vault file; default `$XDG_DATA_HOME/token-vault/tokens.vault` |
/// | `TOKEN_VAULT_KEY_FILE` | a file holding a 32-byte key (raw, hex or base64) |
/// | `TOKEN_VAULT_PASSPHRASE_FILE` | a file whose content (less one trailing newline) is the passphrase |
/// | `TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS` | `1` to accept a vault or key file others can read (see ``allowInsecurePermissions``) |
public struct VaultConfiguration: Sendable {
    /// Which backend to use.
    public enum Backend: String, Sendable, CaseIterable, CustomStringConvertible {
        /// The Secret Service if it answers and its default collection is unlocked (or a prompt
        /// can unlock it), the encrypted file if there is no usable Secret Service, and a `locked`
        /// error if its collection is locked with no prompt: a locked keyring may hold the
        /// tokens, so it is not a reason to use the file. Never plain text. See ``BackendPlan``.
        case auto
        /// The desktop Secret Service (GNOME Keyring, KeePassXC, KWallet ≥ 5.97). Fails closed.
        case secretService = "secret-service"
        /// The libsodium-encrypted file. Fails closed.
        case file
        /// Process memory, for tests. Nothing persists.
        case memory
        /// PostgreSQL, for fleets: opened by the backend that the `TokenVaultPostgres` product
        /// registers (``VaultBackends``); where it is comes from `TOKEN_VAULT_DATABASE_URL`.
        /// Without that registration, opening fails closed with `backendUnavailable`.
        case postgres

        public var description: String { rawValue }

        /// The kind of backend this names; `nil` for `auto`, which ``BackendPlan`` resolves.
        public var kind: BackendKind? {
            switch self {
            case .auto: nil
            case .secretService: .secretService
            case .file: .file
            case .memory: .memory
            case .postgres: .postgres
            }
        }
    }

    /// Where the encrypted file's key comes from.
    public enum KeySource: Sendable, CustomStringConvertible {
        /// A file holding 32 key bytes: raw, or as 64 hex digits, or as base64.
        case keyFile(String)
        /// A file whose content is the passphrase; one trailing newline is ignored.
        case passphraseFile(String)
        /// A passphrase already in secure memory, for example typed at a terminal.
        case passphrase(SecretBytes)

        public var description: String {
            switch self {
            case .keyFile(let path): "key file \(path)"
            case .passphraseFile(let path): "passphrase file \(path)"
            case .passphrase: "passphrase (typed)"
            }
        }
    }

    /// The backend to use.
    public var backend: Backend
    /// The vault file; `nil` means the default, `$XDG_DATA_HOME/token-vault/tokens.vault` (or
    /// `~/.local/share/token-vault/tokens.vault`).
    public var filePath: String?
    /// How to unlock the vault file.
    public var keySource: KeySource?
    /// Create the vault file (`0600`) and its directory (`0700`) when they do not exist. On by
    /// default, so that a first ``Vault/open(_:plan:logger:)`` just works; read-only tools turn it
    /// off so that looking leaves nothing behind, and then a missing file is `backendUnavailable`.
    public var createIfMissing: Bool = true
    /// How long the Secret Service probe may take before it gives up.
    public var probeTimeout: Duration
    /// Accept a vault or key file that group or others can read. Off by default, as ssh does.
    public var allowInsecurePermissions: Bool
    /// How to use the Secret Service: call deadlines and unlock prompts.
    public var secretService: SecretServiceStore.Options

    public init(
        backend: Backend = .auto,
        filePath: String? = nil,
        keySource: KeySource? = nil,
        probeTimeout: Duration = .seconds(2),
        allowInsecurePermissions: Bool = false,
        secretService: SecretServiceStore.Options = SecretServiceStore.Options()
    ) {
        self.backend = backend
        self.filePath = filePath
        self.keySource = keySource
        self.probeTimeout = probeTimeout
        self.allowInsecurePermissions = allowInsecurePermissions
        self.secretService = secretService
    }

    /// Reads `TOKEN_VAULT_BACKEND`, `TOKEN_VAULT_FILE`, `TOKEN_VAULT_KEY_FILE`,
    /// `TOKEN_VAULT_PASSPHRASE_FILE` and `TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS` (`1`, `true` or
    /// `yes`; `0`, `false`, `no` or empty for off).
    /// - Throws: ``VaultError`` `invalidInput` for an unknown backend name or switch value, or
    ///   when both a key file and a passphrase file are set.
    public static func fromEnvironment(
        _ environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> VaultConfiguration {
        var configuration = VaultConfiguration()
        if let name = environment["TOKEN_VAULT_BACKEND"], !name.isEmpty {
            guard let backend = Backend(rawValue: name) else {
                throw VaultError(
                    .invalidInput,
                    "TOKEN_VAULT_BACKEND must be one of \(Backend.allCases.map(\.rawValue).joined(separator: ", ")); it is '\(name)'."
                )
            }
            configuration.backend = backend
        }
        if let path = environment["TOKEN_VAULT_FILE"], !path.isEmpty {
            configuration.filePath = path
        }
        let keyFile = environment["TOKEN_VAULT_KEY_FILE"].flatMap { $0.isEmpty ? nil : $0 }
        let passphraseFile = environment["TOKEN_VAULT_PASSPHRASE_FILE"].flatMap { $0.isEmpty ? nil : $0 }
        switch (keyFile, passphraseFile) {
        case (let key?, nil): configuration.keySource = .keyFile(key)
        case (nil, let passphrase?): configuration.keySource = .passphraseFile(passphrase)
        case (nil, nil): break
        case (_?, _?):
            throw VaultError(
                .invalidInput, "Set TOKEN_VAULT_KEY_FILE or TOKEN_VAULT_PASSPHRASE_FILE, not both."
            )
        }
        if configuration.keySource == nil { configuration.keySource = try systemdCredentialKeySource(environment: environment) }
        switch environment["TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS"]?.lowercased() {
        case nil, "", "0", "false", "no": break
        case "1", "true", "yes": configuration.allowInsecurePermissions = true
        case let other?:
            throw VaultError(
                .invalidInput, "TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS must be 1 or 0; it is '\(other)'.")
        }
        return configuration
    }

    /// The default vault file, following the XDG base directory spec:
    /// `$XDG_DATA_HOME/token-vault/tokens.vault`, or `~/.local/share/token-vault/tokens.vault`.
    package static func defaultFilePath(
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> String {
        let dataHome: String
        if let xdg = environment["XDG_DATA_HOME"], xdg.hasPrefix("/") {
            dataHome = xdg
        } else {
            let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? SystemCall.homeDirectory
            dataHome = PathText.appending(home, ".local/share")
        }
        return PathText.appending(dataHome, "token-vault/tokens.vault")
    }

    /// The vault file this configuration uses.
    package var resolvedFilePath: String {
        filePath ?? Self.defaultFilePath()
    }

    /// The same, with the default location read from `environment`.
    package func resolvedFilePath(environment: [String: String]) -> String {
        filePath ?? Self.defaultFilePath(environment: environment)
    }
}
