public import FoundationEssentials

/// The stored form of an ``OAuthToken``: compact JSON with a version field.
///
/// ```json
/// {"v":1,"access_token":"…","token_type":"Bearer","refresh_token":"…","id_token":"…",
///  "scope":"repo user","issued_at":1763800000,"expires_at":1763803600,
///  "refresh_token_expires_at":1779352000,"extra":{"…":…}}
/// ```
///
/// Times are whole seconds since 1970-01-01T00:00:00Z as JSON integers. Optional fields are omitted
/// when absent. A reader refuses a `v` it does not know, so a newer format is never misread.
extension OAuthToken: Codable {
    /// The version written by this release.
    public static let storedFormatVersion = 1

    private enum CodingKeys: String, CodingKey {
        case version = "v"
        case accessToken = "access_token"
        case tokenType = "token_type"
        case refreshToken = "refresh_token"
        case idToken = "id_token"
        case scope
        case issuedAt = "issued_at"
        case expiresAt = "expires_at"
        case refreshTokenExpiresAt = "refresh_token_expires_at"
        case additionalFields = "extra"
        case idTokenVerification = "id_token_verified"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let version = try container.decode(Int.self, forKey: .version)
        guard version == Self.storedFormatVersion else {
            throw VaultError(
                .unsupportedVersion,
                "The stored token has format version \(version); this release reads version \(Self.storedFormatVersion)."
            )
        }
        self.init(
            accessToken: try container.decode(String.self, forKey: .accessToken),
            tokenType: try container.decode(String.self, forKey: .tokenType),
            refreshToken: try container.decodeIfPresent(String.self, forKey: .refreshToken),
            idToken: try container.decodeIfPresent(String.self, forKey: .idToken),
            scope: try container.decodeIfPresent(String.self, forKey: .scope),
            issuedAt: Date(timeIntervalSince1970: try container.decode(Double.self, forKey: .issuedAt)),
            expiresAt: try container.decodeIfPresent(Double.self, forKey: .expiresAt).map(Date.init(timeIntervalSince1970:)),
            refreshTokenExpiresAt: try container.decodeIfPresent(Double.self, forKey: .refreshTokenExpiresAt)
                .map(Date.init(timeIntervalSince1970:)),
            additionalFields: try container.decodeIfPresent([String: JSONValue].self, forKey: .additionalFields) ?? [:]
        )
        idTokenVerificationRecord = try container.decodeIfPresent(IDTokenVerification.self, forKey: .idTokenVerification)
        // Stored data is checked as a response is: a control character read back from a store
        // (written by an older release, or by another program) is never handed out.
        try validateCharacters(source: "The stored token's")
    }

    public func encode(to encoder: any Encoder) throws {
        try validateCharacters(source: "The token's")
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(Self.storedFormatVersion, forKey: .version)
        try container.encode(accessToken, forKey: .accessToken)
        try container.encode(tokenType, forKey: .tokenType)
        try container.encodeIfPresent(refreshToken, forKey: .refreshToken)
        try container.encodeIfPresent(idToken, forKey: .idToken)
        try container.encodeIfPresent(scope, forKey: .scope)
        try container.encode(Self.unixSeconds(issuedAt), forKey: .issuedAt)
        try container.encodeIfPresent(expiresAt.map(Self.unixSeconds), forKey: .expiresAt)
        try container.encodeIfPresent(refreshTokenExpiresAt.map(Self.unixSeconds), forKey: .refreshTokenExpiresAt)
        if !additionalFields.isEmpty {
            try container.encode(additionalFields, forKey: .additionalFields)
        }
        try container.encodeIfPresent(idTokenVerificationRecord, forKey: .idTokenVerification)
    }

    private static func unixSeconds(_ date: Date) -> Int64 {
        let seconds = date.timeIntervalSince1970.rounded()
        // Dates outside ±292 billion years cannot be stored; clamp rather than trap. A NaN date
        // (not a time at all) is stored as 0, so such an expiry reads back as long past.
        guard !seconds.isNaN else { return 0 }
        return seconds >= Double(Int64.max) ? .max : seconds <= Double(Int64.min) ? .min : Int64(seconds)
    }

    /// The stored form: compact JSON with sorted keys. A `{` or `}` inside a string is written as
    /// `\u007b` or `\u007d`, which every JSON reader turns back into the brace: KeePassXC expands
    /// `{USERNAME}`-style placeholders in a secret it returns, and a scope or claim that holds one
    /// would otherwise not survive it.
    public func storedForm() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Self.escapingBracesInStrings(try encoder.encode(self))
    }

    /// `json` with every `{` and `}` inside a string value or name escaped as `\u007b`/`\u007d`;
    /// the structure's own braces stay. `json` must be what JSONEncoder wrote (valid UTF-8 JSON).
    static func escapingBracesInStrings(_ json: Data) -> Data {
        let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")
        let open = UInt8(ascii: "{"), close = UInt8(ascii: "}")
        var inString = false, escaped = false, needed = false
        for byte in json {
            if inString {
                if escaped { escaped = false } else if byte == backslash { escaped = true } else if byte == quote { inString = false }
                else if byte == open || byte == close { needed = true; break }
            } else if byte == quote {
                inString = true
            }
        }
        guard needed else { return json }
        var result = Data(capacity: json.count + 32)
        inString = false
        escaped = false
        for byte in json {
            if inString && !escaped && (byte == open || byte == close) {
                result.append(contentsOf: Array((byte == open ? "\\u007b" : "\\u007d").utf8))
                continue
            }
            result.append(byte)
            if inString {
                if escaped { escaped = false } else if byte == backslash { escaped = true } else if byte == quote { inString = false }
            } else if byte == quote {
                inString = true
            }
        }
        return result
    }

    /// Reads a token from its stored form.
    ///
    /// Besides the JSON form, one line of text that is a bearer token (an RFC 6750 `b64token`,
    /// optionally ending in one line break) is a token: that is what another program stores,
    /// such as `echo -n "$TOKEN" | secret-tool store … service S account A`. It reads as a
    /// `Bearer` token issued now, expiring at its JWT `exp` claim if it is a JWT, otherwise with
    /// no known expiry (see ``init(bareToken:receivedAt:)``).
    ///
    /// - Throws: ``VaultError`` with code `unsupportedVersion` for a newer format;
    ///   `invalidInput` for a stored token that holds characters a token cannot hold (a control
    ///   character, a line break, a space in an access token); or `integrityFailure` for bytes
    ///   that are not a stored token. The message never quotes them.
    public init(storedForm data: Data, readAt: Date = Date()) throws {
        if data.first != UInt8(ascii: "{"), let line = Self.bareTokenLine(data) {
            self = try OAuthToken(bareToken: line, receivedAt: readAt)
            return
        }
        do {
            self = try JSONDecoder().decode(OAuthToken.self, from: data)
        } catch let error as VaultError {
            throw error
        } catch {
            throw VaultError(.integrityFailure, "The stored entry is not a TokenVault token.")
        }
    }

    /// The bare token that `data` holds as one line of text, or `nil` if it holds anything else.
    private static func bareTokenLine(_ data: Data) -> String? {
        var bytes = data[...]
        if bytes.last == UInt8(ascii: "\n") { bytes = bytes.dropLast() }
        if bytes.last == UInt8(ascii: "\r") { bytes = bytes.dropLast() }
        guard !bytes.isEmpty, bytes.count <= 64 * 1024, let text = String(bytes: bytes, encoding: .utf8),
            TokenSyntax.isB64Token(text)
        else { return nil }
        return text
    }
}
