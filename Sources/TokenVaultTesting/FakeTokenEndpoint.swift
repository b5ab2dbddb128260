public import Foundation
public import TokenVault

/// An OAuth token endpoint and a resource server in process, with no socket: what a unit test of
/// refresh, rejection and 401 handling needs, given to the vault as its ``TokenTransport``.
///
/// It answers the refresh grant (RFC 6749 §6) as a rotating server does: each refresh issues a
/// new access token and, unless told otherwise, a new refresh token, after which the old refresh
/// token is refused with `invalid_grant`. The resource server side says whether an access token is
/// the current one.
///
/// ```swift
/// let endpoint = FakeTokenEndpoint()
/// let vault = Vault(store: MemoryStore())
/// try await vault.saveToken(await endpoint.issueToken(expiresIn: 0), for: key, registration: try endpoint.registration())
/// let token = try await vault.freshToken(for: key, client: endpoint.client)   // refreshed once
/// #expect(await endpoint.refreshCount == 1)
/// #expect(await endpoint.resourceStatus(for: token.accessToken) == 200)
/// ```
public actor FakeTokenEndpoint: TokenTransport {
    /// Where the fake token endpoint is. Requests never leave the process; the host is under
    /// `.invalid` (RFC 2606), which resolves nowhere.
    public nonisolated let tokenEndpoint = URL(string: "https://token.fake.invalid/token")!
    /// The fake resource server: a `GET` here with `Authorization: Bearer <token>` is answered 200
    /// for a current access token and 401 with `WWW-Authenticate: Bearer error="invalid_token"`
    /// otherwise, as ``resourceStatus(for:)`` says (for `TokenAuthorizer`'s tests).
    public nonisolated let resourceURL = URL(string: "https://token.fake.invalid/resource")!
    /// The client id it accepts.
    public nonisolated let clientID: String
    /// The lifetime, in seconds, of the access tokens that refreshes issue.
    public var lifetime: Int
    /// Whether a refresh also replaces the refresh token (and retires the old one).
    public var rotatesRefreshTokens: Bool

    /// How many refresh grants were answered with a new token.
    public private(set) var refreshCount = 0
    /// Every request the endpoint received, answered or not.
    public private(set) var requestCount = 0

    private var liveRefreshTokens: Set<String> = []
    private var currentAccessTokens: Set<String> = []
    private var failures: [Int] = []
    private var serial = 0

    public init(clientID: String = "fake-client", lifetime: Int = 3600, rotatesRefreshTokens: Bool = true) {
        self.clientID = clientID
        self.lifetime = lifetime
        self.rotatesRefreshTokens = rotatesRefreshTokens
    }

    /// The client registration that refreshes at this endpoint, for ``Vault/saveToken(_:for:registration:)``.
    public nonisolated func registration(scope: String? = nil) throws -> ClientRegistration {
        try ClientRegistration(tokenEndpoint: tokenEndpoint, clientID: clientID, scope: scope)
    }

    /// A client whose requests come here, with no retry back-off, for
    /// ``Vault/freshToken(for:leeway:timeout:client:)`` and ``Vault/refreshAfterRejection(of:for:timeout:client:)``.
    public nonisolated var client: TokenEndpointClient {
        TokenEndpointClient(initialBackoff: .zero, transport: self)
    }

    /// A token as a login would issue it: a fresh access token and a live refresh token. Give
    /// `expiresIn: 0` for a token that is already stale.
    public func issueToken(expiresIn: Int? = nil) throws -> OAuthToken {
        let (access, refresh) = mint()
        return try OAuthToken(tokenResponse: response(access: access, refresh: refresh, expiresIn: expiresIn ?? lifetime))
    }

    /// Refuses every refresh token issued so far with `invalid_grant`, as a revoked grant is.
    public func revokeAll() {
        liveRefreshTokens.removeAll()
        currentAccessTokens.removeAll()
    }

    /// Makes the resource server refuse every access token issued so far (401), as when a token
    /// is revoked or expires early; refresh tokens stay good, so one refresh recovers.
    public func invalidateAccessTokens() {
        currentAccessTokens.removeAll()
    }

    /// Answers the next requests with these HTTP statuses (a 5xx or 429 is a transient failure the
    /// client retries), before answering normally again.
    public func failNext(with statuses: [Int]) {
        failures += statuses
    }

    /// What the resource server answers a request bearing `accessToken`: 200 for an access token
    /// this endpoint issued and has not replaced since, 401 otherwise.
    public func resourceStatus(for accessToken: String) -> Int {
        currentAccessTokens.contains(accessToken) ? 200 : 401
    }

    // MARK: TokenTransport

    public func send(_ request: TokenTransportRequest) async throws -> TokenTransportResponse {
        requestCount += 1
        if !failures.isEmpty {
            let status = failures.removeFirst()
            return answer(status, ["error": status == 429 || status >= 500 ? "temporarily_unavailable" : "invalid_request"])
        }
        if request.method == "GET", request.url == resourceURL {
            let presented = request.value(forHeader: "Authorization").flatMap { field -> String? in
                let parts = field.split(separator: " ", maxSplits: 1)
                return parts.count == 2 && parts[0].lowercased() == "bearer" ? String(parts[1]) : nil
            }
            guard let presented, resourceStatus(for: presented) == 200 else {
                return TokenTransportResponse(
                    status: 401, headers: [("WWW-Authenticate", #"Bearer error="invalid_token""#)], body: Data())
            }
            return TokenTransportResponse(status: 200, headers: [("Content-Type", "text/plain")], body: Data("resource".utf8))
        }
        guard request.method == "POST", request.url == tokenEndpoint else {
            return answer(404, ["error": "invalid_request", "error_description": "no such endpoint"])
        }
        let form = Dictionary(request.form.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
        guard form["client_id"] == clientID else {
            return answer(401, ["error": "invalid_client"])
        }
        guard form["grant_type"] == "refresh_token" else {
            return answer(400, ["error": "unsupported_grant_type"])
        }
        guard let presented = form["refresh_token"], liveRefreshTokens.contains(presented) else {
            return answer(400, ["error": "invalid_grant", "error_description": "the refresh token is not valid"])
        }
        refreshCount += 1
        currentAccessTokens.removeAll()
        let (access, newRefresh) = mint()
        var refresh: String? = newRefresh
        if rotatesRefreshTokens {
            liveRefreshTokens.remove(presented)
        } else {
            liveRefreshTokens.remove(newRefresh)
            refresh = nil
        }
        return TokenTransportResponse(
            status: 200, headers: [("Content-Type", "application/json")],
            body: response(access: access, refresh: refresh, expiresIn: lifetime))
    }

    // MARK: Helpers

    private func mint() -> (access: String, refresh: String) {
        serial += 1
        let nonce = UUID().uuidString.prefix(8).lowercased()
        let access = "fake-at-\(serial)-\(nonce)"
        let refresh = "fake-rt-\(serial)-\(nonce)"
        currentAccessTokens.insert(access)
        liveRefreshTokens.insert(refresh)
        return (access, refresh)
    }

    private func response(access: String, refresh: String?, expiresIn: Int) -> Data {
        var object: [String: Any] = ["access_token": access, "token_type": "Bearer", "expires_in": expiresIn]
        if let refresh { object["refresh_token"] = refresh }
        return (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
    }

    private func answer(_ status: Int, _ error: [String: String]) -> TokenTransportResponse {
        TokenTransportResponse(
            status: status, headers: [("Content-Type", "application/json")],
            body: (try? JSONSerialization.data(withJSONObject: error, options: [.sortedKeys])) ?? Data())
    }
}
