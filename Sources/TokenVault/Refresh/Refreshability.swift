/// Whether a stored token can be refreshed, and by whom: what `vault list` and `vault status`
/// show for each entry. It names a state only; it never holds a token or a client secret.
///
/// | state | meaning |
/// |---|---|
/// | ``refreshesItself`` | the entry holds a ``ClientRegistration`` and a refresh token the server has not rejected: ``Vault/freshToken(for:leeway:timeout:client:)`` and `vault get --fresh` refresh it |
/// | ``rejected`` | the server rejected the stored refresh token (`invalid_grant`); the verdict is stored, so only a new login helps |
/// | ``noRefreshToken`` | a refresh description but no usable refresh token (none, or it has expired): a new login at expiry |
/// | ``noDescription`` | a refresh token but no description: only a client that makes the request itself (the closure form) can refresh it |
/// | ``notRefreshable`` | neither a refresh token nor a description |
public struct Refreshability: Hashable, Sendable, CustomStringConvertible {
    /// A stable, machine-readable name: `self`, `rejected`, `no-refresh-token`,
    /// `no-description` or `none` (what `vault list --json` prints).
    public let name: String
    /// A short phrase for people.
    public let description: String

    private init(_ name: String, _ description: String) {
        self.name = name
        self.description = description
    }

    /// The vault refreshes the entry by itself.
    public static let refreshesItself = Refreshability("self", "refreshes itself")
    /// The server rejected the stored refresh token: log in again.
    public static let rejected = Refreshability("rejected", "refresh token rejected: log in again")
    /// A refresh description, but no refresh token that is still valid.
    public static let noRefreshToken = Refreshability("no-refresh-token", "no refresh token: log in again at expiry")
    /// A refresh token, but no description of the client: only the closure form refreshes it.
    public static let noDescription = Refreshability("no-description", "no refresh description")
    /// Nothing to refresh with.
    public static let notRefreshable = Refreshability("none", "cannot be refreshed")

    /// Whether ``Vault/freshToken(for:leeway:timeout:client:)`` and `vault get --fresh` can
    /// refresh the entry without help.
    public var isAutomatic: Bool { self == .refreshesItself }
}
