import Foundation

extension OAuthToken {
    /// The claims of the OpenID Connect ID token, decoded from its payload.
    ///
    /// **Decoded, not verified**: the signature, issuer, audience and expiry are not checked. Use
    /// the claims for display (who logged in), never to decide whom to trust; verify the ID token
    /// with a JOSE library for that. `nil` when there is no ID token or it is not a JWT.
    public var idTokenClaims: [String: JSONValue]? {
        guard let idToken else { return nil }
        let segments = idToken.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, segments[1].utf8.count <= 64 * 1024,
            let payload = JWT.base64URLDecode(segments[1]),
            case .object(let claims)? = try? JSONDecoder().decode(JSONValue.self, from: payload)
        else { return nil }
        return claims
    }

    /// The granted scopes as a set (split as ``scopes`` splits them).
    public var scopeSet: Set<String> { Set(scopes) }

    /// Whether every scope in `required` was granted.
    public func hasScopes(_ required: some Sequence<String>) -> Bool {
        scopeSet.isSuperset(of: required)
    }
}
