/// A kind of backend: one of TokenVault's own, or a store of the caller's own by its name.
///
/// Every ``CredentialStore`` says what it is through ``CredentialStore/backend``, and a
/// ``BackendSelection`` reports it, so that code switches on a type rather than on a string. A
/// store written by a user of the library is ``custom(_:)`` with a name it chooses; it is never
/// reported as one of the built-in backends.
public enum BackendKind: Hashable, Sendable, CustomStringConvertible, RawRepresentable {
    /// The desktop Secret Service (``SecretServiceStore``).
    case secretService
    /// The libsodium-encrypted file (``EncryptedFileStore``).
    case file
    /// Process memory (``MemoryStore``).
    case memory
    /// PostgreSQL, for fleets (`PostgresStore` in the `TokenVaultPostgres` product, which a
    /// program registers with ``VaultBackends`` to make it available to ``Vault/open(_:plan:logger:)``).
    case postgres
    /// A store of the caller's own, by the name it gives itself.
    case custom(String)

    /// The kind with this name: `secret-service`, `file`, `memory` and `postgres` name TokenVault's
    /// backends; any other name is ``custom(_:)``.
    public init(rawValue: String) {
        switch rawValue {
        case "secret-service": self = .secretService
        case "file": self = .file
        case "memory": self = .memory
        case "postgres": self = .postgres
        default: self = .custom(rawValue)
        }
    }

    /// A short, stable name: `secret-service`, `file`, `memory`, `postgres`, or a custom store's own name.
    public var rawValue: String {
        switch self {
        case .secretService: "secret-service"
        case .file: "file"
        case .memory: "memory"
        case .postgres: "postgres"
        case .custom(let name): name
        }
    }

    public var description: String { rawValue }

    /// Whether the `TokenVault` library opens this kind by itself: the Secret Service, the
    /// encrypted file and memory. Any other kind is opened by a backend registered with
    /// ``VaultBackends``.
    package var isBuiltIn: Bool {
        switch self {
        case .secretService, .file, .memory: true
        case .postgres, .custom: false
        }
    }
}
