import FoundationEssentials

/// Names one credential: a service and an account within it.
///
/// A key cannot be built with an empty service or account, or with control characters,
/// bidirectional formatting characters (U+202A–U+202E, U+2066–U+2069) or U+FFFD in either; the
/// initializer throws ``VaultError/Code-swift.struct/invalidInput`` instead. Both parts are
/// normalised to Unicode NFC, so `"é"` typed precomposed or decomposed names the same entry in
/// every backend.
///
/// Names are UTF-8. Bytes that are not UTF-8 are refused where a key is made from bytes;
/// a `String` made from them with `String(decoding:as:)` holds U+FFFD, which is refused too, so
/// that `caf\xE8` and `caf\xE9` can never both become `caf\u{FFFD}` and overwrite each other.
/// Bidirectional overrides are refused because they make a name print as another one
/// (`vault list` would show `moc.elpmaxe` reversed into `example.com`).
///
/// A name read back from a store that another program wrote (or an older release) may still hold
/// such characters: ``description`` escapes them as `\u{…}`, so they are never printed as they
/// are.
public struct CredentialKey: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The account used when none is given.
    public static let defaultAccount = "default"
    /// The longest service or account accepted, in UTF-8 bytes.
    public static let maximumPartLength = 1024

    /// The service, such as `github` or `com.example.app`.
    public let service: String
    /// The account within the service, such as a user name; `default` when there is only one.
    public let account: String

    /// Makes a key, refusing empty parts, control characters, bidirectional formatting
    /// characters, U+FFFD and parts over 1 KiB.
    /// - Throws: ``VaultError`` with code `invalidInput`.
    public init(service: String, account: String = CredentialKey.defaultAccount) throws {
        self.service = try Self.validated(service, part: "service")
        self.account = try Self.validated(account, part: "account")
        try Self.refuseMisleading(self.service, part: "service")
        try Self.refuseMisleading(self.account, part: "account")
    }

    /// Makes a key from names given as bytes, such as command-line arguments or file names,
    /// refusing bytes that are not UTF-8 instead of repairing them, and then checking as
    /// ``init(service:account:)`` does.
    /// - Throws: ``VaultError`` with code `invalidInput`.
    package init(utf8Service service: some Collection<UInt8>, utf8Account account: some Collection<UInt8>) throws {
        guard let serviceText = String(validating: service, as: UTF8.self) else {
            throw VaultError(.invalidInput, "The service name is not valid UTF-8.")
        }
        guard let accountText = String(validating: account, as: UTF8.self) else {
            throw VaultError(.invalidInput, "The account name is not valid UTF-8.")
        }
        try self.init(service: serviceText, account: accountText)
    }

    /// A key for a name a store read back, which another program (or an older release) wrote:
    /// checked as a store must (not empty, no control characters, at most 1 KiB), but bidirectional
    /// formatting characters are let through so that the entry can still be listed (escaped).
    init(storedService service: String, account: String) throws {
        self.service = try Self.validated(service, part: "service")
        self.account = try Self.validated(account, part: "account")
    }

    /// The bidirectional formatting characters (Unicode's "Trojan Source" set, CVE-2021-42574):
    /// embeddings and overrides U+202A–U+202E, isolates U+2066–U+2069.
    static func isBidirectionalFormatting(_ scalar: Unicode.Scalar) -> Bool {
        (0x202A...0x202E).contains(scalar.value) || (0x2066...0x2069).contains(scalar.value)
    }

    private static func refuseMisleading(_ value: String, part: String) throws {
        if value.unicodeScalars.contains(where: isBidirectionalFormatting) {
            throw VaultError(
                .invalidInput,
                "The \(part) name must not contain bidirectional formatting characters (U+202A–U+202E, U+2066–U+2069), which make a name print as another one."
            )
        }
        if value.unicodeScalars.contains("\u{FFFD}") {
            throw VaultError(
                .invalidInput,
                "The \(part) name contains U+FFFD, the replacement character: it was probably made from bytes that are not UTF-8, which would collide with other names. Give the name in UTF-8."
            )
        }
    }

    /// `part` with control characters, bidirectional formatting characters and U+FFFD escaped as
    /// `\u{…}`, fit to print: a name read from a store is never printed as it is.
    ///
    /// This is the one escaping function for text that reaches a terminal: names read from a
    /// store, and everything a server says (an OAuth `error_description`, a device `user_code`).
    public static func escaped(_ part: String) -> String {
        if isPrintableASCII(part) { return part }
        var result = ""
        for scalar in part.unicodeScalars {
            if needsEscaping(scalar) {
                result += "\\u{\(String(scalar.value, radix: 16, uppercase: true))}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    /// Whether ``escaped(_:)`` escapes `scalar`: a control character (C0, DEL and C1, such as
    /// U+009B, the 8-bit CSI), a bidirectional formatting character or U+FFFD.
    static func needsEscaping(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.generalCategory == .control || isBidirectionalFormatting(scalar) || scalar == "\u{FFFD}"
    }

    /// The service, escaped to be printed (see ``escaped(_:)``).
    package var displayService: String { Self.escaped(service) }
    /// The account, escaped to be printed (see ``escaped(_:)``).
    package var displayAccount: String { Self.escaped(account) }

    /// Printable ASCII only (U+0020–U+007E): already in NFC, with no control, bidirectional or
    /// replacement character, so it needs neither normalising nor escaping. Most names are, and
    /// this check reads bytes instead of Unicode property tables (a `vault list` of 10,000 entries
    /// spent a tenth of its time in those tables).
    static func isPrintableASCII(_ value: String) -> Bool {
        value.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F }
    }

    private static func validated(_ value: String, part: String) throws -> String {
        let normalized = isPrintableASCII(value) ? value : String(decoding: value._nfcCodeUnits, as: UTF8.self)
        guard !normalized.isEmpty else {
            throw VaultError(.invalidInput, "The \(part) name must not be empty.")
        }
        guard normalized.utf8.count <= maximumPartLength else {
            throw VaultError(
                .invalidInput, "The \(part) name is longer than \(maximumPartLength) bytes."
            )
        }
        if !isPrintableASCII(normalized),
           normalized.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw VaultError(.invalidInput, "The \(part) name must not contain control characters.")
        }
        return normalized
    }

    public static func < (lhs: CredentialKey, rhs: CredentialKey) -> Bool {
        (lhs.service, lhs.account) < (rhs.service, rhs.account)
    }

    /// `service/account`, escaped to be printed (see ``escaped(_:)``).
    public var description: String { "\(displayService)/\(displayAccount)" }

    private enum CodingKeys: String, CodingKey { case service, account }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        try self.init(
            service: container.decode(String.self, forKey: .service),
            account: container.decode(String.self, forKey: .account)
        )
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(service, forKey: .service)
        try container.encode(account, forKey: .account)
    }
}
