package import FoundationEssentials

/// The header fields that authorize one request to a resource server: `Authorization: Bearer …`
/// for a Bearer token, or, for a DPoP-bound token (RFC 9449 §7), `Authorization: DPoP …` and a
/// `DPoP` proof for this very method and URL, with `ath`, the token's hash. Made by
/// ``Vault/authorizationHeaders(for:method:url:nonce:leeway:timeout:client:)`` and used by
/// ``TokenAuthorizer``.
///
/// `description` names the scheme only; the token and the proof never appear in it.
public struct AuthorizationHeaders: Sendable, CustomStringConvertible {
    /// The token the fields carry.
    public let token: OAuthToken
    /// The `Authorization` field's value: `Bearer <token>` or `DPoP <token>`.
    public let authorization: String
    /// The `DPoP` field's value (a proof signed for this request), or `nil` for a Bearer token.
    public let dpopProof: String?

    /// The fields in order: `Authorization`, then `DPoP` when there is a proof.
    public var fields: [(name: String, value: String)] {
        var fields = [(name: "Authorization", value: authorization)]
        if let dpopProof { fields.append((name: "DPoP", value: dpopProof)) }
        return fields
    }

    /// Whether the token is DPoP-bound (and the fields carry a proof).
    public var isDPoP: Bool { dpopProof != nil }

    package init(token: OAuthToken, authorization: String, dpopProof: String?) {
        self.token = token
        self.authorization = authorization
        self.dpopProof = dpopProof
    }

    /// The fields for `token` sent with `method` to `url`: a proof signed by `dpopKey` when the
    /// token is a DPoP token. A DPoP token is never sent as Bearer.
    /// - Throws: `configurationError` for a DPoP token without a key (or without an installed
    ///   signer); `invalidInput` for a method or URL a proof cannot name.
    /// The proof's `iat` is the wall clock's, never an injected ``VaultClock``'s: a server checks it.
    package static func make(
        token: OAuthToken, dpopKey: DPoPKey?, key: CredentialKey, method: String, url: URL, nonce: String?
    ) throws -> AuthorizationHeaders {
        guard token.tokenType.equalsIgnoringCase("DPoP") else {
            return AuthorizationHeaders(token: token, authorization: try TokenAuthorizer.authorization(for: token, key: key), dpopProof: nil)
        }
        guard let dpopKey else {
            throw VaultError(
                .configurationError,
                "The token for \(key) is a DPoP token, and the entry holds no DPoP key to sign its proofs with (it was stored from outside the vault); log in again with vault login --dpop.")
        }
        let proof = try dpopKey.proof(
            method: method, url: url, nonce: nonce ?? DPoPNonces.nonce(for: url, .resourceServer), accessToken: token.accessToken)
        return AuthorizationHeaders(token: token, authorization: "DPoP \(token.accessToken)", dpopProof: proof)
    }

    public var description: String {
        "AuthorizationHeaders(\(isDPoP ? "DPoP, with a proof" : authorization.prefix { $0 != " " }))"
    }
}
