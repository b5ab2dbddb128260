public import FoundationEssentials

/// A ``CredentialStore`` that keeps secrets in process memory, for your own unit tests.
///
/// It has the same semantics as the real backends and passes the same conformance suite, but
/// nothing survives the process, and the secrets sit in ordinary (pageable) memory. Do not use it
/// to hold real credentials.
public actor MemoryStore: CredentialStore {
    private var entries: [CredentialKey: Data]

    /// An empty store, or one seeded with `entries`.
    public init(entries: [CredentialKey: Data] = [:]) {
        self.entries = entries
    }

    public nonisolated var backend: BackendKind { .memory }

    /// Nobody outside this process can see it, so its refreshes need no lock file.
    public nonisolated func refreshLockPlacement() throws -> RefreshLockPlacement { .thisProcessOnly(self) }

    public func load(_ key: CredentialKey) -> Data? {
        entries[key]
    }

    public func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) {
        entries[key] = secret
    }

    public func saveAll(_ batch: [CredentialWrite]) {
        for entry in batch {
            entries[entry.key] = entry.secret
        }
    }

    @discardableResult
    public func delete(_ key: CredentialKey) -> Bool {
        entries.removeValue(forKey: key) != nil
    }

    public func keys(service: String?) -> [CredentialKey] {
        entries.keys.filter { service == nil || $0.service == service }.sorted()
    }
}
