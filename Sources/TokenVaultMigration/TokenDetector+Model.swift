import TokenVault
import Foundation

// Token models: a whole token held in one value (a dictionary, JSON or plist data, a JSON string).
extension TokenDetector {
    /// A token model held in `value`, or `nil` if it holds none.
    func model(in value: Any) -> OAuthToken? {
        if let dictionary = value as? [String: Any] {
            return model(fields: dictionary)
        }
        if let data = value as? Data {
            if let object = try? JSONSerialization.jsonObject(with: data), let dictionary = object as? [String: Any] {
                return model(fields: dictionary)
            }
            var format = PropertyListSerialization.PropertyListFormat.xml
            if Self.startsLikeAPlist(data), let object = try? PlistDocument.propertyList(from: data, format: &format),
                let dictionary = object as? [String: Any]
            {
                return model(fields: dictionary)
            }
            return nil
        }
        if let text = value as? String {
            let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard trimmed.hasPrefix("{"), let object = try? JSONSerialization.jsonObject(with: Data(trimmed.utf8)),
                let dictionary = object as? [String: Any]
            else { return nil }
            return model(fields: dictionary)
        }
        return nil
    }

    /// Whether `data` starts as a binary (`bplist0`) or XML (`<`, after whitespace or a BOM) plist.
    /// Other `Data` (images, archives) is not handed to the plist parser: on Linux, Foundation
    /// leaks its error (about 600 bytes) on every parse that fails.
    static func startsLikeAPlist(_ data: Data) -> Bool {
        if data.starts(with: Array("bplist0".utf8)) { return true }
        let text = data.prefix(64).drop { [0x20, 0x09, 0x0A, 0x0D].contains($0) }
        return text.starts(with: [0x3C]) || text.starts(with: [0xEF, 0xBB, 0xBF, 0x3C])
    }

    private func model(fields: [String: Any]) -> OAuthToken? {
        var byName: [String: Any] = [:]
        for (name, value) in fields { byName[Self.normalized(name)] = value }
        func string(_ names: String...) -> String? {
            for name in names {
                if let text = byName[name] as? String, !text.isEmpty { return text }
            }
            return nil
        }
        guard let access = string("accesstoken", "access", "token", "oauthtoken", "authtoken", "bearertoken", "bearer")
        else { return nil }
        var scope = string("scope")
        if scope == nil, let list = (byName["scope"] ?? byName["scopes"]) as? [Any] {
            let names = list.compactMap { $0 as? String }
            if names.count == list.count { scope = names.joined(separator: " ") }
        }
        return OAuthToken(
            accessToken: access,
            tokenType: string("tokentype") ?? "Bearer",
            refreshToken: string("refreshtoken", "refresh"),
            idToken: string("idtoken"),
            scope: scope,
            issuedAt: now,
            expiresAt: date(byName["expiresat"] ?? byName["expiry"] ?? byName["expirationdate"] ?? byName["expiration"])
        )
    }

    /// A date from a plist `Date`, an RFC 3339 string, or a number: seconds since 1970 when it
    /// is that large, otherwise since 2001 (what `JSONEncoder` writes for a `Date` by default).
    private func date(_ value: Any?) -> Date? {
        switch value {
        case let date as Date:
            // A binary plist can hold NaN or infinity as a date; neither is a time.
            return date.timeIntervalSince1970.isFinite ? date : nil
        case let text as String:
            return ISO8601DateFormatter().date(from: text)
        case let number as NSNumber where !number.isBoolean:
            let seconds = number.doubleValue
            guard seconds.isFinite, seconds > 0 else { return nil }
            return seconds >= 1_000_000_000
                ? Date(timeIntervalSince1970: seconds) : Date(timeIntervalSinceReferenceDate: seconds)
        default:
            return nil
        }
    }
}
