// Owns: how a DPoP key is written inside its sealed entry (the `dpop` field).
import FoundationEssentials

/// The `dpop` field of a stored entry (see <doc:StoredTokenFormat>): the algorithm, the private
/// key (base64url), the public JWK and its thumbprint. It exists only inside the entry's sealed
/// bytes; ``DPoPKey`` itself is not `Codable`, so no public API can write a key out.
struct StoredDPoPKey: Codable, Sendable {
    var alg: String
    var d: String
    var jwk: [String: String]
    var jkt: String

    init(_ key: DPoPKey) {
        alg = key.algorithm.name
        d = key.privateKey.withUnsafeBytes { Base64URL.encode($0) }
        jwk = key.publicJWK
        jkt = key.thumbprint
    }

    func key() throws -> DPoPKey {
        guard let algorithm = DPoPAlgorithm(named: alg) else {
            throw VaultError(.unsupportedVersion, "The entry's DPoP key uses the algorithm \(alg.prefix(16)), which this release does not know.")
        }
        guard var bytes = Base64URL.decode(d), bytes.count == 32 else {
            throw VaultError(.integrityFailure, "The entry's DPoP key is not a \(algorithm) private key.")
        }
        defer { bytes.withUnsafeMutableBytes { Sodium.wipe($0) } }
        // The key this process loaded from the same fields before, if any (it is ready to sign).
        return try DPoPKeyCache.key(thumbprint: jkt, algorithm: algorithm, publicJWK: jwk, privateKey: bytes) {
            let key = try DPoPKey(algorithm: algorithm, privateKey: SecretBytes(copying: bytes), publicJWK: jwk)
            guard key.thumbprint == jkt else {
                throw VaultError(.integrityFailure, "The entry's DPoP key does not match its stored thumbprint.")
            }
            return key
        }
    }
}
