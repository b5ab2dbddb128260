/// Which backend a ``Vault`` uses, and why: what ``BackendPlan`` decided, once the store is open.
public struct BackendSelection: Sendable, CustomStringConvertible {
    /// The backend in use.
    public let backend: BackendKind
    /// Why it was chosen, in words.
    public let reason: String
    /// What the Secret Service probe found, if it ran.
    public let probe: SecretServiceProbe?
    /// The vault file, for the file backend.
    package let filePath: String?
    /// Where a registered backend's vault is, as it names it (a database, without its password).
    package let location: String?

    package init(
        backend: BackendKind, reason: String, probe: SecretServiceProbe? = nil, filePath: String? = nil, location: String? = nil
    ) {
        self.backend = backend
        self.reason = reason
        self.probe = probe
        self.filePath = filePath
        self.location = location
    }

    public var description: String { "\(backend): \(reason)" }
}
