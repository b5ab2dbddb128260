public import Foundation
public import Logging

/// The front door: a typed token API over whichever ``CredentialStore`` the configuration picks.
///
/// ```swift
/// let vault = try await Vault.open(.fromEnvironment())
/// let key = try CredentialKey(service: "github", account: "octocat")
/// try await vault.saveToken(OAuthToken(tokenResponse: body), for: key)
/// if let token = try await vault.token(for: key), !token.isExpired() { … }
/// ```
///
/// `Vault` is a value type and `Sendable`; copies share the same store.
public struct Vault: Sendable {
    /// The store behind this vault.
    public let store: any CredentialStore
    /// Which backend is in use and why.
    public let selection: BackendSelection
    let logger: Logger

    /// A vault over a store you made yourself, for example a ``MemoryStore`` in tests.
    public init(store: any CredentialStore, reason: String = "chosen by the caller", logger: Logger = Vault.noopLogger) {
        let backend = BackendSelection.Backend(rawValue: store.backendName) ?? .memory
        self.store = store
        self.selection = BackendSelection(backend: backend, reason: reason)
        self.logger = logger
    }

    init(store: any CredentialStore, selection: BackendSelection, logger: Logger) {
        self.store = store
        self.selection = selection
        self.logger = logger
    }

    /// A logger that discards everything: the default, since a library never builds its own.
    public static let noopLogger = Logger(label: "TokenVault", factory: { _ in SwiftLogNoOpLogHandler() })

    /// Opens the backend that `configuration` asks for.
    ///
    /// - `auto` probes the Secret Service and uses it if it answers and its default collection
    ///   is unlocked; otherwise it uses the encrypted file. It never falls back to plain text.
    /// - A backend named explicitly fails closed: if it cannot be used, this throws
    ///   `backendUnavailable` or `locked` rather than choosing another.
    ///
    /// - Parameter probe: what ``SecretServiceStore/probe(timeout:environment:)`` already found, if
    ///   the caller probed (to show it, say); `nil` probes here when the backend needs it.
    public static func open(
        _ configuration: VaultConfiguration = VaultConfiguration(),
        probe known: SecretServiceProbe? = nil,
        logger: Logger = Vault.noopLogger
    ) async throws -> Vault {
        switch configuration.backend {
        case .memory:
            return Vault(
                store: MemoryStore(),
                selection: BackendSelection(backend: .memory, reason: "the memory backend was requested; nothing persists"),
                logger: logger
            )
        case .secretService:
            let options = configuration.secretService
            let probe = if let known { known } else { await SecretServiceStore.probe(timeout: configuration.probeTimeout) }
            let reason: String
            switch probe.outcome {
            case .available:
                reason = "the Secret Service was requested and is available"
            case .locked where options.unlockPrompt && probe.canPrompt:
                // Fail closed only when nobody could unlock it: here a prompt can be shown.
                reason = "the Secret Service was requested; its collection is locked and will be unlocked by a prompt"
            default:
                throw probe.unavailableError(requestedExplicitly: true)
            }
            let store = try await SecretServiceStore.open(options: options, logger: logger)
            return Vault(
                store: store,
                selection: BackendSelection(backend: .secretService, reason: reason, probe: probe),
                logger: logger
            )
        case .file:
            return try await openFile(configuration, reason: "the encrypted file was requested", probe: nil, logger: logger)
        case .auto:
            let options = configuration.secretService
            let probe = if let known { known } else { await SecretServiceStore.probe(timeout: configuration.probeTimeout) }
            if probe.outcome == .available {
                do {
                    let store = try await SecretServiceStore.open(options: options, logger: logger)
                    return Vault(
                        store: store,
                        selection: BackendSelection(
                            backend: .secretService, reason: "auto: the Secret Service is available", probe: probe),
                        logger: logger
                    )
                } catch let error as VaultError where error.code == .backendUnavailable || error.code == .timeout {
                    // It went away between the probe and the connection: same as not available.
                    logger.debug("Secret Service vanished after the probe; using the encrypted file")
                    return try await openFile(
                        configuration, reason: "auto: the Secret Service stopped answering (\(error.message))",
                        probe: probe, logger: logger)
                }
            }
            logger.debug("Secret Service not usable; using the encrypted file", metadata: ["probe": "\(probe.outcome)"])
            return try await openFile(
                configuration, reason: "auto: the Secret Service is not usable (\(probe.summary))", probe: probe, logger: logger)
        }
    }

    private static func openFile(
        _ configuration: VaultConfiguration, reason: String, probe: SecretServiceProbe?, logger: Logger
    ) async throws -> Vault {
        let path = configuration.resolvedFilePath
        guard let keySource = configuration.keySource else {
            throw VaultError(
                .backendUnavailable,
                "The encrypted file vault at \(path) needs a key: set TOKEN_VAULT_KEY_FILE or TOKEN_VAULT_PASSPHRASE_FILE."
            )
        }
        let store = try await EncryptedFileStore.open(
            path: path,
            keySource: keySource,
            options: EncryptedFileStore.Options(
                allowInsecurePermissions: configuration.allowInsecurePermissions,
                createIfMissing: configuration.createIfMissing),
            logger: logger
        )
        return Vault(
            store: store,
            selection: BackendSelection(backend: .file, reason: reason, probe: probe, filePath: path),
            logger: logger
        )
    }

    // MARK: Tokens

    /// Saves `token` under `key` in its stored form (compact JSON), replacing any earlier value.
    public func saveToken(_ token: OAuthToken, for key: CredentialKey) async throws {
        try await store.save(token.storedForm(), for: key, contentType: .json)
        logger.debug("saved token", metadata: ["key": "\(key)"])
    }

    /// The token stored under `key`, or `nil` if there is none.
    /// - Throws: `invalidInput` if the entry holds something that is not a token, such as an
    ///   opaque secret saved with ``saveSecret(_:for:)`` (read that with ``secret(for:)``).
    public func token(for key: CredentialKey) async throws -> OAuthToken? {
        guard let data = try await store.load(key) else { return nil }
        do {
            return try OAuthToken(storedForm: data)
        } catch let error as VaultError where error.code == .integrityFailure {
            throw VaultError(
                .invalidInput, "The entry \(key) holds an opaque secret, not a token.", underlying: error)
        }
    }

    /// Removes the token under `key`. Returns whether there was one.
    @discardableResult
    public func deleteToken(for key: CredentialKey) async throws -> Bool {
        try await store.delete(key)
    }

    /// The keys that hold entries, sorted, optionally only those of one service.
    public func keys(service: String? = nil) async throws -> [CredentialKey] {
        try await store.keys(service: service)
    }

    // MARK: Opaque secrets

    /// Saves opaque secret bytes, such as an API key, under `key`.
    public func saveSecret(_ secret: Data, for key: CredentialKey) async throws {
        try await store.save(secret, for: key, contentType: .binary)
    }

    /// The opaque secret stored under `key`, or `nil` if there is none.
    public func secret(for key: CredentialKey) async throws -> Data? {
        try await store.load(key)
    }

    /// Removes the entry under `key`. Returns whether there was one.
    @discardableResult
    public func deleteSecret(for key: CredentialKey) async throws -> Bool {
        try await store.delete(key)
    }
}
