#if DPoP  // built with the package trait DPoP (swift-crypto); see Package.swift
import Crypto
import Foundation
import TokenVault

/// ``DPoPSigning`` with swift-crypto: P-256 (ES256) and Ed25519 (EdDSA). Private keys leave
/// swift-crypto only into secure memory (``SecretBytes``), to be sealed in their entry.
struct CryptoDPoPSigner: DPoPSigning {
    var algorithms: [DPoPAlgorithm] { [.es256, .edDSA] }

    func generate(_ algorithm: DPoPAlgorithm) throws -> (privateKey: SecretBytes, publicJWK: [String: String]) {
        switch algorithm {
        case .es256:
            let key = P256.Signing.PrivateKey()
            return (try secret(key.rawRepresentation), Self.jwk(key.publicKey))
        case .edDSA:
            let key = Curve25519.Signing.PrivateKey()
            return (try secret(key.rawRepresentation), Self.jwk(key.publicKey))
        default:
            throw VaultError(.configurationError, "TokenVaultDPoP cannot make \(algorithm) keys.")
        }
    }

    func publicJWK(of privateKey: SecretBytes, algorithm: DPoPAlgorithm) throws -> [String: String] {
        switch try prepared(privateKey, algorithm) {
        case .p256(let key): Self.jwk(key.publicKey)
        case .ed25519(let key): Self.jwk(key.publicKey)
        }
    }

    func prepare(_ privateKey: SecretBytes, algorithm: DPoPAlgorithm) throws -> any DPoPPreparedKey {
        try prepared(privateKey, algorithm)
    }

    private func prepared(_ privateKey: SecretBytes, _ algorithm: DPoPAlgorithm) throws -> PreparedKey {
        do {
            switch algorithm {
            case .es256: return .p256(try privateKey.withUnsafeBytes { try P256.Signing.PrivateKey(rawRepresentation: $0) })
            case .edDSA: return .ed25519(try privateKey.withUnsafeBytes { try Curve25519.Signing.PrivateKey(rawRepresentation: $0) })
            default: throw VaultError(.configurationError, "TokenVaultDPoP cannot sign with \(algorithm).")
            }
        } catch let error as VaultError {
            throw error
        } catch {
            throw VaultError(.integrityFailure, "The stored DPoP key is not a valid \(algorithm) private key.")
        }
    }

    private func secret(_ bytes: Data) throws -> SecretBytes {
        try SecretBytes(copying: bytes)
    }

    /// `{"kty":"EC","crv":"P-256","x":…,"y":…}` (RFC 7518 §6.2.1).
    static func jwk(_ key: P256.Signing.PublicKey) -> [String: String] {
        let raw = key.rawRepresentation  // x || y, 32 bytes each
        return ["kty": "EC", "crv": "P-256", "x": Base64URL.encode(raw.prefix(32)), "y": Base64URL.encode(raw.suffix(32))]
    }

    /// `{"kty":"OKP","crv":"Ed25519","x":…}` (RFC 8037 §2).
    static func jwk(_ key: Curve25519.Signing.PublicKey) -> [String: String] {
        ["kty": "OKP", "crv": "Ed25519", "x": Base64URL.encode(key.rawRepresentation)]
    }
}

/// A key in swift-crypto's form, built once per loaded ``DPoPKey``.
enum PreparedKey: DPoPPreparedKey {
    case p256(P256.Signing.PrivateKey)
    case ed25519(Curve25519.Signing.PrivateKey)

    func sign(_ message: [UInt8]) throws -> [UInt8] {
        switch self {
        case .p256(let key): Array(try key.signature(for: message).rawRepresentation)
        case .ed25519(let key): Array(try key.signature(for: message))
        }
    }
}
#endif
