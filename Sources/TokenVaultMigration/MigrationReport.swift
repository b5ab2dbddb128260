public import TokenVault
/// What a defaults migration found and what became of each value. It never holds a secret:
/// values appear only as their kind and length.
public struct MigrationReport: Sendable, Codable, Equatable {
    /// What a plist key held, as far as the migration is concerned.
    public enum Role: String, Sendable, Codable, Hashable, CustomStringConvertible {
        /// A string holding an access token.
        case accessToken = "access-token"
        /// A string holding a refresh token.
        case refreshToken = "refresh-token"
        /// A string holding an OpenID Connect ID token.
        case idToken = "id-token"
        /// `Data`, a dictionary or a JSON string holding a whole token model.
        case tokenModel = "token-model"
        /// A date used as the token's expiry; not secret, so it stays in the plist.
        case expiry
        /// Not taken: a token-like name with a value that is not a token string (such as a
        /// `Bool`), or a string under a name that only looks token-related. The note says which.
        case notAToken = "not-a-token"

        public var description: String { rawValue }
    }

    /// What became of a plist key.
    public enum Fate: String, Sendable, Codable, Hashable, CustomStringConvertible {
        /// Written to the vault, read back, and removed from the plist.
        case migrated
        /// Written to the vault and read back; the plist was left as it was.
        case copied
        /// The vault already held this exact token; removed from the plist if asked to.
        case alreadyInVault = "already-in-vault"
        /// A dry run: this is what would be migrated.
        case wouldMigrate = "would-migrate"
        /// Left in the plist, untouched, for the reason given.
        case leftAlone = "left-alone"
        /// Named with `keys:` but not present in the plist.
        case notPresent = "not-present"

        public var description: String { rawValue }
    }

    /// One plist key that the migration looked at.
    public struct Item: Sendable, Codable, Equatable {
        /// The plist key.
        public var key: String
        /// What it held.
        public var role: Role
        /// Its value, redacted: kind and length only, such as `string, 40 characters`.
        public var value: String
        /// What became of it.
        public var fate: Fate
        /// The vault entry it went to, if any.
        public var entry: CredentialKey?
        /// Why, in words, when the fate needs explaining.
        public var note: String?
        /// For a value nested in arrays or dictionaries, the path to it from its top-level key
        /// (dictionary keys, and array positions written `[0]`); ``key`` then reads
        /// `accounts[0].accessToken`. `nil` for a top-level key.
        public var keyPath: [String]?

        package init(key: String, role: Role, value: String, fate: Fate, entry: CredentialKey? = nil, note: String? = nil) {
            self.key = key
            self.role = role
            self.value = value
            self.fate = fate
            self.entry = entry
            self.note = note
        }
    }

    /// The plist that was read.
    public var source: String
    /// Its format: `xml` or `binary`.
    public var format: String
    /// Whether this was a dry run (nothing changed).
    public var dryRun: Bool
    /// Whether the plist was rewritten without the migrated keys.
    public var sourceRewritten: Bool
    /// The plist keys that held, or looked like they held, tokens, and what became of each.
    public var items: [Item]
    /// The vault entries written (or, in a dry run, that would be written).
    public var entries: [CredentialKey]
    /// The other keys of the plist, which were left exactly as they were.
    public var untouchedKeys: [String]
    /// Things the person running the migration should know, in words.
    public var warnings: [String]

    package init(
        source: String, format: String, dryRun: Bool, sourceRewritten: Bool, items: [Item], entries: [CredentialKey],
        untouchedKeys: [String], warnings: [String]
    ) {
        self.source = source
        self.format = format
        self.dryRun = dryRun
        self.sourceRewritten = sourceRewritten
        self.items = items
        self.entries = entries
        self.untouchedKeys = untouchedKeys
        self.warnings = warnings
    }

    /// Whether the migration found nothing to move.
    public var isEmpty: Bool { entries.isEmpty }

    private enum CodingKeys: String, CodingKey {
        case source, format, items, entries, warnings
        case dryRun = "dry_run"
        case sourceRewritten = "source_rewritten"
        case untouchedKeys = "untouched_keys"
    }
}
