public import TokenVault
/// What a defaults migration should do. See ``Vault/migrateDefaults(plistAt:options:)``.
public struct MigrationOptions: Sendable {
    /// The vault service the tokens go to; `nil` means the plist's file name without `.plist`
    /// (for a suite, the suite name).
    public var service: String?
    /// The vault account the tokens go to.
    public var account: String
    /// The plist keys to take, exactly; `nil` means detect token values by name and content.
    public var keys: [String]?
    /// Replace a different token already stored under the target key. Off by default.
    public var overwrite: Bool
    /// Remove the migrated keys from the plist once the vault holds them and they read back
    /// correctly. The caller must decide; there is no default.
    public var removeSource: Bool
    /// Work out and report what would happen, and change nothing.
    public var dryRun: Bool

    public init(
        service: String? = nil,
        account: String = CredentialKey.defaultAccount,
        keys: [String]? = nil,
        overwrite: Bool = false,
        removeSource: Bool,
        dryRun: Bool = false
    ) {
        self.service = service
        self.account = account
        self.keys = keys
        self.overwrite = overwrite
        self.removeSource = removeSource
        self.dryRun = dryRun
    }
}
