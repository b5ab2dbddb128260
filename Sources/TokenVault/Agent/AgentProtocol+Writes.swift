// Owns: the fields of the agent's write requests (`store`, `delete`) and of their answer, as
// pure values (AgentProtocol frames them; AgentServer carries them out).
package import FoundationEssentials

/// A `store` request's fields: the entry the client would have written directly, in its stored
/// form, so that both paths write the same bytes.
///
/// It holds the token and (with ``Registration-swift.enum/replace``) the client registration,
/// client secret included, and the DPoP key: secrets that travel only to the agent, over its
/// socket, never back. Its `description` shows the entry's name only.
@_spi(AgentWire) public struct AgentStoreRequest: Sendable, Equatable, Codable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// What happens to what the entry already held.
    public enum Registration: String, Sendable, Codable {
        /// As ``Vault/saveToken(_:for:)``: the new token, with the registration, the server's
        /// verdict and the DPoP key the entry already held (`vault set` without `--token-url`).
        case keep
        /// As ``Vault/saveToken(_:for:registration:dpopKey:)``: the whole entry is replaced
        /// (`vault set --token-url …`, `--forget-registration`, `vault login`).
        case replace
    }

    public var service: String
    public var account: String
    /// The vault the client would open directly (``AgentProtocol/vaultIdentity(of:)``).
    public var vault: String
    public var registration: Registration
    /// The entry's stored form (``StoredEntry/storedForm()``); base64 on the wire.
    var entry: Data

    enum CodingKeys: String, CodingKey { case service, account, vault, registration, entry }

    /// A store that keeps the entry's registration, as ``Vault/saveToken(_:for:)``.
    public init(key: CredentialKey, keepingRegistration token: OAuthToken, vault: String) throws {
        self.service = key.service
        self.account = key.account
        self.vault = vault
        self.registration = .keep
        self.entry = try StoredEntry(token: token).storedForm()
    }

    /// A store that replaces the whole entry, as ``Vault/saveToken(_:for:registration:dpopKey:)``
    /// (`registration: nil` drops the one the entry held).
    public init(key: CredentialKey, token: OAuthToken, registration: ClientRegistration?, dpopKey: DPoPKey? = nil, vault: String) throws {
        self.service = key.service
        self.account = key.account
        self.vault = vault
        self.registration = .replace
        self.entry = try StoredEntry(token: token, refresh: registration, dpop: dpopKey).storedForm()
    }

    public func key() throws -> CredentialKey { try CredentialKey(service: service, account: account) }

    /// The entry to write.
    package func storedEntry() throws -> StoredEntry { try StoredEntry(storedForm: entry) }

    /// The bytes to write, as the direct path writes them.
    package var storedForm: Data { entry }

    public var description: String { "AgentStoreRequest(\(service) \(account), \(registration.rawValue), entry redacted)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror {
        Mirror(self, children: ["service": service, "account": account, "registration": registration], displayStyle: .struct)
    }
}

/// A `delete` request's fields.
@_spi(AgentWire) public struct AgentDeleteRequest: Sendable, Equatable, Codable {
    public var service: String
    public var account: String
    /// The vault the client would open directly (``AgentProtocol/vaultIdentity(of:)``).
    public var vault: String

    public init(key: CredentialKey, vault: String) {
        self.service = key.service
        self.account = key.account
        self.vault = vault
    }

    public func key() throws -> CredentialKey { try CredentialKey(service: service, account: account) }
}

/// What the agent answers a write: which backend it wrote to and, for a `delete`, whether there
/// was an entry. Never a token, a secret or a key.
@_spi(AgentWire) public struct AgentWriteResult: Sendable, Equatable, Codable {
    /// The backend the agent's vault uses (``BackendSelection/backend``, as `vault set` names it).
    public var backend: String
    /// For a `delete`: whether an entry was there to remove; nil for a `store`.
    public var existed: Bool?

    public init(backend: String, existed: Bool?) {
        self.backend = backend
        self.existed = existed
    }
}
