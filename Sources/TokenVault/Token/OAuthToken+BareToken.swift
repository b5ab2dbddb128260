public import FoundationEssentials

extension OAuthToken {
    /// Builds a token from a bare access token, such as a personal access token pasted on its own
    /// or a secret another program (`secret-tool store`) stored as one line of text.
    ///
    /// The token must be an RFC 6750 `b64token` (letters, digits, `-._~+/`, then optional `=`
    /// padding): a bare token is sent as `Authorization: Bearer <token>`. Its type is `Bearer`.
    /// If it is a JWT, ``expiresAt`` comes from its `exp` claim; otherwise its expiry is unknown.
    ///
    /// - Throws: ``VaultError`` with code `invalidInput` for text that is not a `b64token`. The
    ///   message never quotes it.
    public init(bareToken text: String, receivedAt: Date = Date()) throws {
        guard TokenSyntax.isB64Token(text) else {
            throw VaultError(
                .invalidInput,
                "The bare token is not a valid bearer token: RFC 6750 allows only letters, digits, - . _ ~ + / and trailing =, and no spaces or control characters."
            )
        }
        self.init(accessToken: text, tokenType: "Bearer", issuedAt: receivedAt, expiresAt: JWT.expiry(of: text))
    }
}
