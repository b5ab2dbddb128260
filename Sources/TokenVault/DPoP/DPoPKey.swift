// Owns: a DPoP key as the library holds it (private key in secure memory, public JWK,
// thumbprint) and the proofs it signs (RFC 9449 §4).
public import FoundationEssentials
internal import Synchronization

/// A DPoP key (RFC 9449): the private key that a DPoP-bound token is bound to, kept in secure
/// memory, with its public JWK and its RFC 7638 thumbprint (`jkt`).
///
/// A key is made inside the vault (``generate(_:)``), stored sealed in its entry by the backend
/// like the refresh token beside it (``Vault/saveToken(_:for:registration:dpopKey:)``), and used
/// only to sign: no API, command or output hands out the private key. `description`, `dump` and
/// logs show the algorithm and the thumbprint, never key material. The type is not `Codable`.
///
/// Signing needs the `TokenVaultDPoP` product installed (`DPoP.install()`); without it, making a
/// key or a proof throws `configurationError`.
public struct DPoPKey: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The proofs' `alg`.
    public let algorithm: DPoPAlgorithm
    /// The RFC 7638 SHA-256 thumbprint of the public key, base64url: the `jkt` a server binds
    /// the token to (`cnf.jkt`).
    public let thumbprint: String
    /// The public key's JWK members (`kty`, `crv`, `x` and, for EC, `y`).
    package let publicJWK: [String: String]
    /// The private key, in secure memory.
    package let privateKey: SecretBytes
    /// The key in the signer's form, made on first use and kept.
    private let prepared: PreparedBox

    package init(algorithm: DPoPAlgorithm, privateKey: SecretBytes, publicJWK: [String: String]) throws {
        guard publicJWK["kty"] != nil else {
            throw VaultError(.integrityFailure, "The stored DPoP key has no public key type.")
        }
        self.algorithm = algorithm
        self.privateKey = privateKey
        self.publicJWK = publicJWK
        self.thumbprint = Self.thumbprint(of: publicJWK)
        self.prepared = PreparedBox()
        self.headerPrefix = Self.header(algorithm: algorithm, jwk: publicJWK)
    }

    /// A new key for `algorithm`, made by the installed signer.
    /// - Throws: `configurationError` when the program did not install `TokenVaultDPoP`'s signer,
    ///   or the signer does not offer `algorithm`.
    public static func generate(_ algorithm: DPoPAlgorithm = .es256) throws -> DPoPKey {
        let signer = try DPoPSigners.required("A new DPoP key")
        guard signer.algorithms.contains(algorithm) else {
            throw VaultError(.configurationError, "The installed DPoP signer cannot make \(algorithm) keys.")
        }
        let (privateKey, jwk) = try signer.generate(algorithm)
        return try DPoPKey(algorithm: algorithm, privateKey: privateKey, publicJWK: jwk)
    }

    // MARK: Proofs

    /// A DPoP proof JWT (RFC 9449 §4.2) for one request: header `typ: dpop+jwt`, `alg` and the
    /// public `jwk`; claims `jti` (128 random bits), `htm`, `htu` (the URL without query and
    /// fragment), `iat`, and `nonce` and `ath` when given.
    ///
    /// - Parameters:
    ///   - method: the request's method (`htm`), such as `POST` or `GET`.
    ///   - url: the request's URL; its query and fragment are left out of `htu`.
    ///   - nonce: the server's latest `DPoP-Nonce`, if it asked for one.
    ///   - accessToken: for a request to a resource server, the access token sent with it: the
    ///     proof carries `ath`, its SHA-256, base64url (§4.2). `nil` for a token request.
    ///   - issuedAt: `iat`.
    /// - Throws: `configurationError` when no signer is installed; `invalidInput` for a method or
    ///   URL that cannot go in a proof.
    public func proof(
        method: String, url: URL, nonce: String? = nil, accessToken: String? = nil, issuedAt: Date = Date()
    ) throws -> String {
        guard !method.isEmpty, method.utf8.allSatisfy({ (0x41...0x5a).contains($0) || (0x61...0x7a).contains($0) || $0 == 0x2d })
        else { throw VaultError(.invalidInput, "A DPoP proof needs an HTTP method made of letters.") }
        let htu = try Self.targetURI(url)
        if let nonce, nonce.isEmpty || !nonce.utf8.allSatisfy({ $0 >= 0x21 && $0 <= 0x7e && $0 != 0x22 && $0 != 0x5c }) {
            throw VaultError(.invalidInput, "The server's DPoP nonce is not an RFC 9449 nonce (NQCHAR); it was not signed.")
        }
        try Sodium.ensureInitialized()
        var claims = "{\"jti\":\"\(Base64URL.encode(Sodium.randomBytes(16)))\",\"htm\":\"\(method)\",\"htu\":\(JSONText.string(htu)),\"iat\":\(Int64(issuedAt.timeIntervalSince1970.rounded(.down)))"
        if let nonce { claims += ",\"nonce\":\"\(nonce)\"" }
        if let accessToken { claims += ",\"ath\":\"\(Self.accessTokenHash(accessToken))\"" }
        claims += "}"
        let input = headerPrefix + "." + Base64URL.encode(Array(claims.utf8))
        let signature = try preparedKey().sign(Array(input.utf8))
        return input + "." + Base64URL.encode(signature)
    }

    /// `ath`: base64url(SHA-256(ASCII(access token))) (RFC 9449 §4.2).
    package static func accessTokenHash(_ accessToken: String) -> String {
        Base64URL.encode(Sodium.sha256(Array(accessToken.utf8)))
    }

    /// `htu`: the request's URI without its query and fragment (RFC 9449 §4.2).
    static func targetURI(_ url: URL) throws -> String {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false),
            let scheme = components.scheme?.lowercased(), scheme == "https" || scheme == "http", components.host?.isEmpty == false,
            components.user == nil, components.password == nil
        else {
            throw VaultError(.invalidInput, "A DPoP proof needs an http(s) URL with a host and no user info.")
        }
        components.scheme = scheme
        components.host = components.host?.lowercased()
        components.query = nil
        components.fragment = nil
        if components.path.isEmpty { components.path = "/" }
        guard let text = components.string else {
            throw VaultError(.invalidInput, "A DPoP proof's URL could not be written out.")
        }
        return text
    }

    /// The encoded JOSE header, the same for every proof of this key.
    private let headerPrefix: String

    private static func header(algorithm: DPoPAlgorithm, jwk: [String: String]) -> String {
        let header = "{\"typ\":\"dpop+jwt\",\"alg\":\"\(algorithm.name)\",\"jwk\":\(canonicalJWK(jwk))}"
        return Base64URL.encode(Array(header.utf8))
    }

    private func preparedKey() throws -> any DPoPPreparedKey {
        if let ready = prepared.value.withLock({ $0 }) { return ready }
        let signer = try DPoPSigners.required("A DPoP-bound request")
        let ready = try signer.prepare(privateKey, algorithm: algorithm)
        prepared.value.withLock { $0 = ready }
        return ready
    }

    // MARK: Thumbprint

    /// The RFC 7638 thumbprint of a JWK: SHA-256 of its required members (for EC `crv`, `kty`,
    /// `x`, `y`; for OKP `crv`, `kty`, `x`; for RSA `e`, `kty`, `n`) as JSON in lexicographic
    /// order without white space, base64url.
    package static func thumbprint(of jwk: [String: String]) -> String {
        let required: [String]
        switch jwk["kty"] {
        case "EC": required = ["crv", "kty", "x", "y"]
        case "OKP": required = ["crv", "kty", "x"]
        case "RSA": required = ["e", "kty", "n"]
        default: required = jwk.keys.sorted()
        }
        var members: [String: String] = [:]
        for name in required { members[name] = jwk[name] ?? "" }
        return Base64URL.encode(Sodium.sha256(Array(canonicalJWK(members).utf8)))
    }

    /// `{"crv":"P-256","kty":"EC",…}`: members sorted, no white space.
    static func canonicalJWK(_ jwk: [String: String]) -> String {
        "{" + jwk.keys.sorted().map { "\(JSONText.string($0)):\(JSONText.string(jwk[$0] ?? ""))" }.joined(separator: ",") + "}"
    }

    /// The public key as a JWK (JSON), for a server's registration or a test's verifier.
    public var publicJWKJSON: String { Self.canonicalJWK(publicJWK) }

    // MARK: Never the key

    public static func == (lhs: DPoPKey, rhs: DPoPKey) -> Bool {
        lhs.algorithm == rhs.algorithm && lhs.thumbprint == rhs.thumbprint
    }

    public var description: String { "DPoPKey(\(algorithm), jkt: \(thumbprint))" }
    public var debugDescription: String { description }
    public var customMirror: Mirror {
        Mirror(self, children: ["algorithm": algorithm.name, "thumbprint": thumbprint], displayStyle: .struct)
    }
}

/// The signer's form of a key, shared by the copies of one ``DPoPKey``.
private final class PreparedBox: Sendable {
    let value = Mutex<(any DPoPPreparedKey)?>(nil)
}

/// base64url without padding (RFC 4648 §5), as JOSE writes it.
///
/// Written over bytes rather than through Foundation's base64 and three `replacingOccurrences`:
/// on Linux those went through NSString and took three quarters of a proof's CPU time (perf,
/// `tokenvault-bench dpop`), and a decoded private key then passed through three Strings.
package enum Base64URL {
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The 6-bit value of each base64url character, 0xFF for every other byte.
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = UInt8(index) }
        return table
    }()

    package static func encode(_ bytes: some Collection<UInt8>) -> String {
        if let text = bytes.withContiguousStorageIfAvailable({ encode(buffer: UnsafeRawBufferPointer($0)) }) { return text }
        return Array(bytes).withUnsafeBytes { encode(buffer: $0) }
    }

    private static func encode(buffer input: UnsafeRawBufferPointer) -> String {
        let count = input.count
        guard count > 0 else { return "" }
        let length = (count * 4 + 2) / 3
        return alphabet.withUnsafeBufferPointer { alphabet in
            String(unsafeUninitializedCapacity: length) { output in
                var read = 0
                var written = 0
                while read + 3 <= count {
                    let value = UInt32(input[read]) << 16 | UInt32(input[read + 1]) << 8 | UInt32(input[read + 2])
                    output[written] = alphabet[Int(value >> 18)]
                    output[written + 1] = alphabet[Int(value >> 12 & 0x3F)]
                    output[written + 2] = alphabet[Int(value >> 6 & 0x3F)]
                    output[written + 3] = alphabet[Int(value & 0x3F)]
                    read += 3
                    written += 4
                }
                switch count - read {
                case 1:
                    let value = UInt32(input[read]) << 16
                    output[written] = alphabet[Int(value >> 18)]
                    output[written + 1] = alphabet[Int(value >> 12 & 0x3F)]
                    written += 2
                case 2:
                    let value = UInt32(input[read]) << 16 | UInt32(input[read + 1]) << 8
                    output[written] = alphabet[Int(value >> 18)]
                    output[written + 1] = alphabet[Int(value >> 12 & 0x3F)]
                    output[written + 2] = alphabet[Int(value >> 6 & 0x3F)]
                    written += 3
                default: break
                }
                return written
            }
        }
    }

    /// The bytes of unpadded base64url `text`, or `nil` for any other character (`=`, `+`, `/`,
    /// white space), a length no encoding has (4n + 1), or unused bits that are not zero.
    package static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { input -> [UInt8]? in
            let count = input.count
            guard count % 4 != 1 else { return nil }
            var output = [UInt8]()
            output.reserveCapacity(count * 3 / 4)
            var accumulator: UInt32 = 0
            var bits = 0
            for character in input {
                let value = values[Int(character)]
                guard value != 0xFF else { return nil }
                accumulator = accumulator << 6 | UInt32(value)
                bits += 6
                if bits >= 8 {
                    bits -= 8
                    output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                    accumulator &= (1 << UInt32(bits)) - 1
                }
            }
            // The last character's unused low bits must be zero (RFC 4648 §3.5: canonical).
            guard accumulator == 0 else { return nil }
            return output
        }
    }
}

/// A JSON string literal.
enum JSONText {
    static func string(_ value: String) -> String {
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20: out += "\\u00" + hexString([UInt8(scalar.value)])
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
