public import FoundationEssentials

/// The media type recorded with a secret, where the backend can record one.
///
/// The Secret Service stores it with the item (`secret-tool` shows it); the encrypted file and
/// memory backends ignore it. It never changes the bytes that are stored.
public struct SecretContentType: RawRepresentable, Hashable, Sendable {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// A serialized ``OAuthToken`` or other JSON document.
    public static let json = SecretContentType(rawValue: "application/json")
    /// Opaque bytes.
    public static let binary = SecretContentType(rawValue: "application/octet-stream")
    /// UTF-8 text, as `secret-tool store` writes.
    public static let text = SecretContentType(rawValue: "text/plain")
}

/// One secret of a batch written with ``CredentialStore/saveAll(_:)``: what
/// ``CredentialStore/save(_:for:contentType:)`` takes, as one value.
///
/// Its `description` names the key and the secret's size, never the secret.
/// A store that tells cheaply whether anything was written to it, by any process, since an earlier
/// look: its stamp differs after every write. The agent's refresh-ahead loop reads every entry
/// only when the stamp moved (the encrypted file: one `stat`).
package protocol ChangeStamping: AnyObject, Sendable {
    /// A value that differs after any write; nil when it cannot be told now.
    func changeStamp() -> [Int64]?
}

public struct CredentialWrite: Sendable, CustomStringConvertible {
    public var key: CredentialKey
    public var secret: Data
    public var contentType: SecretContentType

    public init(key: CredentialKey, secret: Data, contentType: SecretContentType = .binary) {
        self.key = key
        self.secret = secret
        self.contentType = contentType
    }

    public var description: String { "\(key): \(secret.count) bytes (\(contentType.rawValue))" }
}

/// The one seam between TokenVault and a storage backend.
///
/// A store maps ``CredentialKey``s to opaque secret bytes. It knows nothing about tokens: token
/// logic (expiry, refresh, JSON) lives above this protocol, in ``Vault`` and ``OAuthToken``.
///
/// Every implementation guarantees the following, and the shared conformance test suite checks
/// each point against each backend:
///
/// - **Durable on return.** When ``save(_:for:contentType:)`` or ``saveAll(_:)`` returns, the
///   secret survives a crash of this process (for files: it has been `fsync`ed).
/// - **Exact round trip.** A ``load(_:)`` after a save returns exactly the saved bytes,
///   including empty secrets, NUL bytes, newlines and bytes that are not UTF-8, up to the
///   backend's documented maximum size. A larger secret is refused with `tooLarge`, never
///   truncated.
/// - **Absence is not failure.** ``load(_:)`` returns `nil` when nothing is stored under the key.
///   ``delete(_:)`` of a missing key returns `false`; it is not an error.
/// - **Failures throw.** Every other failure throws a ``VaultError``: a locked keyring, a wrong
///   key, a tampered file, an I/O error. A failure is never reported as absence.
/// - **Listing reveals no secret.** ``keys(service:)`` returns only keys, sorted, and does not
///   need to decrypt or unlock any secret value where the backend can avoid it.
/// - **Concurrency.** A store is `Sendable` and may be used from many tasks at once. Saves of
///   different keys from concurrent tasks are all kept.
/// - **No secret escapes.** Nothing the store logs, throws or prints contains secret bytes.
public protocol CredentialStore: Sendable {
    /// Which backend this is. A store of your own answers ``BackendKind/custom(_:)`` with a
    /// name of its choosing, so that a ``Vault`` over it reports it as itself.
    var backend: BackendKind { get }

    /// Returns the secret stored under `key`, or `nil` if there is none.
    func load(_ key: CredentialKey) async throws -> Data?

    /// Stores `secret` under `key`, replacing any earlier value. Durable when it returns.
    func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) async throws

    /// Stores several secrets. Backends that can make the whole batch durable at once (the
    /// encrypted file does it with one `fsync`) override the default, which saves one by one.
    func saveAll(_ entries: [CredentialWrite]) async throws

    /// Removes the entry under `key`. Returns `true` if there was one, `false` if there was not.
    @discardableResult
    func delete(_ key: CredentialKey) async throws -> Bool

    /// The keys that hold entries, sorted, optionally only those of one service. Never secrets.
    func keys(service: String?) async throws -> [CredentialKey]

    /// Where refreshes of this store's entries meet, so that one refresh happens per expiry
    /// across tasks, processes and (for a store that spans hosts) hosts.
    ///
    /// The default suits a store that several processes of this host may share: a lock file per
    /// key in the user's runtime directory, named after ``backend``. A store that only this
    /// process can see answers ``RefreshLockPlacement/thisProcessOnly(_:)``.
    /// - Throws: ``VaultError`` when the locks cannot be placed (no private directory for them).
    func refreshLockPlacement() throws -> RefreshLockPlacement
}

extension CredentialStore {
    /// The backend's short, stable name, such as `secret-service`, `file` or `memory`: the
    /// ``backend``'s raw value, for messages and logs. Switch on ``backend`` instead.
    package var backendName: String { backend.rawValue }

    /// Stores opaque bytes under `key`.
    public func save(_ secret: Data, for key: CredentialKey) async throws {
        try await save(secret, for: key, contentType: .binary)
    }

    public func saveAll(_ entries: [CredentialWrite]) async throws {
        for entry in entries {
            try await save(entry.secret, for: entry.key, contentType: entry.contentType)
        }
    }

    public func refreshLockPlacement() throws -> RefreshLockPlacement {
        // A store of the caller's own: it may be shared between processes, so lock anyway.
        try .runtimeLockFiles(scope: "backend:\(backendName)", instance: type(of: self as Any) is AnyObject.Type ? self as AnyObject : nil)
    }

    /// Every key in the store, sorted.
    public func keys() async throws -> [CredentialKey] {
        try await keys(service: nil)
    }
}
