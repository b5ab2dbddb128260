import Foundation

/// Finds token values in a defaults dictionary and groups them into tokens.
///
/// - A string under a token-like name (case and punctuation ignored: `accessToken`,
///   `access_token`, `refreshToken`, `idToken`, `oauth`, `oauthToken`, `authToken`, `bearer`,
///   `bearerToken`, `apiToken`, `token`, `…Token`) is an access, refresh or ID token.
/// - `Data` (JSON or plist), a dictionary, or a JSON string that holds a token model
///   (`access`/`access_token`/`accessToken`/`token`, `refresh`/`refresh_token`/`refreshToken`,
///   `id_token`, `token_type`, `scope`, `expires_at`/`expiry`/`expirationDate`) is a whole token.
/// - A token-like name whose value is not a string (the tutorials' `loadingOAuthToken` Bool) is
///   reported and left alone, as is every other key. A string under a name that only looks
///   token-related (`oauthProvider`) is reported as a name not recognised, which `--key` takes.
struct TokenDetector {
    /// One token to write, and the plist keys it came from.
    struct Group {
        var token: OAuthToken
        var keys: [String]
    }

    struct Result {
        var groups: [Group]
        var items: [MigrationReport.Item]
        var untouchedKeys: [String]
    }

    let now: Date

    /// Lowercase letters and digits only, so `access_token`, `AccessToken` and `access-token` match.
    static func normalized(_ name: String) -> String {
        String(name.lowercased().unicodeScalars.filter { CharacterSet.alphanumerics.contains($0) && $0.isASCII }.map(Character.init))
    }

    /// Words that mark a key as being about a token without holding one.
    private static let disqualifyingParts = [
        "expir", "type", "date", "time", "scope", "url", "uri", "endpoint", "count", "enabled", "loading", "device", "push",
        "apns", "fcm", "csrf", "xsrf",
    ]
    private static let disqualifyingPrefixes = ["is", "has", "should", "did", "will", "last"]

    /// The role a key's name gives a string value, or `nil` when the name is not token-like.
    static func role(forName name: String) -> MigrationReport.Role? {
        let n = normalized(name)
        guard !n.isEmpty else { return nil }
        if disqualifyingParts.contains(where: { n.contains($0) }) { return nil }
        if disqualifyingPrefixes.contains(where: { n.hasPrefix($0) && n != $0 }) {
            // `isLoggedIn`, `hasToken`: flags, not tokens. (`idToken` does not start with these.)
            return nil
        }
        if n.contains("refresh") { return .refreshToken }
        if n.contains("idtoken") || n == "oidctoken" { return .idToken }
        let accessMarks = ["accesstoken", "oauthtoken", "authtoken", "bearer", "apitoken", "jwt"]
        if accessMarks.contains(where: { n.contains($0) }) || ["access", "token", "oauth"].contains(n) || n.hasSuffix("token") {
            return .accessToken
        }
        return nil
    }

    /// Whether a name merely looks token-related (used to report non-token values under such names).
    static func looksTokenRelated(_ name: String) -> Bool {
        let n = normalized(name)
        return n.contains("token") || n.contains("bearer") || n.contains("oauth") || n.contains("jwt")
    }

    // MARK: Token models

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

    // MARK: Detection

    /// A value described without its content.
    static func describe(_ value: Any) -> String {
        switch value {
        case let text as String: "string, \(text.count) characters"
        case let data as Data: "data, \(data.count) bytes"
        case is [String: Any]: "dictionary"
        case is [Any]: "array"
        case is Date: "date"
        case let number as NSNumber:
            number.isBoolean ? "Bool" : "number"
        default: "value"
        }
    }

    /// Finds and groups the tokens in `dictionary`. With `only`, takes exactly those keys.
    /// - Throws: `invalidInput` when the values cannot be grouped into one token unambiguously.
    func detect(in dictionary: [String: Any], only: [String]?, entry: CredentialKey) throws -> Result {
        var items: [MigrationReport.Item] = []
        var models: [(key: String, token: OAuthToken)] = []
        var strings: [MigrationReport.Role: [(key: String, value: String)]] = [:]
        var expiry: (key: String, date: Date)?
        var unnamed: [(key: String, value: String)] = []
        let explicit = only.map { Set($0) }

        for name in dictionary.keys.sorted() {
            let value = dictionary[name]!
            if let explicit, !explicit.contains(name) { continue }
            if let token = model(in: value) {
                models.append((name, token))
                items.append(.init(key: name, role: .tokenModel, value: Self.describe(value), fate: .wouldMigrate, entry: entry))
                continue
            }
            let role = Self.role(forName: name)
            if let text = value as? String, !text.isEmpty {
                if let role {
                    strings[role, default: []].append((name, text))
                    items.append(.init(key: name, role: role, value: Self.describe(value), fate: .wouldMigrate, entry: entry))
                    continue
                }
                if explicit != nil {
                    unnamed.append((name, text))
                    continue
                }
            }
            if explicit == nil, let date = value as? Date, date.timeIntervalSince1970.isFinite,
                Self.normalized(name).contains("expir"),
                !Self.normalized(name).contains("refresh")
            {
                expiry = (name, date)
                continue
            }
            if explicit != nil {
                throw VaultError(
                    .invalidInput,
                    "The key '\(name)' holds \(Self.describe(value)), which is neither a token string nor a token model."
                )
            }
            if role != nil || Self.looksTokenRelated(name) {
                // A string reaches here only when its name was not recognised: say so, not that
                // the value was judged.
                let unrecognised = role == nil && (value as? String).map { !$0.isEmpty } == true
                items.append(
                    .init(
                        key: name, role: .notAToken, value: Self.describe(value), fate: .leftAlone,
                        note: unrecognised
                            ? "name not recognised as a token; name it with --key to migrate it" : "the value is not a token"))
            }
        }
        if let explicit {
            for name in explicit.sorted() where dictionary[name] == nil {
                items.append(.init(key: name, role: .notAToken, value: "absent", fate: .notPresent, note: "not in the plist"))
            }
        }
        // With `keys:`, a string under a name that says nothing is the access token.
        if !unnamed.isEmpty {
            guard unnamed.count == 1, strings[.accessToken] == nil else {
                throw VaultError(
                    .invalidInput,
                    "Cannot tell which of the keys \(unnamed.map { "'\($0.key)'" }.joined(separator: ", ")) is the access token; name one token's keys at a time."
                )
            }
            strings[.accessToken] = unnamed
            items.append(
                .init(
                    key: unnamed[0].key, role: .accessToken, value: Self.describe(unnamed[0].value), fate: .wouldMigrate,
                    entry: entry))
        }
        for (role, found) in strings where found.count > 1 {
            throw VaultError(
                .invalidInput,
                "Found \(found.count) keys that each look like \(role.withArticle) (\(found.map { "'\($0.key)'" }.joined(separator: ", "))); name the keys of one token with --key."
            )
        }

        var groups: [Group] = []
        if !strings.isEmpty {
            guard let access = strings[.accessToken]?.first else {
                let keys = strings.values.flatMap { $0.map(\.key) }.sorted()
                throw VaultError(
                    .invalidInput,
                    "Found \(keys.map { "'\($0)'" }.joined(separator: ", ")) but no access token to keep with it; TokenVault stores a refresh or ID token together with its access token. Name the access token's key with --key."
                )
            }
            let refresh = strings[.refreshToken]?.first
            let id = strings[.idToken]?.first
            let token = OAuthToken(
                accessToken: access.value, refreshToken: refresh?.value, idToken: id?.value, issuedAt: now,
                expiresAt: expiry?.date)
            if let expiry {
                items.append(
                    .init(
                        key: expiry.key, role: .expiry, value: "date", fate: .leftAlone, entry: entry,
                        note: "used as the token's expiry; not secret, so it stays"))
            }
            groups.append(Group(token: token, keys: [access.key, refresh?.key, id?.key].compactMap { $0 }))
        }
        groups += models.map { Group(token: $0.token, keys: [$0.key]) }
        guard groups.count <= 1 else {
            let described = groups.map { $0.keys.map { "'\($0)'" }.joined(separator: " + ") }
            throw VaultError(
                .invalidInput,
                "Found \(groups.count) separate tokens (\(described.joined(separator: "; "))). Migrate one at a time: name its keys with --key and its entry with --service/--account."
            )
        }
        for group in groups {
            try group.token.validateCharacters(source: "The token in \(group.keys.map { "'\($0)'" }.joined(separator: " + ")): its")
        }
        let used = Set(items.map(\.key))
        let untouched = dictionary.keys.filter { !used.contains($0) }.sorted()
        return Result(groups: groups, items: items.sorted { $0.key < $1.key }, untouchedKeys: untouched)
    }
}

extension MigrationReport.Role {
    /// "an access token", "a refresh token", for messages.
    var withArticle: String {
        let words = rawValue.replacingOccurrences(of: "-", with: " ")
        let vowel = words.first.map { "aeiou".contains($0) } ?? false
        return (vowel ? "an " : "a ") + words
    }
}

extension NSNumber {
    /// Whether this number is a plist/JSON boolean rather than a numeric value.
    fileprivate var isBoolean: Bool {
        // Foundation gives plist and JSON booleans the Objective-C type `c` on both platforms.
        String(cString: objCType) == "c"
    }
}
