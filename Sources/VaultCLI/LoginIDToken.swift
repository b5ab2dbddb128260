#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import FoundationEssentials
import TokenVault

/// `vault login`'s check of the ID token it got (issue 31 point 6), and how `vault get --json`
/// shows its claims. The verifier (jwt-kit, swift-crypto) is `vault-full`'s (``LoginIDTokenVerifying``)
/// and runs only here, in a login, which `vault` always hands to `vault-full`: `vault get` reads
/// the stored verification record and runs no cryptography.
enum LoginIDToken {
    /// `token` with its ID token verified and the verification recorded, when the registration
    /// knows the issuer's `jwks_uri`; else `token` as it is, with a note that its claims are
    /// unverified. A refused ID token ends the login (exit 5) and nothing is saved.
    static func verify(_ token: OAuthToken, registration: ClientRegistration, nonce: String?, client: TokenEndpointClient) async throws
        -> OAuthToken
    {
        guard token.idToken != nil else { return token }
        guard registration.metadata?.jwksURI != nil else {
            try Output.note(
                "The ID token was not verified: the registration has no jwks_uri (log in with --issuer to verify it). Its claims are stored as unverified.")
            return token
        }
        guard let verifier = LoginIDTokenVerifiers.current else {
            // Only a program built without jwt-kit gets here; `vault` hands every login over.
            throw VaultError(
                .configurationError, "This program cannot verify ID tokens (it has no jwt-kit); log in with vault-full. Nothing was saved.")
        }
        let verified: OAuthToken
        do {
            verified = try await verifier.verify(token, registration: registration, nonce: nonce, client: client)
        } catch let refusal as LoginIDTokenRefusal {
            let error = refusal.error
            throw VaultError(
                error.code,
                "\(error.message) The login's token was not saved. A wrong issuer or audience, or another login's nonce, means the answer was not meant for this login; an expired or future token, check this machine's clock.",
                underlying: error.underlying)
        }
        if let record = verified.idTokenVerification {
            let key = record.keyID.map { ", key \(Self.printable($0))" } ?? ""
            try Output.note(
                "Verified the ID token (\(record.algorithm)\(key) from the issuer's jwks_uri): signature, issuer, audience, expiry, issue time\(record.nonceChecked ? " and the login's nonce" : "; no nonce, as the device grant sends none").")
        }
        return verified
    }

    /// The ID token's fields for `vault get --json`: its claims, and whether they were verified.
    static func jsonFields(_ token: OAuthToken) -> [String: Any] {
        guard token.idToken != nil else { return ["id_token_claims": JSONNull(), "id_token_verified": JSONNull()] }
        let claims = token.unverifiedIDTokenClaims.map { foundation(.object($0)) } ?? JSONNull()
        guard let record = token.idTokenVerification else { return ["id_token_claims": claims, "id_token_verified": false] }
        return [
            "id_token_claims": claims,
            "id_token_verified": [
                "algorithm": record.algorithm, "key_id": record.keyID ?? JSONNull(), "issuer": record.issuer, "audience": record.audience,
                "nonce_checked": record.nonceChecked, "verified_at": Output.timestamp(record.verifiedAt),
            ] as [String: Any],
        ]
    }

    private static func foundation(_ value: JSONValue) -> Any {
        switch value {
        case .string(let text): text
        case .number(let number): number.rounded() == number && abs(number) < 1e15 ? Int64(number) as Any : number as Any
        case .bool(let flag): flag
        case .array(let values): values.map(foundation)
        case .object(let fields): fields.mapValues(foundation)
        case .null: JSONNull()
        }
    }

    private static func printable(_ text: String) -> String {
        text.count <= 100 && text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value < 0x7f }) ? text : "(unprintable)"
    }
}
#endif
