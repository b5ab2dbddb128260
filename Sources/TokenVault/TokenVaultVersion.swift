/// The version of this release of TokenVault.
public enum TokenVaultVersion: Sendable {
    /// The semantic version, such as `0.1.0`.
    public static let current = "0.1.0"
}
