public import Foundation

/// A stored token together with what the vault knows about refreshing it: its
/// ``RefreshDescription``, if any, and the server's verdict if it rejected the refresh token.
/// Read with ``Vault/tokenEntry(for:)``.
///
/// Its `description` shows the ``refreshability(at:)`` and the token's redacted form; the client
/// secret and the tokens never appear.
public struct TokenEntry: Sendable, CustomStringConvertible {
    /// The token, as ``Vault/token(for:)`` returns it.
    public let token: OAuthToken
    /// How the entry is refreshed, or `nil` when it was saved without a description.
    public let refreshDescription: RefreshDescription?
    /// The server's rejection of the stored refresh token, or `nil` if it has not rejected it.
    /// A new login (which replaces the entry) clears it.
    public let rejection: OAuthErrorResponse?

    init(_ entry: StoredEntry) throws {
        token = entry.token
        refreshDescription = entry.refresh
        rejection = try entry.refreshTokenRejected()
    }

    /// Whether the entry can be refreshed at `date`, and by whom.
    public func refreshability(at date: Date = Date()) -> Refreshability {
        if rejection != nil { return .rejected }
        switch (refreshDescription != nil, token.canRefresh(at: date)) {
        case (true, true): return .refreshesItself
        case (true, false): return .noRefreshToken
        case (false, true): return .noDescription
        case (false, false): return .notRefreshable
        }
    }

    public var description: String {
        "TokenEntry(\(token), refresh: \(refreshability()))"
    }
}
