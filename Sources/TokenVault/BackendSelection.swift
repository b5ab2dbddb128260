/// Which backend a ``Vault`` uses, and why.
public struct BackendSelection: Sendable, CustomStringConvertible {
    /// A backend that is in use.
    public enum Backend: String, Sendable, CustomStringConvertible {
        case secretService = "secret-service"
        case file
        case memory
        public var description: String { rawValue }
    }

    /// The backend in use.
    public let backend: Backend
    /// Why it was chosen, in words.
    public let reason: String
    /// What the Secret Service probe found, if it ran.
    public let probe: SecretServiceProbe?
    /// The vault file, for the file backend.
    public let filePath: String?

    public init(backend: Backend, reason: String, probe: SecretServiceProbe? = nil, filePath: String? = nil) {
        self.backend = backend
        self.reason = reason
        self.probe = probe
        self.filePath = filePath
    }

    public var description: String { "\(backend): \(reason)" }
}
