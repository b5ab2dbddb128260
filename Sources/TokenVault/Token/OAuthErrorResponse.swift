/// An error response from a token endpoint (RFC 6749 §5.2), such as `invalid_grant`.
///
/// Parsing a response body that holds one throws a ``VaultError`` with code
/// `tokenEndpointError` whose ``VaultError/oauthError`` is this value.
public struct OAuthErrorResponse: Error, Sendable, Hashable, CustomStringConvertible {
    /// The error code, such as `invalid_grant` or `bad_verification_code`.
    public var error: String
    /// The server's human-readable explanation, if any.
    public var errorDescription: String?
    /// A page about the error, if the server gave one.
    public var errorURI: String?

    public init(error: String, errorDescription: String? = nil, errorURI: String? = nil) {
        self.error = error
        self.errorDescription = errorDescription
        self.errorURI = errorURI
    }

    /// Whether the grant itself is dead, so that only a new login helps.
    public var requiresReauthentication: Bool {
        error == "invalid_grant"
    }

    /// `error: error_description`, escaped as names are (``CredentialKey/escaped(_:)``): a server
    /// chooses these words, and an escape sequence in them (`ESC]52;…` writes the clipboard on
    /// some terminals) must never reach the user's terminal as it is.
    public var description: String {
        if let errorDescription, !errorDescription.isEmpty {
            return "\(CredentialKey.escaped(error)): \(CredentialKey.escaped(errorDescription))"
        }
        return CredentialKey.escaped(error)
    }
}
