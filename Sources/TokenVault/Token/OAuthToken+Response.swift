public import FoundationEssentials

extension OAuthToken {
    /// Builds a token from a token endpoint's response body.
    ///
    /// Accepts:
    /// - JSON as in RFC 6749 §5.1, with `expires_in` as a number or a numeric string;
    /// - form-encoded bodies, as GitHub returns by default
    ///   (`access_token=…&scope=repo%2Cuser&token_type=bearer`), percent-decoded.
    ///
    /// `expires_in` counts from `receivedAt`. When the response has no `expires_in` and the access
    /// token is a JWT, ``expiresAt`` comes from its `exp` claim. `refresh_token_expires_in`
    /// (GitHub Apps) sets ``refreshTokenExpiresAt``.
    ///
    /// - Throws: ``VaultError`` with code `tokenEndpointError` for an error response
    ///   (`{"error":"invalid_grant",…}`), whose ``VaultError/oauthError`` carries the details;
    ///   `invalidInput` for a body that is not a token response, or whose tokens hold characters
    ///   a token cannot hold (a `Bearer` access token must be an RFC 6750 `b64token`; see
    ///   <doc:StoredTokenFormat>). No error message contains a token value.
    public init(tokenResponse body: Data, receivedAt: Date = Date()) throws {
        let fields = try TokenResponseFields.parse(body)
        try self.init(responseFields: fields, receivedAt: receivedAt)
    }

    /// Builds a token from a token endpoint's response body given as text.
    public init(tokenResponse body: String, receivedAt: Date = Date()) throws {
        try self.init(tokenResponse: Data(body.utf8), receivedAt: receivedAt)
    }

    private static let modelledFields: Set<String> = [
        "access_token", "token_type", "refresh_token", "id_token", "scope", "expires_in",
        "refresh_token_expires_in",
    ]

    init(responseFields fields: [String: JSONValue], receivedAt: Date) throws {
        do {
            try self.init(checkedFields: fields, receivedAt: receivedAt)
        } catch let error as VaultError where error.code == .invalidInput {
            // A refused field must not throw away a refresh token the server has just rotated:
            // the error carries what can be kept, and the refresh flight saves it.
            guard let partial = PartialTokenResponse(fields, receivedAt: receivedAt) else { throw error }
            throw VaultError(error.code, error.message, underlying: partial)
        }
    }

    fileprivate init(checkedFields fields: [String: JSONValue], receivedAt: Date) throws {
        if case .string(let error)? = fields["error"] {
            let oauthError = OAuthErrorResponse(
                error: error,
                errorDescription: fields["error_description"]?.stringValue,
                errorURI: fields["error_uri"]?.stringValue
            )
            throw VaultError(
                .tokenEndpointError,
                "The token endpoint returned an error: \(oauthError).",
                underlying: oauthError
            )
        }
        guard let accessToken = fields["access_token"]?.stringValue else {
            throw VaultError(.invalidInput, "The response has no access_token string.")
        }
        guard !accessToken.isEmpty else {
            throw VaultError(.invalidInput, "The response's access_token is empty.")
        }
        let tokenType: String
        switch fields["token_type"] {
        case nil, .null?: tokenType = "Bearer"
        case .string(let value)?: tokenType = value
        default: throw VaultError(.invalidInput, "The response's token_type is not a string.")
        }
        let expiresIn = try Self.seconds(fields["expires_in"], field: "expires_in")
        let refreshExpiresIn = try Self.seconds(
            fields["refresh_token_expires_in"], field: "refresh_token_expires_in"
        )
        var expiresAt = expiresIn.map { receivedAt.addingTimeInterval($0) }
        if expiresAt == nil {
            expiresAt = JWT.expiry(of: accessToken)
        }
        var additional = fields
        for name in Self.modelledFields { additional.removeValue(forKey: name) }

        self.init(
            accessToken: accessToken,
            tokenType: tokenType,
            refreshToken: try Self.optionalString(fields["refresh_token"], field: "refresh_token"),
            idToken: try Self.optionalString(fields["id_token"], field: "id_token"),
            scope: try Self.scope(fields["scope"]),
            issuedAt: receivedAt,
            expiresAt: expiresAt,
            refreshTokenExpiresAt: refreshExpiresIn.map { receivedAt.addingTimeInterval($0) },
            additionalFields: additional
        )
        // A control character or line break in a token would reach an HTTP header.
        try validateCharacters(source: "The response's")
    }

    /// The longest lifetime accepted, 100 years; anything longer is a malformed response.
    private static let maximumLifetime: TimeInterval = 100 * 365 * 86_400

    private static func seconds(_ value: JSONValue?, field: String) throws -> TimeInterval? {
        let seconds: Double
        switch value {
        case nil, .null?:
            return nil
        case .number(let number)?:
            seconds = number
        case .string(let text)?:
            guard let number = Double(text.trimmingWhitespace()) else {
                throw VaultError(.invalidInput, "The response's \(field) is not a number.")
            }
            seconds = number
        default:
            throw VaultError(.invalidInput, "The response's \(field) is not a number.")
        }
        guard seconds.isFinite, seconds >= 0, seconds <= maximumLifetime else {
            throw VaultError(.invalidInput, "The response's \(field) is out of range.")
        }
        return seconds
    }

    private static func optionalString(_ value: JSONValue?, field: String) throws -> String? {
        switch value {
        case nil, .null?: return nil
        case .string(let text)?: return text.isEmpty ? nil : text
        default: throw VaultError(.invalidInput, "The response's \(field) is not a string.")
        }
    }

    private static func scope(_ value: JSONValue?) throws -> String? {
        switch value {
        case nil, .null?: return nil
        case .string(let text)?: return text
        case .array(let items)?:
            // Not RFC 6749, but some servers send a list; keep it as the standard string.
            let names = items.compactMap(\.stringValue)
            guard names.count == items.count else {
                throw VaultError(.invalidInput, "The response's scope list holds a value that is not a string.")
            }
            return names.joined(separator: " ")
        default:
            throw VaultError(.invalidInput, "The response's scope is not a string.")
        }
    }
}

/// What a token response still gives when one of its fields was refused: the new refresh token
/// above all (a server that rotates has already spent the old one), and the access token when it
/// passed. Fields are checked one by one; a refused one is dropped and named, never quoted.
///
/// Carried as the ``VaultError/underlying`` error of the `invalidInput` that refused the response,
/// so that a refresh closure that passes the error on unchanged still lets the flight keep it.
struct PartialTokenResponse: Error, Sendable, CustomStringConvertible {
    /// The response as a token, with the refused fields dropped; `nil` when the access token (or
    /// its type) was refused.
    var token: OAuthToken?
    /// The new refresh token.
    var refreshToken: String
    var refreshTokenExpiresAt: Date?
    var receivedAt: Date
    /// The refused fields, by name.
    var refused: [String]

    var description: String { "a token response with refused fields (\(refused.joined(separator: ", ")))" }

    /// `nil` when the response holds no acceptable refresh token: then nothing was rotated that
    /// could be kept, and the stored token stays as it was.
    init?(_ fields: [String: JSONValue], receivedAt: Date) {
        if fields["error"] != nil { return nil }
        func accepted(_ probe: [String: JSONValue]) -> Bool {
            (try? OAuthToken(checkedFields: probe, receivedAt: receivedAt)) != nil
        }
        let placeholder: [String: JSONValue] = ["access_token": .string("probe"), "token_type": .string("Bearer")]
        guard case .string(let refreshToken)? = fields["refresh_token"], !refreshToken.isEmpty,
            accepted(placeholder.merging(["refresh_token": .string(refreshToken)]) { $1 })
        else { return nil }
        var kept = fields
        var refused: [String] = []
        for name in ["expires_in", "refresh_token_expires_in", "id_token", "scope"] {
            if let value = fields[name], !accepted(placeholder.merging([name: value]) { $1 }) {
                kept.removeValue(forKey: name)
                refused.append(name)
            }
        }
        var accessFields: [String: JSONValue] = [:]
        accessFields["access_token"] = fields["access_token"]
        accessFields["token_type"] = fields["token_type"]
        // Without expires_in, an access token that is a JWT would take its expiry from its claim.
        if accepted(accessFields), var token = try? OAuthToken(checkedFields: kept, receivedAt: receivedAt) {
            if refused.contains("expires_in") {
                // The lifetime is unknown: count the access token as expired, so that the next call
                // refreshes (with the new refresh token) rather than trusting it for ever.
                token.expiresAt = receivedAt
            }
            self.token = token
        } else {
            refused.insert(fields["access_token"] == nil ? "access_token (missing)" : "access_token", at: 0)
            self.token = nil
        }
        guard !refused.isEmpty else { return nil }
        self.refreshToken = refreshToken
        self.refreshTokenExpiresAt = (try? OAuthToken(checkedFields: placeholder.merging(
            ["refresh_token_expires_in": kept["refresh_token_expires_in"] ?? .null]) { $1 }, receivedAt: receivedAt))?.refreshTokenExpiresAt
        self.receivedAt = receivedAt
        self.refused = refused
    }

    /// `current` updated by what was kept: the new refresh token always; the new access token
    /// when it passed, else the old one counted as expired (so the next call refreshes).
    func kept(updating current: OAuthToken) -> OAuthToken {
        if let token {
            var result = current.updated(byRefresh: token)
            result.refreshToken = refreshToken
            return result
        }
        var result = current
        result.refreshToken = refreshToken
        result.refreshTokenExpiresAt = refreshTokenExpiresAt
        result.expiresAt = receivedAt
        return result
    }

    /// The partial response behind `error`, looking through ``VaultError/underlying``.
    static func found(in error: any Error) -> PartialTokenResponse? {
        var next: (any Error)? = error
        while let current = next {
            if let partial = current as? PartialTokenResponse { return partial }
            next = (current as? VaultError)?.underlying
        }
        return nil
    }
}

extension JSONValue {
    var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }
}

/// Reads a token endpoint's body as JSON or as `application/x-www-form-urlencoded`.
enum TokenResponseFields {
    /// Bodies larger than this are not token responses.
    static let maximumBodySize = 1 << 20

    static func parse(_ body: Data) throws -> [String: JSONValue] {
        guard body.count <= maximumBodySize else {
            throw VaultError(.invalidInput, "The token response is larger than 1 MiB.")
        }
        guard let text = String(data: body, encoding: .utf8) else {
            throw VaultError(.invalidInput, "The token response is not UTF-8 text.")
        }
        let trimmed = text.trimmingWhitespaceAndNewlines()
        guard !trimmed.isEmpty else {
            throw VaultError(.invalidInput, "The token response is empty.")
        }
        if trimmed.hasPrefix("{") || trimmed.hasPrefix("[") {
            return try parseJSON(Data(trimmed.utf8))
        }
        return try parseForm(trimmed)
    }

    static func parseJSON(_ data: Data) throws -> [String: JSONValue] {
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: data)
        } catch {
            // The decoder's message can quote the input, so it is not passed on.
            throw VaultError(.invalidInput, "The token response is not valid JSON.")
        }
        guard case .object(let object) = value else {
            throw VaultError(.invalidInput, "The token response is JSON but not an object.")
        }
        return object
    }

    static func parseForm(_ text: String) throws -> [String: JSONValue] {
        var fields: [String: JSONValue] = [:]
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2 else {
                throw VaultError(.invalidInput, "The token response is neither JSON nor form-encoded.")
            }
            guard let name = decode(parts[0]), !name.isEmpty, let value = decode(parts[1]) else {
                throw VaultError(.invalidInput, "The form-encoded token response has a bad percent escape.")
            }
            guard fields[name] == nil else {
                throw VaultError(.invalidInput, "The form-encoded token response repeats the field \(safeName(name)).")
            }
            fields[name] = .string(value)
        }
        guard !fields.isEmpty else {
            throw VaultError(.invalidInput, "The token response is neither JSON nor form-encoded.")
        }
        return fields
    }

    private static func decode(_ component: Substring) -> String? {
        String(component).replacing("+", with: " ").percentDecoded
    }

    /// A field name fit for a message: short, printable, or omitted.
    private static func safeName(_ name: String) -> String {
        let isPlain = name.count <= 40 && name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }
        return isPlain ? "'\(name)'" : "(unprintable name)"
    }
}
