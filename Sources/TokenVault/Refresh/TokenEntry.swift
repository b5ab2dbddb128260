public import FoundationEssentials

/// A stored token together with what the vault knows about refreshing it: its
/// ``ClientRegistration``, if any, and the server's verdict if it rejected the refresh token.
/// Read with ``Vault/tokenEntry(for:)``.
///
/// Its `description` shows the ``refreshability(at:)`` and the token's redacted form; the client
/// secret and the tokens never appear.
public struct TokenEntry: Sendable, CustomStringConvertible {
    /// The token, as ``Vault/token(for:)`` returns it.
    public let token: OAuthToken
    /// The client registration the entry is refreshed with, or `nil` when it was saved without one.
    public let registration: ClientRegistration?
    /// The server's rejection of the stored refresh token, or `nil` if it has not rejected it.
    /// A new login (which replaces the entry) clears it.
    public let rejection: OAuthErrorResponse?
    /// The RFC 7638 thumbprint (`jkt`) of the DPoP key the entry's tokens are bound to, or `nil`
    /// when they are Bearer tokens. The key itself is never handed out.
    public let dpopThumbprint: String?

    init(_ entry: StoredEntry) throws {
        token = entry.token
        registration = entry.refresh
        rejection = try entry.refreshTokenRejected()
        dpopThumbprint = entry.dpop?.thumbprint
    }

    /// Whether the entry can be refreshed at `date`, and by whom.
    public func refreshability(at date: Date = Date()) -> Refreshability {
        if rejection != nil { return .rejected }
        switch (registration != nil, token.canRefresh(at: date)) {
        case (true, true): return .refreshesItself
        case (true, false): return .noRefreshToken
        case (false, true): return .noDescription
        case (false, false): return .notRefreshable
        }
    }

    /// The earlier name of ``registration``.
    @available(*, deprecated, renamed: "registration")
    public var refreshDescription: ClientRegistration? { registration }

    public var description: String {
        "TokenEntry(\(token), refresh: \(refreshability())\(dpopThumbprint.map { ", DPoP jkt: \($0)" } ?? ""))"
    }
}
