import FoundationEssentials

/// Shows a secret as its first four characters and its length, and nothing of short secrets.
func redacted(_ secret: String?) -> String {
    guard let secret else { return "nil" }
    let count = secret.count
    // Four characters of a short secret would give away too much of it.
    guard count >= 16 else { return "<redacted> (\(count) chars)" }
    return "\"\(secret.prefix(4))…\" (\(count) chars)"
}

extension OAuthToken: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String {
        var parts = [
            "type: \(tokenType)",
            "access: \(redacted(accessToken))",
            "refresh: \(redacted(refreshToken))",
        ]
        if idToken != nil { parts.append("id: \(redacted(idToken))") }
        if !scopes.isEmpty { parts.append("scopes: \(scopes.joined(separator: " "))") }
        parts.append("expires: \(expiresAt.map { $0.ISO8601Format() } ?? "unknown")")
        if !additionalFields.isEmpty {
            parts.append("other fields: \(additionalFields.keys.sorted().joined(separator: ", "))")
        }
        return "OAuthToken(\(parts.joined(separator: ", ")))"
    }

    public var debugDescription: String { description }

    /// `dump` and debuggers see the same redacted values as `description`.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "accessToken": redacted(accessToken),
                "tokenType": tokenType,
                "refreshToken": redacted(refreshToken),
                "idToken": redacted(idToken),
                "scope": scope ?? "nil",
                "issuedAt": issuedAt,
                "expiresAt": expiresAt as Any,
                "refreshTokenExpiresAt": refreshTokenExpiresAt as Any,
                "additionalFields": additionalFields.keys.sorted(),
            ],
            displayStyle: .struct
        )
    }
}
