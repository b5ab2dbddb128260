public import FoundationEssentials
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
    package let store: any CredentialStore
    /// Which backend is in use and why.
    public let selection: BackendSelection
    package let logger: Logger

    /// A vault over a store you made yourself, for example a ``MemoryStore`` in tests. Its
    /// ``selection`` reports the store's own ``CredentialStore/backend``.
    public init(store: any CredentialStore, reason: String = "chosen by the caller", logger: Logger = Vault.noopLogger) {
        self.store = store
        self.selection = BackendSelection(backend: store.backend, reason: reason)
        self.logger = logger
    }

    init(store: any CredentialStore, selection: BackendSelection, logger: Logger) {
        self.store = store
        self.selection = selection
        self.logger = logger
    }

    /// A logger that discards everything: the default, since a library never builds its own.
    public static let noopLogger = Logger(label: "TokenVault", factory: { _ in SwiftLogNoOpLogHandler() })

    /// Opens the backend that `configuration` leads to, as ``BackendPlan`` decides.
    ///
    /// - `auto` uses the Secret Service if it answers and its default collection is unlocked,
    ///   and the encrypted file if there is no Secret Service. A locked collection that no prompt
    ///   can unlock is `locked`, not a reason to use the file. It never falls back to plain text.
    /// - A backend named explicitly fails closed: if it cannot be used, this throws
    ///   `backendUnavailable` rather than choosing another. A named Secret Service is not probed
    ///   first, only connected to: a locked collection is then `locked` at the first read or
    ///   write (unless a prompt may unlock it), never a reason to use another backend.
    ///
    /// - Parameters:
    ///   - configuration: the backend, file and key to use; the default is `auto` with no key.
    ///   - known: the `plan` argument: the plan, if the caller made it already (to show it, say);
    ///     `nil` makes it here.
    ///   - logger: where the vault logs what it does (never a secret); the default discards it.
    public static func open(
        _ configuration: VaultConfiguration = VaultConfiguration(),
        plan known: BackendPlan? = nil,
        logger: Logger = Vault.noopLogger
    ) async throws -> Vault {
        let plan = if let known { known } else { await BackendPlan.make(for: configuration) }
        logger.debug("backend plan", metadata: ["plan": "\(plan)"])
        switch plan.decision {
        case .refuse(let error):
            throw error
        case .use(.memory):
            return Vault(
                store: MemoryStore(),
                selection: BackendSelection(backend: .memory, reason: plan.reason),
                logger: logger
            )
        case .use(.secretService):
            // No fallback if it fails now: it was named, or the probe found it there, so it may
            // hold the tokens.
            let store: SecretServiceStore
            do {
                store = try await SecretServiceStore.open(options: configuration.secretService, logger: logger)
            } catch let error as VaultError where plan.probe == nil {
                throw await Self.explainUnavailableSecretService(error, configuration)
            }
            return Vault(
                store: store,
                selection: BackendSelection(backend: .secretService, reason: plan.reason, probe: plan.probe),
                logger: logger
            )
        case .use(.file):
            return try await openFile(configuration, plan: plan, logger: logger)
        case .use(let kind):
            // A backend the program registered (PostgreSQL): the plan found it registered.
            guard let backend = VaultBackends.backend(for: kind) else {
                throw VaultError(.invalidInput, "A configuration cannot open the \(kind) backend, which is not registered; use Vault(store:) or VaultBackends.register(_:).")
            }
            let store = try await backend.open(configuration, logger: logger)
            return Vault(
                store: store,
                selection: BackendSelection(backend: kind, reason: plan.reason, location: plan.location),
                logger: logger
            )
        }
    }

    /// The error for a Secret Service that was named (so not probed first) and could not be
    /// connected to: the probe's, which tells a missing bus, a missing provider, a missing default
    /// collection and a locked one apart, when it finds it unusable; otherwise `error` itself. A
    /// connection that timed out is left as it is: the probe would only wait again.
    private static func explainUnavailableSecretService(_ error: VaultError, _ configuration: VaultConfiguration) async -> VaultError {
        guard [.backendUnavailable, .locked, .notFound].contains(error.code) else { return error }
        let probe = await SecretServiceStore.probe(timeout: configuration.probeTimeout)
        return probe.outcome == .available ? error : probe.unavailableError(requestedExplicitly: true)
    }

    private static func openFile(_ configuration: VaultConfiguration, plan: BackendPlan, logger: Logger) async throws -> Vault {
        let path = plan.filePath
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
            selection: BackendSelection(backend: .file, reason: plan.reason, probe: plan.probe, filePath: path),
            logger: logger
        )
    }

    // MARK: Tokens

    /// Saves `token` under `key` in its stored form (compact JSON), replacing the earlier token.
    /// What the entry already knew about refreshing stays: its ``ClientRegistration`` and the
    /// server's verdict on a refresh token it rejected. To drop the registration, save with
    /// ``saveToken(_:for:registration:)`` and `registration: nil`.
    public func saveToken(_ token: OAuthToken, for key: CredentialKey) async throws {
        try await saveTokenKeepingRegistration(token, for: key)
    }

    /// The token stored under `key`, or `nil` if there is none.
    /// - Throws: `invalidInput` if the entry holds something that is not a token, such as an
    ///   opaque secret saved with ``saveSecret(_:for:)`` (read that with ``secret(for:)``).
    public func token(for key: CredentialKey) async throws -> OAuthToken? {
        guard let data = try await store.load(key) else { return nil }
        return try Self.token(storedForm: data, of: key)
    }

    /// The token the entry under `key` holds in `data`, its stored form, as ``token(for:)`` reads it.
    package static func token(storedForm data: Data, of key: CredentialKey) throws -> OAuthToken {
        do {
            return try OAuthToken(storedForm: data)
        } catch let error as VaultError where error.code == .integrityFailure {
            throw VaultError(
                .invalidInput, "The entry \(key) holds an opaque secret, not a token.", underlying: error)
        }
    }

    /// Removes the entry under `key`, a token or an opaque secret. Returns whether there was one.
    ///
    /// A refresh of the same entry that is in flight finishes first (the delete takes the entry's
    /// refresh lock, waiting up to 30 s), so the refresh cannot write the entry back afterwards.
    @discardableResult
    public func delete(_ key: CredentialKey) async throws -> Bool {
        let store = self.store
        return try await withEntryLock(key, timeout: .seconds(30)) { try await store.delete(key) }
    }

    /// Removes the token under `key`: the same as ``delete(_:)``, which removes any entry.
    @available(*, deprecated, renamed: "delete(_:)")
    @discardableResult
    public func deleteToken(for key: CredentialKey) async throws -> Bool {
        try await delete(key)
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

    /// Removes the secret under `key`: the same as ``delete(_:)``, which removes any entry.
    @available(*, deprecated, renamed: "delete(_:)")
    @discardableResult
    public func deleteSecret(for key: CredentialKey) async throws -> Bool {
        try await delete(key)
    }
}
