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
    /// A store of the caller's own, by the name it gives itself.
    case custom(String)

    /// The kind with this name: `secret-service`, `file` and `memory` name the built-in backends;
    /// any other name is ``custom(_:)``.
    public init(rawValue: String) {
        switch rawValue {
        case "secret-service": self = .secretService
        case "file": self = .file
        case "memory": self = .memory
        default: self = .custom(rawValue)
        }
    }

    /// A short, stable name: `secret-service`, `file`, `memory`, or a custom store's own name.
    public var rawValue: String {
        switch self {
        case .secretService: "secret-service"
        case .file: "file"
        case .memory: "memory"
        case .custom(let name): name
        }
    }

    public var description: String { rawValue }
}
