public import FoundationEssentials
public import TokenVault

/// The vault as a git credential helper: which entry a request of git's names, and what `get`,
/// `store` and `erase` do with it. `vault git-credential` is a thin shell around this type.
///
/// **Mapping.** By default the entry's service is the request's `host` (with `:port` when there is
/// one, lowercased) and its account is git's `username`, or `default` when git sends none; a
/// request without a username falls back to the service's only entry.
/// ``service`` and ``account`` pin either, so that
/// `credential.https://github.com.helper '!vault git-credential --service github'` uses the entry
/// that `vault login github` made.
///
/// **get** answers the entry's access token as the password, refreshing it first through its
/// stored ``ClientRegistration`` when it expires within ``leeway`` (one refresh per expiry across
/// every process, as ``Vault/freshToken(for:leeway:timeout:client:)`` does). It answers nothing
/// (`nil`) when there is no entry, so that git asks its next helper. It answers only `https`, and
/// plain `http` on loopback: never `http` to another host, and never another protocol (`imap`,
/// `smtp`, `ftp`, …), where the token would cross the network unencrypted (``mayAnswer(_:)``);
/// `store` and `erase` ignore such requests too, so they can neither fill nor empty an entry.
///
/// **store** saves git's password, with `password_expiry_utc` and `oauth_refresh_token` when git
/// sends them. Storing the password the entry already holds changes nothing but what git adds
/// (git stores every credential that worked, including the one this helper gave it). An entry
/// that holds a refresh description is the vault's own (`vault login`): git's copy of its token
/// is the same or older, so a different password does not replace it.
///
/// **erase** acts only if the entry still holds the password git sends (git's own rule for
/// helpers): an erase for a token that was refreshed since cannot delete the fresh one. An entry
/// that is the vault's own (it holds a refresh description, as `vault login` makes) is never
/// removed: git calls `erase` after any 401, and one refused access token must not cost the
/// refresh token, the refresh description and the client secret. Its access token is marked
/// expired instead, so the next `get` refreshes it. An entry whose refresh token the server
/// rejected is kept as it is (see ``erase(_:from:)``).
///
/// **A rejected refresh token.** When ``get(_:from:)`` fails with `reauthenticationRequired`,
/// ``lastKnown(_:from:)`` answers the stale token, so that git tries it and fails with its own
/// "Authentication failed" instead of prompting.
///
/// `store` and `erase` compare and write under the entry's refresh lock, so neither can undo a
/// refresh that another process makes at the same moment.
public struct GitCredentialHelper: Sendable {
    /// The service of the entry, whatever the host; `nil` for the request's host.
    public var service: String?
    /// The account of the entry, whatever the user name; `nil` for git's `username` or `default`.
    public var account: String?
    /// The user name answered when git sends none; `nil` for the entry's account.
    public var username: String?
    /// A token that expires within this many seconds is refreshed before it is answered.
    public var leeway: TimeInterval
    /// How long to wait for another process's refresh of the same entry.
    public var lockTimeout: Duration
    /// How refresh requests are sent, and the clock that decides expiry.
    public var client: TokenEndpointClient

    public init(
        service: String? = nil, account: String? = nil, username: String? = nil, leeway: TimeInterval = 60,
        lockTimeout: Duration = .seconds(30), client: TokenEndpointClient = TokenEndpointClient()
    ) {
        self.service = service
        self.account = account
        self.username = username
        self.leeway = leeway
        self.lockTimeout = lockTimeout
        self.client = client
    }

    /// The entry `request` names, or `nil` when it names none (no host and no pinned service).
    /// - Throws: `invalidInput` when the names make no valid ``CredentialKey``.
    package func key(for request: GitCredentialRequest) throws -> CredentialKey? {
        let service: String
        if let pinned = self.service {
            service = pinned
        } else if let host = request.host, !host.isEmpty {
            service = host.lowercased()
        } else {
            return nil
        }
        let account = self.account ?? gitUsername(request) ?? CredentialKey.defaultAccount
        return try CredentialKey(service: service, account: account)
    }

    /// The user name git sends, as an account: `nil` when it sends none, an empty one, or the
    /// ``username`` this helper answers in its place (git sends that back with `store` and `erase`,
    /// and it names no account of its own).
    func gitUsername(_ request: GitCredentialRequest) -> String? {
        guard let name = request.username, !name.isEmpty, name != username else { return nil }
        return name
    }

    /// Whether `request` may be answered with the service's only entry when ``key(for:)`` names
    /// none: git sent no username (or the ``username`` this helper answers) and no account is
    /// pinned. ``entryKey(for:in:)``'s rule, for a caller that lists the accounts elsewhere (the
    /// agent).
    package func usesOnlyEntry(_ request: GitCredentialRequest) -> Bool {
        account == nil && gitUsername(request) == nil
    }

    /// The entry that `get`, `store` and `erase` use for `request`: ``key(for:)``, except when git
    /// sends no username (or the ``username`` this helper answers) and no account is pinned. Then,
    /// as git's own storage helpers match a request that leaves a field out against any value of
    /// it, the service's `default` entry is used if there is one, else the service's only entry.
    /// `nil` when there is none, or several and no `default` (``accounts(for:in:)`` names them).
    ///
    /// This is what makes a URL without a user name work the second time: git prompts, then
    /// stores the credential under the user name the person typed, and sends no user name again.
    package func entryKey(for request: GitCredentialRequest, in vault: Vault) async throws -> CredentialKey? {
        guard let key = try key(for: request) else { return nil }
        guard usesOnlyEntry(request) else { return key }
        let keys = try await vault.keys(service: key.service)
        if keys.contains(key) { return key }
        return keys.count == 1 ? keys[0] : nil
    }

    /// The accounts of the service `request` names, when git sent no username and no account is
    /// pinned; empty otherwise. For saying why ``entryKey(for:in:)`` found none.
    package func accounts(for request: GitCredentialRequest, in vault: Vault) async throws -> [String] {
        guard let key = try key(for: request), usesOnlyEntry(request) else { return [] }
        return try await vault.keys(service: key.service).map(\.account)  // keys come sorted
    }

    /// Whether a token may be answered for `request`: `https`, or plain `http` to a loopback host.
    /// Any other protocol (`imap`, `smtp`, `ftp`, none at all) is refused: git hands a helper's
    /// password to `git imap-send` and to curl's `ftp://` as they are, in clear.
    public func mayAnswer(_ request: GitCredentialRequest) -> Bool {
        switch request.scheme?.lowercased() {
        case "https":
            return true
        case "http":
            guard let host = request.host else { return false }
            return ClientRegistration.isLoopback(Self.hostName(host))
        default:
            return false
        }
    }

    /// `host` without its `:port` (an IPv6 literal keeps its brackets until isLoopback drops them).
    static func hostName(_ host: String) -> String {
        if host.hasPrefix("["), let end = host.firstIndex(of: "]") {
            return String(host[...end])
        }
        if let colon = host.lastIndex(of: ":"), host.firstIndex(of: ":") == colon {
            return String(host[..<colon])
        }
        return host
    }

    /// The answer to `get`, or `nil` when the vault has none for `request`.
    /// - Throws: what ``Vault/freshToken(for:leeway:timeout:client:)`` throws, but `notFound`:
    ///   `expired` (stale and no refresh description), `reauthenticationRequired`, `networkFailure`, …
    public func get(_ request: GitCredentialRequest, from vault: Vault) async throws -> GitCredentialResponse? {
        guard mayAnswer(request), let key = try await entryKey(for: request, in: vault) else { return nil }
        let token: OAuthToken
        do {
            token = try await vault.freshToken(for: key, leeway: leeway, timeout: lockTimeout, client: client)
        } catch let error as VaultError where error.code == .notFound {
            return nil
        }
        let name = request.username.flatMap { $0.isEmpty ? nil : $0 } ?? username ?? key.account
        return GitCredentialResponse(username: name, password: token.accessToken, passwordExpiry: token.expiresAt)
    }

    /// The answer to `get` after ``get(_:from:)`` failed with `reauthenticationRequired` (the
    /// server rejected the refresh token, now or before): the stored access token as it is,
    /// without `password_expiry_utc`, or `nil` when the vault has none for `request`.
    ///
    /// Git then sends it, the server refuses it, and git fails with its own "Authentication
    /// failed" (and calls `erase`, which keeps such an entry: see ``erase(_:from:)``). Answering
    /// nothing would instead leave git to prompt, or with prompts disabled to fail with "terminal
    /// prompts disabled", which hides what happened. The expiry is left out because git ≥ 2.41
    /// drops a password whose expiry has passed without trying it. The token is no secret worth
    /// keeping by then: it is expired or revoked; and it goes only where ``mayAnswer(_:)`` allows.
    public func lastKnown(_ request: GitCredentialRequest, from vault: Vault) async throws -> GitCredentialResponse? {
        guard mayAnswer(request), let key = try await entryKey(for: request, in: vault),
            let entry = try await vault.storedEntry(for: key), !entry.token.accessToken.isEmpty
        else { return nil }
        let name = request.username.flatMap { $0.isEmpty ? nil : $0 } ?? username ?? key.account
        return GitCredentialResponse(username: name, password: entry.token.accessToken, passwordExpiry: nil)
    }

    /// What ``store(_:in:)`` did.
    public enum StoreOutcome: Sendable, Equatable {
        /// The request names no entry, or carries no password.
        case ignored
        /// A new token was saved (a new entry, or a different password over a plain one).
        case saved
        /// The entry already held this password; what git added (expiry, refresh token) was merged.
        case updated
        /// The entry already held this password and everything git sent.
        case unchanged
        /// The entry is the vault's own (it holds a refresh description) and holds a different
        /// token; it was left as it was.
        case keptManagedEntry
    }

    /// Saves the credential git approved. See the type's documentation for the rules.
    /// - Throws: `invalidInput` when the entry holds an opaque secret, not a token (it is not
    ///   overwritten); the store's errors.
    @discardableResult
    public func store(_ request: GitCredentialRequest, in vault: Vault) async throws -> StoreOutcome {
        guard mayAnswer(request), let password = request.password, !password.isEmpty, let named = try key(for: request) else {
            return .ignored
        }
        let key = try await entryKey(for: request, in: vault) ?? named
        return try await vault.withEntryLock(key, timeout: lockTimeout) {
            guard var entry = try await vault.storedEntry(for: key) else {
                try await vault.saveToken(try Self.token(from: request, password: password), for: key)
                return .saved
            }
            guard Self.same(entry.token.accessToken, password) else {
                if entry.refresh != nil { return .keptManagedEntry }
                try await vault.saveToken(try Self.token(from: request, password: password), for: key)
                return .saved
            }
            var token = entry.token
            if let expiry = request.passwordExpiry { token.expiresAt = OAuthToken.wholeSeconds(expiry) }
            if let refreshToken = request.oauthRefreshToken, !refreshToken.isEmpty { token.refreshToken = refreshToken }
            guard token != entry.token else { return .unchanged }
            if token.refreshToken != entry.token.refreshToken { entry.rejection = nil }
            entry.token = token
            try await vault.store.save(entry.storedForm(), for: key, contentType: .json)
            return .updated
        }
    }

    /// Forgets the password git sends, if the entry still holds it. Returns whether it changed
    /// anything.
    ///
    /// A plain entry is removed. An entry that is the vault's own (it holds a refresh description,
    /// as `vault login` makes) is kept with everything that refreshes it (refresh token, refresh
    /// description, client secret); only its access token is dropped from use, by marking it
    /// expired, so the next `get` refreshes instead of answering the token the server refused.
    /// git calls `erase` after every 401, and one refused access token must not cost a new login.
    ///
    /// An entry whose refresh token the server has rejected is kept as it is: it is the vault's
    /// record that a new login is needed (`vault get --fresh` and every later `get` say so, without
    /// asking the server again) and holds the refresh description that login renews. Erasing it
    /// would turn the next failure into a silent "no credential".
    /// - Throws: `invalidInput` when the entry holds an opaque secret (it is kept); the store's errors.
    @discardableResult
    public func erase(_ request: GitCredentialRequest, from vault: Vault) async throws -> Bool {
        guard mayAnswer(request), let password = request.password, let key = try await entryKey(for: request, in: vault) else {
            return false
        }
        return try await vault.withEntryLock(key, timeout: lockTimeout) {
            guard var entry = try await vault.storedEntry(for: key), Self.same(entry.token.accessToken, password),
                try entry.refreshTokenRejected() == nil
            else {
                return false
            }
            // A plain entry goes, through the store: Vault.delete would wait for the lock this erase holds.
            guard entry.refresh != nil else { return try await vault.store.delete(key) }
            let now = client.clock.now()
            if let expiresAt = entry.token.expiresAt, expiresAt <= now { return false }
            entry.token.expiresAt = OAuthToken.wholeSeconds(now.addingTimeInterval(-1))
            try await vault.store.save(entry.storedForm(), for: key, contentType: .json)
            return true
        }
    }

    /// The token git's credential describes: the password as a bearer access token, or, when it
    /// is not one (RFC 6750 allows letters, digits and `-._~+/=` only), as a `Basic` one: a
    /// password such as `p@ssw0rd!` that git sends with HTTP Basic authentication, as it does
    /// every password. A password that no stored token can hold (a space, a control or a
    /// non-ASCII character) is refused with a message that says git will ask for it again.
    static func token(from request: GitCredentialRequest, password: String) throws -> OAuthToken {
        guard TokenSyntax.isVisibleASCII(password) else {
            throw VaultError(
                .invalidInput,
                "The password git sent holds a space, a control or a non-ASCII character, which the vault stores in no token; it was not stored, and git will ask for it again. Use a token (or a password without such characters) for this host.")
        }
        return OAuthToken(
            accessToken: password, tokenType: TokenSyntax.isB64Token(password) ? "Bearer" : "Basic",
            refreshToken: request.oauthRefreshToken.flatMap { $0.isEmpty ? nil : $0 },
            expiresAt: request.passwordExpiry)
    }

    /// Compares two secrets without stopping at the first difference.
    static func same(_ left: String, _ right: String) -> Bool {
        Sodium.constantTimeEqual(left, right)
    }
}
