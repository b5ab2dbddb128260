public import FoundationEssentials
import TokenVault

/// What a credential helper's `get` answers git: `username`, `password` and, when the token's
/// expiry is known, `password_expiry_utc` (which git ≥ 2.41 uses to skip an expired password;
/// older versions ignore it, as the protocol lets them).
///
/// The refresh token is never handed to git: the vault refreshes by itself.
///
/// `description` never shows the password.
public struct GitCredentialResponse: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    public var username: String
    public var password: String
    public var passwordExpiry: Date?

    public init(username: String, password: String, passwordExpiry: Date? = nil) {
        self.username = username
        self.password = password
        self.passwordExpiry = passwordExpiry
    }

    /// The answer as git reads it: one `key=value` line each, ending with a newline.
    /// - Throws: ``VaultError`` `invalidInput` when a value holds a newline or a NUL byte, which the
    ///   protocol cannot carry (git refuses them too); the message does not quote the value.
    public func formatted() throws -> String {
        var text = ""
        for (key, value) in [("username", username), ("password", password)] {
            guard !value.unicodeScalars.contains(where: { $0 == "\n" || $0 == "\r" || $0 == "\0" }) else {
                throw VaultError(
                    .invalidInput, "The \(key) holds a line break or a NUL byte, which git's credential protocol cannot carry.")
            }
            text += "\(key)=\(value)\n"
        }
        if let passwordExpiry {
            text += "password_expiry_utc=\(Int64(passwordExpiry.timeIntervalSince1970.rounded(.down)))\n"
        }
        return text
    }

    public var description: String {
        "GitCredentialResponse(username: \(username), password: (hidden)"
            + (passwordExpiry.map { ", password_expiry_utc: \(Int64($0.timeIntervalSince1970))" } ?? "") + ")"
    }

    public var debugDescription: String { description }

    public var customMirror: Mirror {
        Mirror(self, children: ["username": username, "passwordExpiry": passwordExpiry as Any], displayStyle: .struct)
    }
}
