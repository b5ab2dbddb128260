public import FoundationEssentials

extension VaultConfiguration {
    /// The name of the systemd credential that holds the vault file's 32-byte key.
    package static let systemdKeyCredential = "token-vault.key"
    /// The name of the systemd credential that holds the vault file's passphrase.
    package static let systemdPassphraseCredential = "token-vault.passphrase"

    /// The key that systemd passes a service as a credential, if any.
    ///
    /// A unit with `LoadCredential=token-vault.key:…` or `LoadCredentialEncrypted=token-vault.key:…`
    /// (or the same for `token-vault.passphrase`) gets the file in `$CREDENTIALS_DIRECTORY`,
    /// readable by the service alone; nothing else needs to be set. ``fromEnvironment(_:)`` uses it
    /// when neither `TOKEN_VAULT_KEY_FILE` nor `TOKEN_VAULT_PASSPHRASE_FILE` is set: an explicit
    /// setting wins. See <doc:OnAServer>.
    ///
    /// - Returns: `nil` when `CREDENTIALS_DIRECTORY` is unset, empty or not an absolute path, or
    ///   holds neither credential.
    /// - Throws: ``VaultError`` `invalidInput` when it holds both, which would leave the choice of
    ///   key to chance.
    public static func systemdCredentialKeySource(
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> KeySource? {
        guard let directory = systemdCredentialsDirectory(environment: environment) else { return nil }
        let key = PathText.appending(directory, systemdKeyCredential)
        let passphrase = PathText.appending(directory, systemdPassphraseCredential)
        switch (present(key), present(passphrase)) {
        case (true, false): return .keyFile(key)
        case (false, true): return .passphraseFile(passphrase)
        case (false, false): return nil
        case (true, true):
            throw VaultError(
                .invalidInput,
                "The systemd credentials directory \(directory) holds both \(systemdKeyCredential) and \(systemdPassphraseCredential); pass the service one of them.")
        }
    }

    /// `$CREDENTIALS_DIRECTORY` when it is an absolute path.
    static func systemdCredentialsDirectory(environment: [String: String]) -> String? {
        guard let directory = environment["CREDENTIALS_DIRECTORY"], directory.hasPrefix("/") else { return nil }
        return directory
    }

    /// Whether `path` names a file directly in `$CREDENTIALS_DIRECTORY`.
    static func isInSystemdCredentialsDirectory(
        _ path: String, environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> Bool {
        guard let directory = systemdCredentialsDirectory(environment: environment) else { return false }
        let parent = PathText.deletingLastComponent(path)
        return parent == directory || parent == PathText.standardized(directory)
    }

    /// Whether something is at `path`: a credential that exists but cannot be read is still the
    /// one meant, and opening it then reports why.
    private static func present(_ path: String) -> Bool {
        FileManager.default.fileExists(atPath: path)
    }
}

extension VaultConfiguration.KeySource {
    /// The key source as `vault status` shows it: its ``description``, and, for a key or
    /// passphrase file that systemd passed as a credential, that it came from there.
    package func origin(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        let path: String
        switch self {
        case .keyFile(let file), .passphraseFile(let file): path = file
        case .passphrase: return description
        }
        guard VaultConfiguration.isInSystemdCredentialsDirectory(path, environment: environment) else { return description }
        return "\(description) (systemd credential \(PathText.lastComponent(path)) in $CREDENTIALS_DIRECTORY)"
    }
}
