/// A JWS algorithm that a DPoP key signs its proofs with (RFC 9449 §4.2): `ES256` (ECDSA on
/// P-256 with SHA-256), which every DPoP server accepts, or `EdDSA` (Ed25519), where the server's
/// metadata lists it in `dpop_signing_alg_values_supported`.
public struct DPoPAlgorithm: Sendable, Hashable, CustomStringConvertible {
    /// The `alg` value of the proof's header, as JOSE names it.
    public let name: String

    private init(name: String) { self.name = name }

    /// ECDSA using P-256 and SHA-256 (RFC 7518 §3.4); signatures are `r || s`, 64 bytes.
    public static let es256 = DPoPAlgorithm(name: "ES256")
    /// Ed25519 (RFC 8037).
    public static let edDSA = DPoPAlgorithm(name: "EdDSA")

    /// Every algorithm TokenVault signs with, in order of preference.
    public static let all: [DPoPAlgorithm] = [.es256, .edDSA]

    /// The algorithm named `name` (`ES256`, `EdDSA`; case as JOSE spells it), or `nil`.
    package init?(named name: String) {
        guard let known = Self.all.first(where: { $0.name == name }) else { return nil }
        self = known
    }

    /// The algorithm to use with a server whose metadata lists `supported`
    /// (`dpop_signing_alg_values_supported`): ES256 when listed (or when the list is absent or
    /// empty, since every DPoP server takes it), else the first TokenVault knows, else `nil`.
    package static func preferred(among supported: [String]?) -> DPoPAlgorithm? {
        guard let supported, !supported.isEmpty else { return .es256 }
        return all.first { supported.contains($0.name) }
    }

    public var description: String { name }
}
