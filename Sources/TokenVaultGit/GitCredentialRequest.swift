public import FoundationEssentials
import TokenVault

/// One message of git's credential protocol (`git help credential`, "INPUT/OUTPUT FORMAT"), as
/// git sends it to a credential helper: `key=value` lines, ended by a blank line or the end of
/// the input.
///
/// The attributes TokenVault uses are parsed; every other key (`capability[]`, `wwwauth[]`,
/// `state[]`, and whatever later versions of git add) is ignored, as the protocol asks of a helper.
/// `url=` is split into its parts, as git itself does, and, as in git, replaces what came before it.
///
/// `description` shows which attributes are present, never the password or refresh token.
public struct GitCredentialRequest: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// `protocol`: `https`, `http`, `smtp`, `cert`, …
    public var scheme: String?
    /// `host`: the host name, with `:port` when the URL has one.
    public var host: String?
    /// `path`: sent only when git is told to (`credential.useHttpPath`).
    public var path: String?
    /// `username`.
    public var username: String?
    /// `password`: for TokenVault, the access token.
    public var password: String?
    /// `password_expiry_utc` (git ≥ 2.41): when the password expires.
    public var passwordExpiry: Date?
    /// `oauth_refresh_token` (git ≥ 2.41): the refresh token that came with the password.
    public var oauthRefreshToken: String?

    /// The longest message accepted, in bytes. Git's own messages are a few hundred bytes.
    package static let maximumLength = 1 << 20

    public init(
        scheme: String? = nil, host: String? = nil, path: String? = nil, username: String? = nil,
        password: String? = nil, passwordExpiry: Date? = nil, oauthRefreshToken: String? = nil
    ) {
        self.scheme = scheme
        self.host = host
        self.path = path
        self.username = username
        self.password = password
        self.passwordExpiry = passwordExpiry
        self.oauthRefreshToken = oauthRefreshToken
    }

    /// Parses what git wrote to the helper's standard input.
    ///
    /// Lines end with `\n` (a `\r` before it is dropped, as git does); the first `=` splits the key
    /// from the value; an empty value is kept as empty. A line with no `=`, a NUL byte, input that
    /// is not UTF-8 or longer than 1 MiB is refused; the error never quotes the input,
    /// which may hold a password.
    /// - Throws: ``VaultError`` with code `invalidInput` or `tooLarge`.
    public init(parsing data: Data) throws {
        guard data.count <= Self.maximumLength else {
            throw VaultError(.tooLarge, "The credential request is longer than \(Self.maximumLength) bytes.")
        }
        guard !data.contains(0) else {
            throw VaultError(.invalidInput, "The credential request holds a NUL byte.")
        }
        self.init()
        // Lines are split on bytes: in a Swift String, "\r\n" is one Character, not two.
        var lineNumber = 0
        for rawLine in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            lineNumber += 1
            let bytes = rawLine.last == UInt8(ascii: "\r") ? rawLine.dropLast() : rawLine
            if bytes.isEmpty { break }
            guard let line = String(data: Data(bytes), encoding: .utf8) else {
                throw VaultError(.invalidInput, "Line \(lineNumber) of the credential request is not UTF-8 text.")
            }
            guard let equals = line.firstIndex(of: "=") else {
                throw VaultError(.invalidInput, "Line \(lineNumber) of the credential request is not key=value.")
            }
            try apply(key: String(line[..<equals]), value: String(line[line.index(after: equals)...]))
        }
    }

    /// Sets the attribute `key`; unknown keys are ignored.
    private mutating func apply(key: String, value: String) throws {
        switch key {
        case "protocol": scheme = value
        case "host": host = value
        case "path": path = value
        case "username": username = value
        case "password": password = value
        case "oauth_refresh_token": oauthRefreshToken = value
        case "password_expiry_utc":
            // As git: a value that is not a positive whole number of seconds means "no expiry".
            if let seconds = Int64(value), seconds > 0 {
                passwordExpiry = Date(timeIntervalSince1970: TimeInterval(seconds))
            } else {
                passwordExpiry = nil
            }
        case "url": try apply(url: value)
        default: break
        }
    }

    /// `url=` as git reads it: the URL's parts replace the whole request so far.
    private mutating func apply(url value: String) throws {
        guard let components = URLComponents(string: value), let scheme = components.scheme, !scheme.isEmpty else {
            throw VaultError(.invalidInput, "The url attribute of the credential request is not a URL.")
        }
        self = GitCredentialRequest()
        self.scheme = scheme.lowercased()
        if let host = components.percentEncodedHost, !host.isEmpty {
            self.host = components.port.map { "\(host):\($0)" } ?? host
        }
        username = components.user
        password = components.password
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        self.path = path.isEmpty ? nil : path
    }

    public var description: String {
        var parts: [String] = []
        if let scheme { parts.append("protocol: \(scheme)") }
        if let host { parts.append("host: \(host)") }
        if let path { parts.append("path: \(path)") }
        if let username { parts.append("username: \(username)") }
        if password != nil { parts.append("password: (hidden)") }
        if let passwordExpiry { parts.append("password_expiry_utc: \(Int64(passwordExpiry.timeIntervalSince1970))") }
        if oauthRefreshToken != nil { parts.append("oauth_refresh_token: (hidden)") }
        return "GitCredentialRequest(\(parts.joined(separator: ", ")))"
    }

    public var debugDescription: String { description }

    /// `dump` and debuggers see whether a secret is present, never the secret.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "scheme": scheme as Any, "host": host as Any, "path": path as Any, "username": username as Any,
                "hasPassword": password != nil, "passwordExpiry": passwordExpiry as Any,
                "hasOAuthRefreshToken": oauthRefreshToken != nil,
            ],
            displayStyle: .struct)
    }
}
