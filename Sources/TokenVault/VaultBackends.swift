public import Logging
internal import Synchronization

/// A backend that a program registers with ``VaultBackends``, so that ``BackendPlan`` can choose
/// it and ``Vault/open(_:plan:logger:)`` can open it, as swift-log's `LoggingSystem.bootstrap`
/// installs a log handler at start.
///
/// TokenVault's own backends (the Secret Service, the encrypted file, memory) need no
/// registration. PostgreSQL lives in the `TokenVaultPostgres` product, so that a program that does
/// not use it does not build postgres-nio; a program that does registers it once, at start:
///
/// ```swift
/// import TokenVaultPostgres
/// VaultBackends.register(PostgresBackend())   // TOKEN_VAULT_BACKEND=postgres now opens it
/// ```
///
/// Nothing downstream asks which backend it is: what a caller needs from a store (where its
/// refresh locks live, whether they span hosts) is a requirement of ``CredentialStore``.
public protocol VaultBackend: Sendable {
    /// The kind this backend opens, such as ``BackendKind/postgres``. Never a built-in kind.
    var kind: BackendKind { get }

    /// Where `configuration` puts the vault, as messages and `vault status` name it: never a
    /// password or any other secret.
    /// - Throws: ``VaultError`` `invalidInput` when the configuration does not say where (a
    ///   missing or malformed database URL, say); ``BackendPlan`` then refuses with that error.
    func location(for configuration: VaultConfiguration) throws -> String

    /// Opens the vault that `configuration` names, sealed with its ``VaultConfiguration/keySource``.
    /// - Throws: ``VaultError``; `notFound` when ``VaultConfiguration/createIfMissing`` is off and
    ///   there is no vault there yet (a read-only command then says "no vault yet").
    func open(_ configuration: VaultConfiguration, logger: Logger) async throws -> any CredentialStore
}

/// The backends a program registered, beside TokenVault's own: the one table that
/// ``BackendPlan`` consults.
public enum VaultBackends: Sendable {
    private static let registry = Mutex<[BackendKind: any VaultBackend]>([:])

    /// Makes `backend` available to every ``BackendPlan`` and ``Vault/open(_:plan:logger:)`` of
    /// this process, replacing one registered earlier for the same kind. Register at start,
    /// before opening a vault.
    ///
    /// - Precondition: `backend.kind` is not one of TokenVault's own backends (the Secret
    ///   Service, the encrypted file, memory), which cannot be replaced.
    public static func register(_ backend: any VaultBackend) {
        precondition(!backend.kind.isBuiltIn, "TokenVault opens the \(backend.kind) backend itself; it cannot be registered")
        registry.withLock { $0[backend.kind] = backend }
    }

    /// The backend registered for `kind`, if any.
    public static func backend(for kind: BackendKind) -> (any VaultBackend)? {
        registry.withLock { $0[kind] }
    }

    /// Whether a vault of `kind` can be opened in this process: a built-in kind, or a registered one.
    package static func isAvailable(_ kind: BackendKind) -> Bool {
        kind.isBuiltIn || backend(for: kind) != nil
    }
}
