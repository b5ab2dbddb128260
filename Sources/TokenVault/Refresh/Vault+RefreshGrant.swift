public import FoundationEssentials
import Logging

extension Vault {
    /// Saves `token` under `key` together with the client's registration, so that
    /// ``freshToken(for:leeway:timeout:client:)``, any other process and `vault get --fresh` can
    /// refresh it by themselves. The client secret in `registration`, if any, is sealed in the
    /// same entry.
    ///
    /// Saving replaces the whole entry: a refresh token the server had rejected is forgotten with
    /// it, and `registration: nil` drops the registration the entry held.
    /// ``saveToken(_:for:)`` keeps the stored registration instead.
    public func saveToken(_ token: OAuthToken, for key: CredentialKey, registration: ClientRegistration?) async throws {
        try await store.save(StoredEntry(token: token, refresh: registration).storedForm(), for: key, contentType: .json)
        logger.debug("saved token", metadata: ["key": "\(key)", "refreshable": "\(registration != nil)"])
    }

    /// The client registration stored with the entry under `key`, or `nil` if it was saved
    /// without one (or by a release before registrations were stored).
    /// - Throws: `notFound` when there is no entry; `invalidInput` when it is not a token.
    public func registration(for key: CredentialKey) async throws -> ClientRegistration? {
        guard let entry = try await storedEntry(for: key) else { throw Self.noToken(key) }
        return entry.refresh
    }

    /// The token stored under `key` with its refresh description and the server's verdict on its
    /// refresh token, in one read, or `nil` when nothing is stored there. See
    /// ``TokenEntry/refreshability(at:)`` for whether the vault can refresh it by itself.
    /// - Throws: `invalidInput` when the entry is not a token (an opaque secret).
    public func tokenEntry(for key: CredentialKey) async throws -> TokenEntry? {
        try await storedEntry(for: key).map(TokenEntry.init)
    }

    /// Whether the server has rejected the refresh token stored under `key` (the verdict is
    /// stored with the entry, so every process knows): only a new login helps then.
    package func refreshTokenRejection(for key: CredentialKey) async throws -> OAuthErrorResponse? {
        guard let entry = try await storedEntry(for: key) else { throw Self.noToken(key) }
        return try entry.refreshTokenRejected()
    }

    /// Returns the token stored under `key`, first refreshing it with its stored
    /// ``ClientRegistration`` if it expires within `leeway` seconds: one refresh per expiry across
    /// every task and process, as ``freshToken(for:leeway:timeout:refresh:)`` does.
    ///
    /// ```swift
    /// let token = try await vault.freshToken(for: key)
    /// request.setValue("\(token.tokenType) \(token.accessToken)", forHTTPHeaderField: "Authorization")
    /// ```
    ///
    /// A token that is still fresh costs one read: no lock, no request.
    ///
    /// - Parameters:
    ///   - key: the entry to read and, when it is stale, refresh.
    ///   - leeway: a token that expires within this many seconds is refreshed first.
    ///   - timeout: how long to wait for another task's or process's refresh of the same entry.
    ///   - client: How requests are sent (time-out, retries) and the clock that decides
    ///     whether the token has expired; inject a clock in tests.
    /// - Throws: ``VaultError`` with code
    ///   - `notFound` when nothing is stored under `key`;
    ///   - `expired` when the token has expired and the entry has no refresh description (save one
    ///     with ``saveToken(_:for:registration:)``, or use the closure form);
    ///   - `reauthenticationRequired` when the server rejected the refresh token (now, or before:
    ///     the verdict is stored, and that refresh token is never presented again), or there is none;
    ///   - `configurationError` when the server refused the client (`invalid_client`);
    ///   - `networkFailure` when the endpoint could not be reached, or kept failing, after the
    ///     client's bounded retries; `httpError` for an HTTP error that is not an OAuth answer;
    ///   - `timeout` when another process held the key's refresh lock past `timeout`.
    ///
    ///   On every error the stored token is left as it was.
    public func freshToken(
        for key: CredentialKey,
        leeway: TimeInterval = 60,
        timeout: Duration = .seconds(30),
        client: TokenEndpointClient = TokenEndpointClient()
    ) async throws -> OAuthToken {
        switch try await freshTokenOutcome(for: key, leeway: leeway, timeout: timeout, client: client) {
        case .current(let token), .refreshed(let token):
            return token
        case .stale:
            throw VaultError(
                .expired,
                "The token for \(key) has expired, and the entry holds no client registration; store one (vault set or vault login with --token-url and --client-id) or refresh it yourself.")
        }
    }

    /// What ``freshToken(for:leeway:timeout:client:)`` found, for a caller that needs to know
    /// more than the token: whether it was fresh enough as stored, came out of a refresh, or is
    /// stale and cannot be refreshed.
    public enum FreshTokenOutcome: Sendable {
        /// The stored token, which does not expire within the leeway; nothing was sent.
        case current(OAuthToken)
        /// The token a refresh got: this call's, or another task's or process's that this call
        /// waited for. As fresh as the server makes them, whatever the leeway.
        case refreshed(OAuthToken)
        /// The stored token, which expires within the leeway (or has expired), of an entry that
        /// holds no client registration: nothing could refresh it.
        case stale(OAuthToken)

        /// The token, whichever case.
        public var token: OAuthToken {
            switch self {
            case .current(let token), .refreshed(let token), .stale(let token): token
            }
        }
    }

    /// As ``freshToken(for:leeway:timeout:client:)``, with one read of the entry, but a stale
    /// token that cannot be refreshed is returned as ``FreshTokenOutcome/stale(_:)`` rather than
    /// thrown, and a refreshed one says so: the `vault` command judges expiry once from this.
    /// - Throws: as ``freshToken(for:leeway:timeout:client:)``, except `expired`.
    public func freshTokenOutcome(
        for key: CredentialKey,
        leeway: TimeInterval = 60,
        timeout: Duration = .seconds(30),
        client: TokenEndpointClient = TokenEndpointClient()
    ) async throws -> FreshTokenOutcome {
        guard let entry = try await storedEntry(for: key) else { throw Self.noToken(key) }
        // A rejected entry's token is never handed out as fresh, however long it has left.
        if let rejection = try entry.refreshTokenRejected() { throw Self.reauthenticationRequired(key, rejection) }
        let now = client.clock.now
        if !entry.token.isExpired(at: now(), leeway: leeway) {
            return .current(entry.token)
        }
        guard entry.refresh != nil else { return .stale(entry.token) }
        return .refreshed(
            try await flight(
                key, need: .expiring(leeway: leeway, seen: entry.token), timeout: timeout, now: now,
                operation: Self.grant(client, key: key)))
    }

    /// Refreshes the token under `key` now, whether or not it has expired, with its stored
    /// ``ClientRegistration``. Concurrent callers in this process share the refresh.
    /// - Throws: as ``freshToken(for:leeway:timeout:client:)``, and `configurationError` when the
    ///   entry has no refresh description.
    public func refreshToken(
        for key: CredentialKey, timeout: Duration = .seconds(30), client: TokenEndpointClient = TokenEndpointClient()
    ) async throws -> OAuthToken {
        guard let entry = try await storedEntry(for: key) else { throw Self.noToken(key) }
        guard entry.refresh != nil else { throw Self.noDescription(key) }
        return try await flight(key, need: .always, timeout: timeout, now: client.clock.now, operation: Self.grant(client, key: key))
    }

    /// Call this when a resource server refused `accessToken` (HTTP 401) although it looked
    /// valid: refreshes the token under `key` only if the stored access token is still the one
    /// that failed, so several callers reporting the same 401 cause one refresh. A caller whose
    /// token was already replaced gets the stored one.
    ///
    /// ```swift
    /// var token = try await vault.freshToken(for: key)
    /// if try await api.get(with: token).status == 401 {
    ///     token = try await vault.refreshAfterRejection(of: token.accessToken, for: key)
    /// }
    /// ```
    public func refreshAfterRejection(
        of accessToken: String, for key: CredentialKey, timeout: Duration = .seconds(30),
        client: TokenEndpointClient = TokenEndpointClient()
    ) async throws -> OAuthToken {
        guard let entry = try await storedEntry(for: key) else { throw Self.noToken(key) }
        if entry.token.accessToken != accessToken { return entry.token }
        guard entry.refresh != nil else { throw Self.noDescription(key) }
        return try await flight(
            key, need: .stillAccessToken(accessToken), timeout: timeout, now: client.clock.now,
            operation: Self.grant(client, key: key))
    }

    private static func grant(_ client: TokenEndpointClient, key: CredentialKey) -> @Sendable (StoredEntry) async throws -> OAuthToken {
        { entry in
            guard let description = entry.refresh else { throw noDescription(key) }
            // A DPoP-bound grant is refreshed with its own key, never another (or none).
            var client = client
            client.dpopKey = entry.dpop
            if entry.dpop != nil, DPoPSigners.current == nil { throw DPoPSigners.missing("Refreshing \(key)") }
            return try await client.refresh(entry.token, using: description)
        }
    }

    private static func noDescription(_ key: CredentialKey) -> VaultError {
        VaultError(
            .configurationError,
            "The entry \(key) holds no client registration (no refresh description), so the vault cannot refresh it; store one with --token-url and --client-id (vault set, vault login).")
    }
}
