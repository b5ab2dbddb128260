import TokenVault
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
        /// The keys as reported: `accessToken`, or `accounts[0].accessToken` when nested.
        var keys: [String]
        /// Where each key is, to remove it.
        var paths: [PlistPath]
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
    /// Words that mark a dictionary as holding tokens that are not OAuth tokens.
    private static let contextParts = ["device", "push", "apns", "fcm", "csrf", "xsrf"]

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

    /// Finds and groups the tokens in `dictionary`. With `only`, takes exactly those top-level
    /// keys. Without it, also looks inside arrays and dictionaries (`{"accounts":[{"accessToken":
    /// …}]}`): a nested dictionary's token strings are grouped as the top level's are, and only
    /// those strings are removed from it, never the dictionary or the array around it.
    /// - Throws: `invalidInput` when the values cannot be grouped into one token unambiguously,
    ///   when a token holds characters a token cannot hold, or when an `NSKeyedArchiver` archive
    ///   holds token-like keys (an archive cannot be rewritten safely, so its tokens would stay).
    func detect(in dictionary: [String: Any], only: [String]?, entry: CredentialKey) throws -> Result {
        var items: [MigrationReport.Item] = []
        var groups: [Group] = []
        try scan(dictionary, at: [], only: only.map { Set($0) }, depth: 0, entry: entry, items: &items, groups: &groups)
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
        let used = Set(items.map { $0.keyPath?.first ?? $0.key })
        let untouched = dictionary.keys.filter { !used.contains($0) }.sorted()
        return Result(groups: groups, items: items.sorted { $0.key < $1.key }, untouchedKeys: untouched)
    }

    /// Scans one dictionary: the top level (`path` empty), or one nested in it.
    private func scan(
        _ dictionary: [String: Any], at prefix: [PlistPath.Component], only explicit: Set<String>?, depth: Int,
        entry: CredentialKey, items: inout [MigrationReport.Item], groups: inout [Group]
    ) throws {
        var models: [(path: PlistPath, token: OAuthToken)] = []
        var strings: [MigrationReport.Role: [(path: PlistPath, value: String)]] = [:]
        var expiry: (path: PlistPath, date: Date)?
        var unnamed: [(path: PlistPath, value: String)] = []
        let isTopLevel = prefix.isEmpty
        // Under `push`, `deviceToken` or `csrf`, a `token` is not an OAuth token.
        let insideNonToken = prefix.contains {
            guard case .key(let name) = $0 else { return false }
            return Self.contextParts.contains(where: Self.normalized(name).contains)
        }

        func item(_ path: PlistPath, _ role: MigrationReport.Role, _ value: String, _ fate: MigrationReport.Fate, entry: CredentialKey? = nil, note: String? = nil) -> MigrationReport.Item {
            var item = MigrationReport.Item(key: path.display, role: role, value: value, fate: fate, entry: entry, note: note)
            item.keyPath = path.keyPath
            return item
        }

        for name in dictionary.keys.sorted() {
            let value = dictionary[name]!
            if let explicit, !explicit.contains(name) { continue }
            let path = PlistPath(prefix + [.key(name)])
            if explicit == nil, let data = value as? Data {
                try refuseArchiveWithTokens(data, at: path)
            }
            // At the top level a dictionary holding a token model is taken whole; a nested one is
            // scanned below, so that only its token strings are removed from it. A dictionary
            // under `push`, `deviceToken` or `csrf` holds no OAuth token.
            let isContext = Self.contextParts.contains(where: Self.normalized(name).contains)
            if !(value is [String: Any]) || (isTopLevel && !isContext), let token = model(in: value) {
                models.append((path, token))
                items.append(item(path, .tokenModel, Self.describe(value), .wouldMigrate, entry: entry))
                continue
            }
            let role = insideNonToken ? nil : Self.role(forName: name)
            if let text = value as? String, !text.isEmpty {
                if let role {
                    strings[role, default: []].append((path, text))
                    items.append(item(path, role, Self.describe(value), .wouldMigrate, entry: entry))
                    continue
                }
                if explicit != nil {
                    unnamed.append((path, text))
                    continue
                }
            }
            if explicit == nil, let date = value as? Date, date.timeIntervalSince1970.isFinite,
                Self.normalized(name).contains("expir"),
                !Self.normalized(name).contains("refresh")
            {
                expiry = (path, date)
                continue
            }
            if explicit != nil {
                throw VaultError(
                    .invalidInput,
                    "The key '\(name)' holds \(Self.describe(value)), which is neither a token string nor a token model."
                )
            }
            if value is [String: Any] || value is [Any] {
                let before = items.count
                try walk(value, at: path.components, depth: depth + 1, entry: entry, items: &items, groups: &groups)
                // Something was found inside: the container itself is not reported.
                if items.count > before { continue }
            }
            if role != nil || Self.looksTokenRelated(name) {
                // A string reaches here only when its name was not recognised: say so, not that
                // the value was judged.
                let unrecognised = role == nil && (value as? String).map { !$0.isEmpty } == true
                items.append(
                    item(
                        path, .notAToken, Self.describe(value), .leftAlone,
                        note: insideNonToken
                            ? "inside a value about push notifications, devices or CSRF, not an OAuth token"
                            : unrecognised
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
                    "Cannot tell which of the keys \(unnamed.map { "'\($0.path.display)'" }.joined(separator: ", ")) is the access token; name one token's keys at a time."
                )
            }
            strings[.accessToken] = unnamed
            items.append(item(unnamed[0].path, .accessToken, Self.describe(unnamed[0].value), .wouldMigrate, entry: entry))
        }
        for (role, found) in strings where found.count > 1 {
            throw VaultError(
                .invalidInput,
                "Found \(found.count) keys that each look like \(role.withArticle) (\(found.map { "'\($0.path.display)'" }.joined(separator: ", "))); name the keys of one token with --key."
            )
        }

        if !strings.isEmpty {
            guard let access = strings[.accessToken]?.first else {
                let keys = strings.values.flatMap { $0.map(\.path.display) }.sorted()
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
                    item(
                        expiry.path, .expiry, "date", .leftAlone, entry: entry,
                        note: "used as the token's expiry; not secret, so it stays"))
            }
            let paths = [access.path, refresh?.path, id?.path].compactMap { $0 }
            groups.append(Group(token: token, keys: paths.map(\.display), paths: paths))
        }
        groups += models.map { Group(token: $0.token, keys: [$0.path.display], paths: [$0.path]) }
    }

    /// Looks for tokens inside an array or a nested dictionary.
    private func walk(
        _ value: Any, at prefix: [PlistPath.Component], depth: Int, entry: CredentialKey,
        items: inout [MigrationReport.Item], groups: inout [Group]
    ) throws {
        // PlistBudget has already bounded the nesting of anything parsed; this keeps the
        // recursion bounded whatever the caller passes.
        guard depth <= PlistBudget.maximumDepth else { return }
        if let dictionary = value as? [String: Any] {
            try scan(dictionary, at: prefix, only: nil, depth: depth, entry: entry, items: &items, groups: &groups)
        } else if let array = value as? [Any] {
            for (index, element) in array.enumerated() {
                let path = prefix + [.index(index)]
                if let data = element as? Data {
                    try refuseArchiveWithTokens(data, at: PlistPath(path))
                } else if element is [String: Any] || element is [Any] {
                    try walk(element, at: path, depth: depth + 1, entry: entry, items: &items, groups: &groups)
                }
            }
        }
    }

    /// The names an archive's `$objects` hold, never its values: the keys of every archived
    /// dictionary (`NS.keys`, followed to their strings), and the keys an archived object encoded
    /// itself with (`encode(_:forKey:)`: the keys of its own dictionary, but `$class`).
    /// `unresolved` is true when a reference in `NS.keys` could not be followed.
    static func archivedNames(_ objects: [Any]) -> (names: Set<String>, unresolved: Bool) {
        var names = Set<String>()
        var unresolved = false
        for case let object as [String: Any] in objects {
            if let keys = object["NS.keys"] as? [Any] {
                let indices = archiveIndices(keys)
                for index in indices where objects.indices.contains(index) {
                    if let name = objects[index] as? String { names.insert(name) }
                }
                if indices.count != keys.count { unresolved = true }
            } else {
                names.formUnion(object.keys.filter { !$0.hasPrefix("$") })
            }
        }
        return (names, unresolved)
    }

    /// The indices in `$objects` that an archive's references (plist UIDs) point at, in order.
    /// Foundation has no accessor for them on every platform, but writes each in XML as
    /// `<dict><key>CF$UID</key><integer>N</integer></dict>`.
    static func archiveIndices(_ references: [Any]) -> [Int] {
        guard let xml = try? PropertyListSerialization.data(fromPropertyList: references, format: .xml, options: 0) else { return [] }
        let text = String(decoding: xml, as: UTF8.self)
        var indices: [Int] = []
        var rest = text.startIndex..<text.endIndex
        while let marker = text.range(of: "<key>CF$UID</key>", range: rest),
            let open = text.range(of: "<integer>", range: marker.upperBound..<text.endIndex),
            let close = text.range(of: "</integer>", range: open.upperBound..<text.endIndex),
            let index = Int(text[open.upperBound..<close.lowerBound])
        {
            indices.append(index)
            rest = close.upperBound..<text.endIndex
        }
        return indices
    }

    /// Throws `invalidInput` if `data` is an `NSKeyedArchiver` archive that holds token-like
    /// names. An archive cannot be rewritten without the app's classes, so its tokens cannot be
    /// scrubbed: saying nothing would leave plaintext tokens behind a report of "no tokens".
    private func refuseArchiveWithTokens(_ data: Data, at path: PlistPath) throws {
        guard Self.startsLikeAPlist(data) else { return }
        var format = PropertyListSerialization.PropertyListFormat.binary
        guard let object = try? PlistDocument.propertyList(from: data, format: &format),
            let archive = object as? [String: Any], archive["$archiver"] != nil,
            let objects = archive["$objects"] as? [Any]
        else { return }
        let (names, unresolved) = Self.archivedNames(objects)
        let tokenNames = names.filter { Self.role(forName: $0) != nil && $0.count <= 64 }
        let listed: String
        if !tokenNames.isEmpty {
            listed = tokenNames.sorted().prefix(5).map { "'\($0)'" }.joined(separator: ", ")
        } else if unresolved, objects.contains(where: { ($0 as? String).map { Self.role(forName: $0) != nil } ?? false }) {
            // A key of a dictionary whose references could not be followed: its names cannot be
            // told from its values, so none is shown.
            listed = "not shown: the archive's names could not be told from its values"
        } else {
            return
        }
        throw VaultError(
            .invalidInput,
            "The key '\(path.display)' holds an NSKeyedArchiver archive with token-like keys (\(listed)). TokenVault does not rewrite archives, so those tokens cannot be migrated or scrubbed: they are still in the plist as plain text. Nothing was changed. Move them in the app (decode the archive, save the token with Vault.saveToken, archive it again without it), and migrate the plist's other keys with --key."
        )
    }
}
