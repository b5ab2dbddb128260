#if IDTokenVerification  // built with the package trait IDTokenVerification; see Package.swift
public import Foundation
import JWTKit
public import TokenVault

/// Verifies OpenID Connect ID tokens (OpenID Connect Core §3.1.3.7) against the issuer's JSON Web
/// Key Set, so that their claims can be trusted: who logged in (`sub`), for which client, when.
///
/// In order, for each ID token:
/// 1. The header: `alg` must be an RSA or ECDSA signature algorithm (RS256, ES256, and RS384,
///    RS512, PS256, PS384, PS512, ES384, ES512); `none` and the HMAC algorithms are refused (an
///    HMAC keyed with the public key is the classic algorithm-confusion forgery). A header that
///    names its own key (`jwk`, `jku`, `x5u`, `x5c`) or a critical extension (`crit`) is refused:
///    keys come from the issuer's `jwks_uri` only.
/// 2. The key: the one with the token's `kid` in the key set fetched from `jwks_uri` over this
///    vault's transport (``TokenEndpointClient``: the same CA bundle, client certificate, proxy
///    rules and deadline as the token endpoint), kept for later tokens. A `kid` the kept set lacks
///    fetches the set again, once (the issuer rotated its keys); still unknown, it is refused. Its
///    type and curve must fit `alg`, and its `alg` and `use`, when present, too.
/// 3. The signature, checked by jwt-kit (on swift-crypto); nothing here computes one.
/// 4. The claims: `iss` equal to the issuer; the client id in `aud`, and `azp`, if present (it
///    must be, with several audiences), equal to it; `exp` not passed and `iat` not in the future,
///    both within ``clockSkew``; `sub` present; and `nonce` equal to the login's when one was sent.
///
/// A refusal is a `VaultError` with code `integrityFailure` (exit 5 for `vault login`) whose
/// `underlying` is an ``IDTokenVerificationError`` naming the check; the key set's own failures
/// are the transport's errors (`networkFailure`, `httpError`). No message holds the token.
///
/// One verifier per issuer and client; keep it for the life of the app so that the key set is
/// fetched once. It is an actor: tasks may share it.
public actor IDTokenVerifier {
    /// The issuer that `iss` must equal, exactly.
    public nonisolated let issuer: String
    /// The client id that `aud` must hold.
    public nonisolated let clientID: String
    /// Where the issuer publishes its signing keys.
    public nonisolated let jwksURI: URL
    /// How far this machine's clock may be from the issuer's: `exp` may have passed and `iat` may
    /// be ahead by this much. 60 s by default, the leeway TokenVault gives token expiry.
    public nonisolated let clockSkew: TimeInterval

    private let client: TokenEndpointClient
    /// The keys of the last fetched key set, as JSON objects; `nil` before the first fetch.
    private var keys: [[String: JSONValue]]?

    /// The signature algorithms taken, with the key type (and curve) each needs.
    static let algorithms: [String: (keyType: String, curve: String?)] = [
        "RS256": ("RSA", nil), "RS384": ("RSA", nil), "RS512": ("RSA", nil),
        "PS256": ("RSA", nil), "PS384": ("RSA", nil), "PS512": ("RSA", nil),
        "ES256": ("EC", "P-256"), "ES384": ("EC", "P-384"), "ES512": ("EC", "P-521"),
    ]

    /// - Parameters:
    ///   - issuer: the issuer identifier that `iss` must equal, as its metadata states it.
    ///   - clientID: this client's id, which `aud` must hold.
    ///   - jwksURI: the issuer's `jwks_uri` (`https`, loopback aside).
    ///   - client: sends the key-set request (its transport, TLS and deadline).
    ///   - clockSkew: see ``clockSkew``; from 0 to 300 s.
    /// - Throws: `configurationError` for a `jwksURI` that is not `https` (loopback aside), an
    ///   empty issuer or client id, or a clock skew out of range.
    public init(issuer: String, clientID: String, jwksURI: URL, client: TokenEndpointClient = TokenEndpointClient(), clockSkew: TimeInterval = 60)
        throws
    {
        try ClientRegistration.checkEndpoint(jwksURI, role: "jwks_uri")
        guard !issuer.isEmpty, !clientID.isEmpty else {
            throw VaultError(.configurationError, "An ID-token verifier needs the issuer and the client id.")
        }
        guard clockSkew >= 0, clockSkew <= 300 else {
            throw VaultError(.configurationError, "The ID-token verifier's clock skew must be from 0 to 300 seconds.")
        }
        self.issuer = issuer
        self.clientID = clientID
        self.jwksURI = jwksURI
        self.client = client
        self.clockSkew = clockSkew
    }

    /// A verifier for the ID tokens of `registration`, which must have come from discovery with a
    /// `jwks_uri` (``ClientRegistration/metadata``): its issuer, its client id, its key set.
    /// - Throws: `configurationError` when the registration has no metadata or no `jwks_uri`.
    public init(registration: ClientRegistration, client: TokenEndpointClient = TokenEndpointClient(), clockSkew: TimeInterval = 60) throws {
        guard let metadata = registration.metadata, let jwksURI = metadata.jwksURI else {
            throw VaultError(
                .configurationError,
                "The registration has no jwks_uri (it was not made by discovery, or the issuer publishes no keys), so its ID tokens cannot be verified.")
        }
        try self.init(
            issuer: metadata.issuer.absoluteString, clientID: registration.clientID, jwksURI: jwksURI, client: client, clockSkew: clockSkew)
    }

    /// `token` with its ID token verified and the verification recorded
    /// (``OAuthToken/verifiedIDTokenClaims`` then holds the claims). Save the result.
    /// - Parameter nonce: the `nonce` the login sent (``AuthorizationCodeLogin/nonce``), or `nil`
    ///   when it sent none (the device grant, a refresh): then a `nonce` claim is not checked.
    /// - Throws: `invalidInput` when `token` has no ID token; `integrityFailure` with an
    ///   ``IDTokenVerificationError`` naming the failed check; the transport's errors when the key
    ///   set cannot be fetched.
    public func verify(token: OAuthToken, nonce: String?, now: Date = Date()) async throws -> OAuthToken {
        guard let idToken = token.idToken else {
            throw VaultError(.invalidInput, "The token holds no ID token to verify.")
        }
        let checked = try await verify(idToken, nonce: nonce, now: now)
        return token.recordingIDTokenVerification(
            algorithm: checked.algorithm, keyID: checked.keyID, issuer: issuer, audience: clientID, nonceChecked: nonce != nil, at: now)
    }

    /// Verifies `idToken` and returns its claims, the key's `kid` and the algorithm.
    /// - Throws: `integrityFailure` with an ``IDTokenVerificationError`` naming the failed check;
    ///   the transport's errors when the key set cannot be fetched.
    package func verify(_ idToken: String, nonce: String?, now: Date = Date()) async throws -> (
        claims: [String: JSONValue], keyID: String?, algorithm: String
    ) {
        let parts = idToken.split(separator: ".", omittingEmptySubsequences: false)
        guard idToken.utf8.count <= 64 * 1024, parts.count == 3, let header = Self.object(parts[0]), Self.object(parts[1]) != nil
        else {
            throw refusal(.malformed, "is not a signed JWT (three base64url parts, with a JSON header and payload)")
        }
        guard case .string(let algorithm)? = header["alg"] else {
            throw refusal(.algorithm, "names no signature algorithm (alg)")
        }
        guard let expected = Self.algorithms[algorithm] else {
            let shown = Self.printable(algorithm)
            if algorithm.lowercased() == "none" { throw refusal(.algorithm, "is unsigned (alg: none)") }
            if algorithm.uppercased().hasPrefix("HS") {
                throw refusal(.algorithm, "is signed with \(shown), a shared-secret algorithm; an ID token from a key set must be signed with RS256, ES256 or another RSA or ECDSA algorithm")
            }
            throw refusal(.algorithm, "is signed with \(shown), which this verifier does not take (RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512)")
        }
        if let named = ["jwk", "jku", "x5u", "x5c", "crit"].first(where: { header[$0] != nil }) {
            throw refusal(
                .keyInHeader,
                named == "crit"
                    ? "has a critical header extension (crit) this verifier does not know"
                    : "names its own key in its header (\(named)); keys are taken from the issuer's jwks_uri only")
        }
        guard parts[2].isEmpty == false else { throw refusal(.signature, "has no signature") }
        var keyID: String?
        if let value = header["kid"] {
            guard case .string(let text) = value else { throw refusal(.malformed, "has a kid that is not a string") }
            keyID = text
        }
        let key = try await key(keyID: keyID, algorithm: algorithm, expected: expected)

        let claims: [String: JSONValue]
        do {
            let jwk = try JSONDecoder().decode(JWK.self, from: try JSONEncoder().encode(key))
            let collection = JWTKeyCollection()
            try await collection.add(jwk: jwk)
            claims = try await collection.verify(idToken, as: Claims.self).values
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            throw refusal(.signature, "does not verify with the issuer's key \(Self.printable(keyID ?? "(no kid)")): its signature or its content was changed")
        } catch {
            throw refusal(.signature, "could not be verified with the issuer's key \(Self.printable(keyID ?? "(no kid)")) (\(algorithm))")
        }
        try check(claims, nonce: nonce, now: now)
        return (claims, keyID, algorithm)
    }

    /// The claims checks of OpenID Connect Core §3.1.3.7, on a payload whose signature verified.
    private func check(_ claims: [String: JSONValue], nonce: String?, now: Date) throws {
        guard case .string(let stated)? = claims["iss"] else { throw refusal(.issuer, "names no issuer (iss)") }
        guard stated == issuer else {
            throw refusal(.issuer, "was issued by \(Self.printable(stated)), not by \(Self.printable(issuer)), the registration's issuer")
        }
        let audiences: [String]
        switch claims["aud"] {
        case .string(let one)?: audiences = [one]
        case .array(let many)?:
            audiences = many.compactMap { if case .string(let text) = $0 { text } else { nil } }
        default: throw refusal(.audience, "names no audience (aud)")
        }
        guard audiences.contains(clientID) else {
            throw refusal(.audience, "is meant for another client: its audience (aud) does not hold the client id \(Self.printable(clientID))")
        }
        switch claims["azp"] {
        case .string(let party)? where party != clientID:
            throw refusal(.audience, "was issued to another authorized party (azp), not \(Self.printable(clientID))")
        case nil where audiences.count > 1:
            throw refusal(.audience, "has several audiences and no authorized party (azp) naming this client")
        default: break
        }
        guard case .string(let subject)? = claims["sub"], !subject.isEmpty else {
            throw refusal(.missingClaim, "names no subject (sub)")
        }
        guard case .number(let exp)? = claims["exp"], exp.isFinite else { throw refusal(.missingClaim, "has no expiry (exp)") }
        guard case .number(let iat)? = claims["iat"], iat.isFinite else { throw refusal(.missingClaim, "has no issue time (iat)") }
        let seconds = now.timeIntervalSince1970
        guard seconds < exp + clockSkew else {
            throw refusal(.expired, "expired at \(Self.timestamp(exp)) (\(Int(clockSkew)) s of clock skew allowed)")
        }
        guard iat <= seconds + clockSkew else {
            throw refusal(.issuedInFuture, "was issued in the future, at \(Self.timestamp(iat)) (\(Int(clockSkew)) s of clock skew allowed); check this machine's clock")
        }
        if let nonce {
            guard case .string(let carried)? = claims["nonce"] else {
                throw refusal(.nonce, "carries no nonce, though the login sent one")
            }
            guard Self.same(carried, nonce) else {
                throw refusal(.nonce, "carries another login's nonce: it was not issued for this login (a replayed or injected ID token)")
            }
        }
    }

    /// The key for `keyID` that fits `algorithm`, from the kept key set or, if it lacks the key,
    /// from the key set fetched again once.
    private func key(keyID: String?, algorithm: String, expected: (keyType: String, curve: String?)) async throws -> [String: JSONValue] {
        var fetched = false
        if keys == nil {
            keys = try await fetchKeys()
            fetched = true
        }
        while true {
            let candidates = (keys ?? []).filter { key in
                if let keyID { return key["kid"] == .string(keyID) }
                return Self.fits(key, algorithm: algorithm, expected: expected)
            }
            if let keyID, let key = candidates.first {
                guard Self.fits(key, algorithm: algorithm, expected: expected) else {
                    throw refusal(.algorithm, "is signed with \(algorithm), which the issuer's key \(Self.printable(keyID)) is not for")
                }
                return key
            }
            if keyID == nil {
                if candidates.count == 1 { return candidates[0] }
                if candidates.count > 1 {
                    throw refusal(.unknownKey, "names no key (kid), and the issuer's key set holds several \(algorithm) keys")
                }
            }
            guard !fetched else {
                let named = keyID.map { "the key \(Self.printable($0))" } ?? "no key (kid)"
                throw refusal(.unknownKey, "names \(named), which the issuer's key set at \(ClientRegistration.safe(jwksURI)) does not hold, even fetched again")
            }
            // The issuer may have rotated its keys since the set was kept: fetch it again, once.
            keys = try await fetchKeys()
            fetched = true
        }
    }

    private func fetchKeys() async throws -> [[String: JSONValue]] {
        let (body, _) = try await client.get(jwksURI, role: "jwks_uri")
        guard case .object(let set)? = try? JSONDecoder().decode(JSONValue.self, from: body), case .array(let entries)? = set["keys"] else {
            throw refusal(.keySet, "cannot be checked: the document at \(ClientRegistration.safe(jwksURI)) is not a JSON Web Key Set")
        }
        return entries.compactMap { if case .object(let key) = $0 { key } else { nil } }
    }

    /// Whether `key` may verify `algorithm`: its `kty` (and `crv`) fit, and its `alg` and `use`,
    /// when present, agree.
    static func fits(_ key: [String: JSONValue], algorithm: String, expected: (keyType: String, curve: String?)) -> Bool {
        guard key["kty"] == .string(expected.keyType) else { return false }
        if let curve = expected.curve, key["crv"] != .string(curve) { return false }
        if let stated = key["alg"], stated != .string(algorithm) { return false }
        if let use = key["use"], use != .string("sig") { return false }
        return true
    }

    private func refusal(_ reason: IDTokenVerificationError.Reason, _ what: String) -> VaultError {
        let detail = IDTokenVerificationError(reason, "The ID token \(what).")
        return VaultError(
            .integrityFailure, "The ID token was refused (\(reason)): it \(what). Its claims are not trusted.", underlying: detail)
    }

    /// A base64url segment decoded as a JSON object, or `nil`.
    static func object(_ segment: Substring) -> [String: JSONValue]? {
        var base64 = segment.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        guard base64.utf8.count % 4 != 1 else { return nil }
        if base64.utf8.count % 4 != 0 { base64 += String(repeating: "=", count: 4 - base64.utf8.count % 4) }
        guard let data = Data(base64Encoded: base64), case .object(let object)? = try? JSONDecoder().decode(JSONValue.self, from: data) else {
            return nil
        }
        return object
    }

    /// `text` fit for a message: printable ASCII, at most 100 characters.
    static func printable(_ text: String) -> String {
        let clean = text.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value < 0x7f }
        guard clean else { return "(unprintable)" }
        return text.count <= 100 ? text : String(text.prefix(100)) + "…"
    }

    static func timestamp(_ seconds: Double) -> String {
        guard seconds.isFinite, abs(seconds) < 1e11 else { return "(out of range)" }
        return ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: seconds))
    }

    /// Compares two strings without stopping at the first difference.
    static func same(_ left: String, _ right: String) -> Bool {
        let (a, b) = (Array(left.utf8), Array(right.utf8))
        guard a.count == b.count else { return false }
        return zip(a, b).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }
}

/// The payload as JSON, for jwt-kit; the claims are checked after the signature, by the verifier.
private struct Claims: JWTPayload {
    let values: [String: JSONValue]
    init(from decoder: any Decoder) throws { values = try [String: JSONValue](from: decoder) }
    func encode(to encoder: any Encoder) throws { try values.encode(to: encoder) }
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
#endif
