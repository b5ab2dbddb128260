package import FoundationEssentials

extension OAuthToken {
    /// The claims of the OpenID Connect ID token, decoded from its payload and **not verified**.
    ///
    /// The signature, issuer, audience, expiry and nonce are not checked here: use these claims
    /// for display (who logged in), never to decide whom to trust. ``verifiedIDTokenClaims`` holds
    /// them only once they were checked (the TokenVaultIDToken product's `IDTokenVerifier`, which
    /// `vault login` runs when the issuer's metadata names a `jwks_uri`). `nil` when there is no ID
    /// token or it is not a JWT.
    public var unverifiedIDTokenClaims: [String: JSONValue]? {
        guard let idToken else { return nil }
        let segments = idToken.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, segments[1].utf8.count <= 64 * 1024,
            let payload = JWT.base64URLDecode(segments[1]),
            case .object(let claims)? = try? JSONDecoder().decode(JSONValue.self, from: payload)
        else { return nil }
        return claims
    }

    /// The earlier name of ``unverifiedIDTokenClaims``, which says what it is.
    @available(*, deprecated, renamed: "unverifiedIDTokenClaims", message: "The claims are decoded, not verified; see verifiedIDTokenClaims.")
    public var idTokenClaims: [String: JSONValue]? { unverifiedIDTokenClaims }

    /// The ID token's claims, only when this very ID token was verified (``idTokenVerification``
    /// names the check and its time); otherwise `nil`, and ``unverifiedIDTokenClaims`` still holds
    /// them for display. Reading it runs no cryptography: the verification is a record kept with
    /// the token, bound to the ID token by its SHA-256.
    public var verifiedIDTokenClaims: [String: JSONValue]? {
        guard idTokenVerification != nil else { return nil }
        return unverifiedIDTokenClaims
    }

    /// The record of the check that verified the current ID token, or `nil` when it was never
    /// verified (or the ID token has changed since, as after a refresh that returned a new one).
    public var idTokenVerification: IDTokenVerification? {
        guard let record = idTokenVerificationRecord, let idToken,
            Sodium.constantTimeEqual(record.idTokenDigest, IDTokenVerification.digest(of: idToken))
        else { return nil }
        return record
    }

    /// This token with `verification` recorded for its current ID token. Made by the verifier
    /// (TokenVaultIDToken) after its checks passed; apps cannot mark an ID token verified.
    package func recordingIDTokenVerification(
        algorithm: String, keyID: String?, issuer: String, audience: String, nonceChecked: Bool, at date: Date
    ) -> OAuthToken {
        guard let idToken else { return self }
        var token = self
        token.idTokenVerificationRecord = IDTokenVerification(
            algorithm: algorithm, keyID: keyID, issuer: issuer, audience: audience, nonceChecked: nonceChecked,
            verifiedAt: Self.wholeSeconds(date), idTokenDigest: IDTokenVerification.digest(of: idToken))
        return token
    }

    /// The granted scopes as a set (split as ``scopes`` splits them).
    public var scopeSet: Set<String> { Set(scopes) }

    /// Whether every scope in `required` was granted.
    public func hasScopes(_ required: some Sequence<String>) -> Bool {
        scopeSet.isSuperset(of: required)
    }
}
