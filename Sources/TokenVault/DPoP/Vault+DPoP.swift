public import FoundationEssentials
import Logging

extension Vault {
    /// Saves `token` under `key` with the client's registration and the DPoP key it is bound to
    /// (RFC 9449), so that every later token request (refresh) and resource request of this
    /// entry is signed with that key. The key is sealed in the entry like the refresh token: no
    /// API, command or output hands it out again.
    ///
    /// ```swift
    /// var client = TokenEndpointClient()
    /// client.dpopKey = try DPoPKey.generate(.es256)   // needs `import TokenVaultDPoP; DPoP.install()`
    /// let token = try await login.run(client: client) { url in print("Open \(url)") }
    /// try await vault.saveToken(token, for: key, registration: registration, dpopKey: client.dpopKey)
    /// ```
    ///
    /// Saving replaces the whole entry, as ``saveToken(_:for:registration:)`` does.
    public func saveToken(
        _ token: OAuthToken, for key: CredentialKey, registration: ClientRegistration?, dpopKey: DPoPKey?
    ) async throws {
        try await store.save(
            StoredEntry(token: token, refresh: registration, dpop: dpopKey).storedForm(), for: key, contentType: .json)
        logger.debug("saved token", metadata: ["key": "\(key)", "refreshable": "\(registration != nil)", "dpop": "\(dpopKey != nil)"])
    }

    /// The thumbprint (`jkt`) and algorithm of the DPoP key stored with the entry under `key`, or
    /// `nil` when its tokens are not DPoP-bound. Never the key itself.
    /// - Throws: `notFound` when there is no entry; `invalidInput` when it is not a token.
    public func dpopKeyInfo(for key: CredentialKey) async throws -> (thumbprint: String, algorithm: DPoPAlgorithm)? {
        guard let entry = try await storedEntry(for: key) else { throw Self.noToken(key) }
        return entry.dpop.map { ($0.thumbprint, $0.algorithm) }
    }

    /// The header fields that authorize a `method` request to `url` with the fresh token of the
    /// entry under `key` (refreshed first if it expires within `leeway`, as
    /// ``freshToken(for:leeway:timeout:client:)`` does): `Authorization: Bearer …`, or for a
    /// DPoP-bound entry `Authorization: DPoP …` with a new `DPoP` proof for this request (with
    /// `ath`, and the resource server's last nonce unless `nonce` names one).
    ///
    /// ```swift
    /// let headers = try await vault.authorizationHeaders(for: key, method: "GET", url: url)
    /// for field in headers.fields { request.setValue(field.value, forHTTPHeaderField: field.name) }
    /// ```
    /// ``TokenAuthorizer`` does this, and meets a resource server's nonce challenge and a refused
    /// token once each.
    /// - Throws: as ``freshToken(for:leeway:timeout:client:)``; `configurationError` for a DPoP
    ///   token in a program without the `TokenVaultDPoP` signer, or an entry without its key.
    public func authorizationHeaders(
        for key: CredentialKey, method: String, url: URL, nonce: String? = nil, leeway: TimeInterval = 60,
        timeout: Duration = .seconds(30), client: TokenEndpointClient = TokenEndpointClient()
    ) async throws -> AuthorizationHeaders {
        let (token, dpopKey) = try await freshTokenAndKey(for: key, leeway: leeway, timeout: timeout, client: client)
        return try AuthorizationHeaders.make(
            token: token, dpopKey: dpopKey, key: key, method: method, url: url, nonce: nonce)
    }

    /// A DPoP proof for a `method` request to `url`, signed with the key of the entry under
    /// `key`: for a resource request pass the access token it goes with (`ath`); for a token
    /// request, `nil`. The agent signs for its clients with this; they never see the key.
    /// - Throws: `notFound`; `configurationError` when the entry has no DPoP key or the program
    ///   cannot sign; `invalidInput` for a method or URL a proof cannot name.
    public func dpopProof(
        for key: CredentialKey, method: String, url: URL, accessToken: String?, nonce: String? = nil
    ) async throws -> String {
        guard let entry = try await storedEntry(for: key) else { throw Self.noToken(key) }
        return try Self.dpopProof(signedBy: entry.dpop, of: key, method: method, url: url, accessToken: accessToken, nonce: nonce)
    }

    /// As ``dpopProof(for:method:url:accessToken:nonce:)``, with `dpopKey`, the key already read
    /// with the entry under `key` (`nil`: it holds none): the agent reads the entry once per proof,
    /// for the token and its key together.
    package static func dpopProof(
        signedBy dpopKey: DPoPKey?, of key: CredentialKey, method: String, url: URL, accessToken: String?, nonce: String?
    ) throws -> String {
        guard let dpopKey else {
            throw VaultError(.configurationError, "The entry \(key) holds no DPoP key; its tokens are not DPoP-bound.")
        }
        let role: DPoPNonces.Role = accessToken == nil ? .authorizationServer : .resourceServer
        return try dpopKey.proof(method: method, url: url, nonce: nonce ?? DPoPNonces.nonce(for: url, role), accessToken: accessToken)
    }

    /// The token under `key`, as ``token(for:)`` reads it, and for a DPoP token the DPoP key
    /// stored with it, from one read of the entry; `nil` when there is no entry.
    package func tokenAndDPoPKey(for key: CredentialKey) async throws -> (token: OAuthToken, dpopKey: DPoPKey?)? {
        guard let data = try await store.load(key) else { return nil }
        let token = try Self.token(storedForm: data, of: key)
        guard token.tokenType.equalsIgnoringCase("DPoP") else { return (token, nil) }
        return (token, try StoredEntry(storedForm: data).dpop)
    }

    /// Gives the entry under `key` a new DPoP key of `algorithm` (by default the old key's) and
    /// forgets the old one. The entry's tokens were bound to the old key, and a server refuses
    /// them with any other, the refresh token included: so a new grant is needed. The entry keeps
    /// its registration and is marked for a new login (``TokenEntry/refreshability(at:)`` is
    /// `rejected`; ``freshToken(for:leeway:timeout:client:)`` throws `reauthenticationRequired`),
    /// and `vault rotate-dpop-key` says so. A new login (`vault login … --dpop`) makes and binds a
    /// new key by itself.
    /// - Returns: the new key's thumbprint.
    /// - Throws: `notFound`; `configurationError` when the program cannot make keys.
    @discardableResult
    public func rotateDPoPKey(for key: CredentialKey, algorithm: DPoPAlgorithm? = nil) async throws -> String {
        guard var entry = try await storedEntry(for: key) else { throw Self.noToken(key) }
        // A Bearer entry has no key to retire: rotating would only bind a working token to a
        // key its server never saw, and end its grant.
        guard let oldKey = entry.dpop else {
            throw VaultError(
                .invalidInput,
                "The entry \(key) is not DPoP-bound (it has no DPoP key), so there is no key to rotate and nothing was changed. To bind its tokens to a DPoP key, log in with --dpop.")
        }
        let newKey = try DPoPKey.generate(algorithm ?? oldKey.algorithm)
        entry.dpop = newKey
        entry.presenting = nil
        entry.rejection = nil
        if let refreshToken = entry.token.refreshToken {
            entry.rejection = RefreshRejection(
                error: Self.dpopKeyRotated, errorDescription: "the DPoP key was rotated; the grant was bound to the old key",
                refreshTokenHash: try RefreshRejection.hash(refreshToken), at: Int64(Date().timeIntervalSince1970.rounded()))
        }
        // The access token, bound to the old key, counts as expired from now on.
        entry.token = OAuthToken(
            accessToken: entry.token.accessToken, tokenType: entry.token.tokenType, refreshToken: entry.token.refreshToken,
            scope: entry.token.scope, issuedAt: entry.token.issuedAt, expiresAt: Date(timeIntervalSince1970: 0))
        try await store.save(entry.storedForm(), for: key, contentType: .json)
        DPoPKeyCache.forget(oldKey.thumbprint)
        logger.notice("rotated the DPoP key; the entry needs a new login", metadata: ["key": "\(key)"])
        return newKey.thumbprint
    }

    /// The verdict a key rotation leaves on the entry (``rotateDPoPKey(for:algorithm:)``).
    static let dpopKeyRotated = "dpop_key_rotated"

    /// The fresh token under `key` (as ``freshToken(for:leeway:timeout:client:)``) and the DPoP
    /// key stored with it, in one read when the token is fresh.
    package func freshTokenAndKey(
        for key: CredentialKey, leeway: TimeInterval, timeout: Duration, client: TokenEndpointClient
    ) async throws -> (OAuthToken, DPoPKey?) {
        guard let entry = try await storedEntry(for: key) else { throw Self.noToken(key) }
        if let rejection = try entry.refreshTokenRejected() { throw Self.reauthenticationRequired(key, rejection) }
        if !entry.token.isExpired(at: client.clock.now(), leeway: leeway) { return (entry.token, entry.dpop) }
        // The key does not change with a refresh (the grant is bound to it).
        return (try await freshToken(for: key, leeway: leeway, timeout: timeout, client: client), entry.dpop)
    }
}
