public import FoundationEssentials

/// An OAuth 2.0 token as a token endpoint issued it, with the times that decide when it expires.
///
/// Build one from a token endpoint's response body with ``init(tokenResponse:receivedAt:)-(Data,_)``, or
/// directly with ``init(accessToken:tokenType:refreshToken:idToken:scope:issuedAt:expiresAt:refreshTokenExpiresAt:additionalFields:)``.
///
/// Its `description`, `debugDescription`, `dump` output and string interpolation never show a
/// token: each appears as its first four characters and its length.
///
/// Its stored form, which ``Vault`` writes to every backend, is compact JSON with a version
/// field; see <doc:StoredTokenFormat>. It is stable across releases.
public struct OAuthToken: Sendable, Equatable {
    /// The access token, to be sent as `Authorization: <tokenType> <accessToken>`.
    public var accessToken: String
    /// The token type, usually `Bearer`.
    public var tokenType: String
    /// The refresh token, if the server issued one.
    public var refreshToken: String?
    /// The OpenID Connect ID token, if the server issued one.
    public var idToken: String?
    /// The granted scope exactly as the server sent it, or `nil` if it sent none.
    public var scope: String?
    /// When the token was received. Times are kept to whole seconds.
    public var issuedAt: Date
    /// When the access token expires, or `nil` if the server did not say.
    public var expiresAt: Date?
    /// When the refresh token expires, or `nil` if the server did not say.
    public var refreshTokenExpiresAt: Date?
    /// Every other field the server returned, by name.
    public var additionalFields: [String: JSONValue]
    /// The record of a verification of the ID token (see ``idTokenVerification``), which only the
    /// verifier makes. Never read from a token endpoint's response.
    var idTokenVerificationRecord: IDTokenVerification?

    public init(
        accessToken: String,
        tokenType: String = "Bearer",
        refreshToken: String? = nil,
        idToken: String? = nil,
        scope: String? = nil,
        issuedAt: Date = Date(),
        expiresAt: Date? = nil,
        refreshTokenExpiresAt: Date? = nil,
        additionalFields: [String: JSONValue] = [:]
    ) {
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.refreshToken = refreshToken
        self.idToken = idToken
        self.scope = scope
        self.issuedAt = Self.wholeSeconds(issuedAt)
        self.expiresAt = expiresAt.map(Self.wholeSeconds)
        self.refreshTokenExpiresAt = refreshTokenExpiresAt.map(Self.wholeSeconds)
        self.additionalFields = additionalFields
    }

    /// Times are kept to whole seconds, as token endpoints state them, so that a token survives
    /// its stored form unchanged.
    package static func wholeSeconds(_ date: Date) -> Date {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded())
    }

    /// The granted scopes, split on spaces (RFC 6749 §3.3) or commas (as GitHub sends them).
    public var scopes: [String] {
        guard let scope else { return [] }
        return scope.split(whereSeparator: { $0 == " " || $0 == "," }).map(String.init)
    }

    /// Whether the access token has expired at `date`, or will within `leeway` seconds.
    ///
    /// The leeway absorbs clock skew between this machine and the server, and the time a
    /// request takes in flight. A token with no known expiry never counts as expired.
    public func isExpired(at date: Date = Date(), leeway: TimeInterval = 60) -> Bool {
        guard let expiresAt else { return false }
        return expiresAt.timeIntervalSince(date) <= leeway
    }

    /// Whether a refresh is possible at `date` (now by default): there is a refresh token and it
    /// has not expired.
    public func canRefresh(at date: Date = Date()) -> Bool {
        guard let refreshToken, !refreshToken.isEmpty else { return false }
        guard let refreshTokenExpiresAt else { return true }
        return refreshTokenExpiresAt > date
    }

    /// The token that results from a refresh response: the new token, keeping this token's
    /// refresh token (and its expiry) and ID token when the response carries none (RFC 6749 §6
    /// lets a server omit them).
    public func updated(byRefresh response: OAuthToken) -> OAuthToken {
        var result = response
        if result.refreshToken == nil {
            result.refreshToken = refreshToken
            result.refreshTokenExpiresAt = refreshTokenExpiresAt
        }
        if result.idToken == nil {
            result.idToken = idToken
            result.idTokenVerificationRecord = idTokenVerificationRecord
        }
        if result.scope == nil {
            result.scope = scope
        }
        return result
    }
}
