#if IDTokenVerification  // built with the package trait IDTokenVerification; see Package.swift
/// Why an ID token was refused: the ``underlying`` of the `VaultError` (code `integrityFailure`)
/// that ``IDTokenVerifier`` throws. Its message names the check that failed, never the token.
public struct IDTokenVerificationError: Error, Sendable, CustomStringConvertible {
    /// The check that failed. New reasons may be added; switch with a `default`.
    public struct Reason: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        public var description: String { name }

        /// Not a compact JWS of three base64url parts with JSON header and payload.
        public static let malformed = Reason("malformed")
        /// `alg` is `none`, an HMAC algorithm, or one this verifier does not take, or does not fit the key.
        public static let algorithm = Reason("algorithm")
        /// The header names its own key (`jwk`, `jku`, `x5u`, `x5c`) or a critical extension (`crit`).
        public static let keyInHeader = Reason("key-in-header")
        /// No key of the issuer's JWKS has the token's `kid`, even after fetching the set again.
        public static let unknownKey = Reason("unknown-key")
        /// The issuer's JWKS could not be read as a key set.
        public static let keySet = Reason("key-set")
        /// The signature does not verify with the issuer's key (a tampered payload lands here too).
        public static let signature = Reason("signature")
        /// `iss` is not the issuer.
        public static let issuer = Reason("issuer")
        /// The client id is not in `aud`, or `azp` names another client.
        public static let audience = Reason("audience")
        /// `exp` has passed.
        public static let expired = Reason("expired")
        /// `iat` is in the future.
        public static let issuedInFuture = Reason("issued-in-future")
        /// The login's `nonce` is missing or different.
        public static let nonce = Reason("nonce")
        /// A required claim (`sub`, `exp`, `iat`) is missing or of the wrong type.
        public static let missingClaim = Reason("missing-claim")
    }

    /// The check that failed.
    public let reason: Reason
    /// What failed, for a person; never the token or a claim's full value.
    public let message: String

    init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    public var description: String { "IDTokenVerificationError(\(reason)): \(message)" }
}
#endif
