// Owns: the fields of the agent's `list` request and of its answer, as pure values, and how an
// answer's entries become `vault list`'s (AgentProtocol frames them; AgentServer answers them).
internal import FoundationEssentials

/// A `list` request's fields: one page of what `vault list` shows, for a vault that only the
/// agent holds open here (a passphrase vault, and no passphrase given).
@_spi(AgentWire) public struct AgentListRequest: Sendable, Equatable, Codable {
    /// Only the entries of this service, when given.
    public var service: String?
    /// The vault the client would open directly (``AgentProtocol/vaultIdentity(of:)``).
    public var vault: String
    /// The page starts after this entry (the last of the page before); nil for the first page.
    public var afterService: String?
    public var afterAccount: String?

    enum CodingKeys: String, CodingKey { case service, vault, afterService = "after_service", afterAccount = "after_account" }

    public init(service: String?, vault: String, after: CredentialKey? = nil) {
        self.service = service
        self.vault = vault
        self.afterService = after?.service
        self.afterAccount = after?.account
    }

    /// The entry the page starts after; nil for the first page (or names that are not a key).
    var after: CredentialKey? {
        guard let afterService, let afterAccount else { return nil }
        return try? CredentialKey(service: afterService, account: afterAccount)
    }
}

/// The answer to `list`: a page of entries, sorted by key (to a peer of another uid, only those
/// the policy grants it), and whether more follow. Names, kinds, expiries and refresh states:
/// no token, no secret.
@_spi(AgentWire) public struct AgentListing: Sendable, Equatable, Codable {
    public struct Entry: Sendable, Equatable, Codable {
        public var service: String
        public var account: String
        /// `token`, `secret` or `unreadable`.
        public var kind: String
        /// Seconds since 1970.
        public var expiresAt: Double?
        /// A ``Refreshability`` name.
        public var refresh: String?
        /// Why an unreadable entry could not be read: a ``VaultError`` code's name and its message.
        public var errorCode: String?
        public var errorMessage: String?

        enum CodingKeys: String, CodingKey {
            case service, account, kind, expiresAt = "expires_at", refresh, errorCode = "error_code", errorMessage = "error_message"
        }

        public init(
            service: String, account: String, kind: String, expiresAt: Double? = nil, refresh: String? = nil, errorCode: String? = nil,
            errorMessage: String? = nil
        ) {
            (self.service, self.account, self.kind, self.expiresAt) = (service, account, kind, expiresAt)
            (self.refresh, self.errorCode, self.errorMessage) = (refresh, errorCode, errorMessage)
        }
    }

    public var entries: [Entry]
    /// Whether entries follow this page: the client asks again, after the last one.
    public var more: Bool

    public init(entries: [Entry], more: Bool) {
        self.entries = entries
        self.more = more
    }

    /// The largest page's payload: well within one frame (``AgentProtocol/maximumBodyLength``).
    static let pageBytes = 48 * 1024
}

extension AgentListing.Entry {
    package init(_ entry: ListedEntry) {
        self.init(
            service: entry.key.service, account: entry.key.account, kind: entry.kind.rawValue,
            expiresAt: entry.expiresAt?.timeIntervalSince1970, refresh: entry.refresh?.name,
            errorCode: entry.unreadable?.code.description, errorMessage: entry.unreadable?.message)
    }

    /// The entry as `vault list` shows it; nil when the agent sent what no agent writes.
    package var listed: ListedEntry? {
        guard let key = try? CredentialKey(service: service, account: account), let kind = ListedEntry.Kind(rawValue: kind),
            expiresAt?.isFinite ?? true
        else { return nil }
        let unreadable = kind == .unreadable
            ? VaultError(errorCode.flatMap(AgentProtocol.code(named:)) ?? .unsupportedVersion, errorMessage ?? "The entry could not be read.")
            : nil
        return ListedEntry(
            key: key, kind: kind, expiresAt: expiresAt.map(Date.init(timeIntervalSince1970:)), refresh: refresh.flatMap(Refreshability.named),
            unreadable: unreadable)
    }
}
