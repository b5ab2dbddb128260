/// The one error type the TokenVault library throws.
///
/// A `VaultError` wraps a stable ``Code`` that callers switch on, a message written for a person,
/// and optionally the error that caused it. Codes are exposed as `static let`s over a private
/// enum, so adding a code later breaks no caller's `switch`.
///
/// No `VaultError` ever carries a secret: messages name keys, paths and backends, never token
/// values, passphrases or key material. Messages from C libraries are passed through only when
/// they cannot contain secret input (GLib and libc messages do not echo secret values).
public struct VaultError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// A stable, machine-readable category of failure.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case notFound = "not-found"
            case expired
            case backendUnavailable = "backend-unavailable"
            case locked
            case authenticationFailed = "authentication-failed"
            case integrityFailure = "integrity-failure"
            case notAVault = "not-a-vault"
            case unsupportedVersion = "unsupported-version"
            case truncated
            case emptyFile = "empty-file"
            case permissionDenied = "permission-denied"
            case insecurePermissions = "insecure-permissions"
            case invalidInput = "invalid-input"
            case io
            case diskFull = "disk-full"
            case keyFileMissing = "key-file-missing"
            case alreadyExists = "already-exists"
            case tooLarge = "too-large"
            case timeout
            case tokenEndpointError = "token-endpoint-error"
            case reauthenticationRequired = "reauthentication-required"
            case cancelled
            case configurationError = "configuration-error"
            case networkFailure = "network-failure"
            case httpError = "http-error"
            case addressInUse = "address-in-use"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// No entry exists for the requested key.
        public static let notFound = Code(.notFound)
        /// The token exists but has expired.
        public static let expired = Code(.expired)
        /// The backend cannot be used here: no D-Bus, no Secret Service provider, no vault file.
        public static let backendUnavailable = Code(.backendUnavailable)
        /// The backend is present but locked, and could not be unlocked without a prompt.
        public static let locked = Code(.locked)
        /// The key or passphrase is wrong.
        public static let authenticationFailed = Code(.authenticationFailed)
        /// The data failed authentication: it was tampered with or is corrupt.
        public static let integrityFailure = Code(.integrityFailure)
        /// The file is not a TokenVault vault file.
        public static let notAVault = Code(.notAVault)
        /// The vault file was written by a newer format version than this library understands.
        public static let unsupportedVersion = Code(.unsupportedVersion)
        /// The file ends before its header does.
        public static let truncated = Code(.truncated)
        /// The vault file exists but is empty (0 bytes): it holds no header, so it is not a vault.
        public static let emptyFile = Code(.emptyFile)
        /// The operating system refused access to a file or directory.
        public static let permissionDenied = Code(.permissionDenied)
        /// A vault or key file is readable by group or others, and no override was given.
        public static let insecurePermissions = Code(.insecurePermissions)
        /// An argument or an input document is not valid.
        public static let invalidInput = Code(.invalidInput)
        /// An input/output operation failed.
        public static let io = Code(.io)
        /// The disk is full or over quota; nothing half-written became the current state.
        public static let diskFull = Code(.diskFull)
        /// The configured key file or passphrase file does not exist.
        public static let keyFileMissing = Code(.keyFileMissing)
        /// The target already holds an entry, and overwriting was not allowed.
        public static let alreadyExists = Code(.alreadyExists)
        /// The secret is larger than the backend can carry.
        public static let tooLarge = Code(.tooLarge)
        /// An operation did not finish within its time bound.
        public static let timeout = Code(.timeout)
        /// A token endpoint answered with an OAuth error response (RFC 6749 §5.2).
        public static let tokenEndpointError = Code(.tokenEndpointError)
        /// The refresh was rejected for good (for example `invalid_grant`): the user must log in again.
        public static let reauthenticationRequired = Code(.reauthenticationRequired)
        /// The operation was cancelled.
        public static let cancelled = Code(.cancelled)
        /// The client or endpoint configuration is wrong: the token endpoint refused the client
        /// (`invalid_client`, `unauthorized_client`), or an endpoint is plain `http` off loopback.
        public static let configurationError = Code(.configurationError)
        /// The token endpoint could not be reached, timed out or kept failing (HTTP 5xx, 429)
        /// after the bounded retries.
        public static let networkFailure = Code(.networkFailure)
        /// The token endpoint answered with an HTTP error that is not an OAuth error response,
        /// such as an HTML error page.
        public static let httpError = Code(.httpError)
        /// A fixed loopback redirect's port (``AuthorizationCodeLogin/redirectURI``) is taken by
        /// another program, so the login cannot listen for the browser's redirect there.
        public static let addressInUse = Code(.addressInUse)

        /// A stable identifier such as `not-found`, suitable for JSON output and logs.
        public var description: String { base.rawValue }
    }

    /// The category of failure.
    public let code: Code
    /// A message for a person. It names what failed and, where possible, what to do.
    public let message: String
    /// The lower-level error that caused this one, if any.
    public let underlying: (any Error & Sendable)?
    /// Where the error was raised, for debugging.
    public let file: String
    /// Where the error was raised, for debugging.
    public let line: Int

    public init(
        _ code: Code,
        _ message: String,
        underlying: (any Error & Sendable)? = nil,
        file: String = #fileID,
        line: Int = #line
    ) {
        self.code = code
        self.message = message
        self.underlying = underlying
        self.file = file
        self.line = line
    }

    public var description: String { message }

    public var debugDescription: String {
        var text = "VaultError(\(code)): \(message) [\(file):\(line)]"
        if let underlying {
            text += " underlying: \(String(describing: underlying))"
        }
        return text
    }

    /// The OAuth error response that caused this error, if it came from a token endpoint.
    public var oauthError: OAuthErrorResponse? {
        underlying as? OAuthErrorResponse
    }
}
