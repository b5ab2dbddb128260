// Owns: the seam between the core and the product that signs (TokenVaultDPoP, swift-crypto).
internal import Synchronization

/// What the core needs from the curve code: make a key, and sign with one. TokenVault itself does
/// no elliptic-curve arithmetic; the `TokenVaultDPoP` product implements this with swift-crypto
/// and registers it at start (`DPoP.install()`), as a backend registers with ``VaultBackends``.
/// A program that never installs it builds no curve code, and a DPoP-bound entry it meets is a
/// clear `configurationError` (``DPoPSigners/missing(_:)``), never a Bearer request.
///
/// `package`: only this package's products implement it, so no public API hands a private key to
/// code outside the package.
package protocol DPoPSigning: Sendable {
    /// The algorithms this signer can use.
    var algorithms: [DPoPAlgorithm] { get }
    /// A new private key for `algorithm`, in secure memory (P-256: the 32-byte scalar; Ed25519:
    /// the 32-byte seed), and its public key's JWK members (`kty`, `crv`, `x`, `y`).
    func generate(_ algorithm: DPoPAlgorithm) throws -> (privateKey: SecretBytes, publicJWK: [String: String])
    /// The public JWK members of a stored private key (to check it against the stored public key).
    func publicJWK(of privateKey: SecretBytes, algorithm: DPoPAlgorithm) throws -> [String: String]
    /// The key ready to sign: built once per loaded key and kept with it.
    func prepare(_ privateKey: SecretBytes, algorithm: DPoPAlgorithm) throws -> any DPoPPreparedKey
}

/// A private key in the signer's own form, ready to sign a JWS signing input.
package protocol DPoPPreparedKey: Sendable {
    /// The JWS signature of `message` (ES256: `r || s`, 64 bytes; EdDSA: 64 bytes).
    func sign(_ message: [UInt8]) throws -> [UInt8]
}

/// The DPoP signer this program registered, if any.
package enum DPoPSigners {
    private static let registry = Mutex<(any DPoPSigning)?>(nil)

    /// Makes `signer` the one every DPoP key of this process signs with.
    package static func register(_ signer: any DPoPSigning) {
        registry.withLock { $0 = signer }
    }

    /// The registered signer, or `nil`.
    package static var current: (any DPoPSigning)? { registry.withLock { $0 } }

    /// The registered signer.
    /// - Throws: ``missing(_:)`` when none is.
    package static func required(_ what: String) throws -> any DPoPSigning {
        guard let signer = current else { throw missing(what) }
        return signer
    }

    /// The error of a program that meets DPoP without a signer. It is thrown before anything is
    /// written or sent, so that a program can run the same work again elsewhere (`vault` hands it
    /// to `vault-full`).
    package static func missing(_ what: String) -> VaultError {
        VaultError(
            .configurationError,
            "\(what) needs a DPoP proof, and this program cannot sign one: link the TokenVaultDPoP product (package trait DPoP) and call DPoP.install() at start (vault-full does, and vault hands such commands to it). Nothing was sent.",
            underlying: SignerMissing())
    }

    /// Whether `error` is ``missing(_:)``'s.
    package static func isMissing(_ error: any Error) -> Bool {
        (error as? VaultError)?.underlying is SignerMissing
    }

    private struct SignerMissing: Error, Sendable {}
}
