import FoundationEssentials

/// The characters each part of a token may hold, checked wherever a token comes in (a token
/// response, a bare token, a migrated plist) and wherever one is read back from a store, so that
/// no control character, line break or other header-breaking byte ever reaches an HTTP header or
/// `vault get`'s output. See <doc:StoredTokenFormat>.
///
/// | part | allowed | source |
/// |---|---|---|
/// | access token, type `Bearer` or `DPoP` | `b64token`: letters, digits, `-._~+/`, then optional `=` | RFC 6750 §2.1, RFC 9449 §7.1 |
/// | access token, any other type | visible ASCII, `%x21-7E` (no space) | RFC 6749 Appendix A.12 (VSCHAR), less the space |
/// | token type | visible ASCII, `%x21-7E` | RFC 6749 Appendix A.13 (a name), loosely |
/// | refresh token, ID token | `VSCHAR`, `%x20-7E`, not only spaces | RFC 6749 Appendix A.17; an ID token is a JWT |
///
/// Messages name the field, never its value.
package enum TokenSyntax {
    /// RFC 6750 §2.1: `b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
    package static func isB64Token(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        var end = bytes.count
        while end > 0, bytes[end - 1] == UInt8(ascii: "=") { end -= 1 }
        guard end > 0 else { return false }
        return bytes[..<end].allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                true
            case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "+"),
                UInt8(ascii: "/"):
                true
            default: false
            }
        }
    }

    /// One or more visible ASCII characters, `%x21-7E`.
    package static func isVisibleASCII(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }

    /// RFC 6749 Appendix A: one or more `VSCHAR` (`%x20-7E`), and not only spaces.
    package static func isVSChars(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { (0x20...0x7E).contains($0) } && text.utf8.contains { $0 != 0x20 }
    }

    /// Whether the access token of a token of type `tokenType` must be a `b64token`.
    package static func requiresB64Token(_ tokenType: String) -> Bool {
        ["bearer", "dpop"].contains(tokenType.lowercased())
    }

    /// Throws `invalidInput` naming the first part that holds characters it may not hold.
    /// - Parameter source: how the message names where the token came from, such as
    ///   "The response's" or "The stored token's".
    package static func validate(
        accessToken: String, tokenType: String, refreshToken: String?, idToken: String?, source: String
    ) throws {
        guard isVisibleASCII(tokenType) else {
            throw VaultError(
                .invalidInput,
                "\(source) token_type holds characters a token type cannot hold (only visible ASCII, no spaces or control characters); it was refused."
            )
        }
        if requiresB64Token(tokenType) {
            guard isB64Token(accessToken) else {
                throw VaultError(
                    .invalidInput,
                    "\(source) access_token is not a valid \(tokenType) token: RFC 6750 allows only letters, digits, - . _ ~ + / and trailing =, and no spaces or control characters; it was refused."
                )
            }
        } else {
            guard isVisibleASCII(accessToken) else {
                throw VaultError(
                    .invalidInput,
                    "\(source) access_token holds characters a token cannot hold (only visible ASCII, no spaces or control characters); it was refused."
                )
            }
        }
        if let refreshToken, !isVSChars(refreshToken) {
            throw VaultError(
                .invalidInput,
                "\(source) refresh_token holds characters a refresh token cannot hold (RFC 6749 allows printable ASCII only, no control characters); it was refused."
            )
        }
        if let idToken, !isVSChars(idToken) {
            throw VaultError(
                .invalidInput,
                "\(source) id_token holds characters an ID token cannot hold (printable ASCII only, no control characters); it was refused."
            )
        }
    }
}

extension OAuthToken {
    /// Throws `invalidInput` if a part of this token holds characters it may not hold
    /// (see ``TokenSyntax``).
    package func validateCharacters(source: String) throws {
        try TokenSyntax.validate(
            accessToken: accessToken, tokenType: tokenType, refreshToken: refreshToken, idToken: idToken, source: source)
    }
}
