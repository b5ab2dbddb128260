#if DPoP  // built with the package trait DPoP (swift-crypto); see Package.swift
import TokenVault

/// DPoP signing for TokenVault (RFC 9449): install it once at start, and DPoP-bound entries can
/// make keys and sign proofs, for token requests and resource requests alike.
///
/// ```swift
/// import TokenVaultDPoP
/// DPoP.install()
/// ```
///
/// The curve code is swift-crypto's (BoringSSL on Linux): ES256 with P-256 and EdDSA with
/// Ed25519. It lives in this product so that a program that uses only `TokenVault` builds none
/// of it; such a program that meets a DPoP-bound entry gets a clear `configurationError`.
public enum DPoP: Sendable {
    /// Registers swift-crypto's signer with TokenVault for this process. Idempotent.
    public static func install() {
        DPoPSigners.register(CryptoDPoPSigner())
    }
}
#endif
