import Foundation

/// Names one credential: a service and an account within it.
///
/// A key cannot be built with an empty service or account, or with control characters in
/// either; the initializer throws ``VaultError/Code-swift.struct/invalidInput`` instead. Both parts are
/// normalised to Unicode NFC, so `"é"` typed precomposed or decomposed names the same entry in
/// every backend.
public struct CredentialKey: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The account used when none is given.
    public static let defaultAccount = "default"
    /// The longest service or account accepted, in UTF-8 bytes.
    public static let maximumPartLength = 1024

    /// The service, such as `github` or `com.example.app`.
    public let service: String
    /// The account within the service, such as a user name; `default` when there is only one.
    public let account: String

    /// Makes a key, refusing empty parts, control characters and parts over 1 KiB.
    /// - Throws: ``VaultError`` with code `invalidInput`.
    public init(service: String, account: String = CredentialKey.defaultAccount) throws {
        self.service = try Self.validated(service, part: "service")
        self.account = try Self.validated(account, part: "account")
    }

    private static func validated(_ value: String, part: String) throws -> String {
        let normalized = value.precomposedStringWithCanonicalMapping
        guard !normalized.isEmpty else {
            throw VaultError(.invalidInput, "The \(part) name must not be empty.")
        }
        guard normalized.utf8.count <= maximumPartLength else {
            throw VaultError(
                .invalidInput, "The \(part) name is longer than \(maximumPartLength) bytes."
            )
        }
        if normalized.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw VaultError(.invalidInput, "The \(part) name must not contain control characters.")
        }
        return normalized
    }

    public static func < (lhs: CredentialKey, rhs: CredentialKey) -> Bool {
        (lhs.service, lhs.account) < (rhs.service, rhs.account)
    }

    public var description: String { "\(service)/\(account)" }

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
