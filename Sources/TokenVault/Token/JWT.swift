import FoundationEssentials

/// Reads the `exp` claim of a JWT access token. The signature is not checked: the claim is used
/// only to know when to refresh, never to trust the token.
enum JWT {
    static func expiry(of token: String) -> Date? {
        let segments = token.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, segments[1].utf8.count <= 64 * 1024,
            let payload = base64URLDecode(segments[1]),
            case .object(let claims)? = try? JSONDecoder().decode(JSONValue.self, from: payload),
            case .number(let exp)? = claims["exp"],
            exp.isFinite, exp > 0, exp < 253_402_300_800  // before year 10000
        else {
            return nil
        }
        return Date(timeIntervalSince1970: exp)
    }

    static func base64URLDecode(_ text: Substring) -> Data? {
        var base64 = String(text.replacing("-", with: "+").replacing("_", with: "/"))
        let remainder = base64.utf8.count % 4
        if remainder == 1 { return nil }
        if remainder > 0 { base64 += String(repeating: "=", count: 4 - remainder) }
        return Data(base64Encoded: base64)
    }
}
