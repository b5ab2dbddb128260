public import FoundationEssentials

/// What was checked when an ID token was verified, and when: kept with the token (the stored
/// form's `id_token_verified`), so that ``OAuthToken/verifiedIDTokenClaims`` answers without
/// cryptography, on the cold path of `vault get`.
///
/// "Verified" means: the signature checked with a key from the issuer's `jwks_uri` (RS256, ES256
/// and the other RSA and ECDSA algorithms, never `none` or HMAC), the `iss` equal to the issuer
/// the registration was discovered from, the client id in `aud` (and `azp`), `exp` not passed and
/// `iat` not in the future (within the verifier's clock skew), and the login's `nonce` when the
/// login sent one (``nonceChecked``). It says nothing about the ID token later than
/// ``verifiedAt``: its `exp` may have passed since, which does not make the claims false.
///
/// Only the verifier makes one (TokenVaultIDToken's `IDTokenVerifier`); it is bound to the ID
/// token by its SHA-256, so a record never vouches for another ID token.
public struct IDTokenVerification: Sendable, Hashable, Codable {
    /// The JWS algorithm of the signature, such as `RS256` or `ES256`.
    public let algorithm: String
    /// The `kid` of the key that verified it, if the key had one.
    public let keyID: String?
    /// The issuer the token was checked against (its `iss`).
    public let issuer: String
    /// The client id found in its `aud`.
    public let audience: String
    /// Whether the login's `nonce` was checked (the code grant sends one; the device grant cannot).
    public let nonceChecked: Bool
    /// When it was verified.
    public let verifiedAt: Date
    /// SHA-256 of the ID token it vouches for.
    let idTokenDigest: [UInt8]

    init(algorithm: String, keyID: String?, issuer: String, audience: String, nonceChecked: Bool, verifiedAt: Date, idTokenDigest: [UInt8]) {
        self.algorithm = algorithm
        self.keyID = keyID
        self.issuer = issuer
        self.audience = audience
        self.nonceChecked = nonceChecked
        self.verifiedAt = verifiedAt
        self.idTokenDigest = idTokenDigest
    }

    static func digest(of idToken: String) -> [UInt8] { Sodium.sha256(Array(idToken.utf8)) }

    private enum CodingKeys: String, CodingKey {
        case algorithm = "alg"
        case keyID = "kid"
        case issuer = "iss"
        case audience = "aud"
        case nonceChecked = "nonce"
        case verifiedAt = "at"
        case idTokenDigest = "sha256"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let digest = try container.decode(String.self, forKey: .idTokenDigest)
        guard let bytes = Self.bytes(hex: digest), bytes.count == 32 else {
            throw VaultError(.integrityFailure, "The stored ID-token verification record holds no valid digest.")
        }
        self.init(
            algorithm: try container.decode(String.self, forKey: .algorithm), keyID: try container.decodeIfPresent(String.self, forKey: .keyID),
            issuer: try container.decode(String.self, forKey: .issuer), audience: try container.decode(String.self, forKey: .audience),
            nonceChecked: try container.decode(Bool.self, forKey: .nonceChecked),
            verifiedAt: Date(timeIntervalSince1970: try container.decode(Double.self, forKey: .verifiedAt)), idTokenDigest: bytes)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(algorithm, forKey: .algorithm)
        try container.encodeIfPresent(keyID, forKey: .keyID)
        try container.encode(issuer, forKey: .issuer)
        try container.encode(audience, forKey: .audience)
        try container.encode(nonceChecked, forKey: .nonceChecked)
        try container.encode(Int64(verifiedAt.timeIntervalSince1970.rounded()), forKey: .verifiedAt)
        try container.encode(hexString(idTokenDigest), forKey: .idTokenDigest)
    }

    private static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = nibble(digits[index]), let low = nibble(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    private static func nibble(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        default: nil
        }
    }
}
