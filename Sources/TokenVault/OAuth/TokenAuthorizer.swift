public import FoundationEssentials

/// Sends requests to a resource server with the fresh access token of one vault entry, and
/// recovers once when the server refuses it: the few lines every OAuth client writes, once.
///
/// ```swift
/// let authorizer = TokenAuthorizer(vault: vault, key: key)
/// // URLSession (product TokenVaultURLSession):
/// let (data, response) = try await URLSession.shared.data(for: request, authorizedBy: authorizer)
/// // AsyncHTTPClient (product TokenVaultAsyncHTTPClient, trait AsyncHTTPClientAdapter):
/// let answer = try await httpClient.execute(request, authorizedBy: authorizer, timeout: .seconds(30))
/// ```
///
/// Each request:
/// 1. takes the entry's token with ``Vault/freshToken(for:leeway:timeout:client:)`` (a stale one
///    is refreshed first, once across every task and process);
/// 2. sends the request with `Authorization: Bearer <token>`;
/// 3. if the server refuses the token (HTTP 401, or a `WWW-Authenticate: Bearer
///    error="invalid_token"` challenge with any status), calls
///    ``Vault/refreshAfterRejection(of:for:timeout:client:)`` with the refused token, so that N
///    callers refused at once cause one refresh, and sends the request once more with the new
///    token. A second refusal is returned to the caller as it is: nothing loops.
///
/// The request is sent twice at most, so its body must be one that can be sent again (`Data`, a
/// `ByteBuffer`); a single-use stream is not.
///
/// A DPoP-bound entry (RFC 9449) gets `Authorization: DPoP <token>` and a `DPoP` proof signed for
/// each request (with `ath`), never a Bearer header: use the forms that know the request's method
/// and URL (``send(method:url:_:answer:discard:)``, which the adapters use). A resource server's
/// nonce challenge (HTTP 401 with `WWW-Authenticate: DPoP error="use_dpop_nonce"` and a
/// `DPoP-Nonce`) is met once with a new proof carrying the nonce, which is kept for the server's
/// next request. The URL-less ``send(_:rejectsToken:discard:)`` refuses a DPoP token
/// (`invalidInput`).
///
/// The token and the proof never appear in a message, a log or `description`.
public struct TokenAuthorizer: Sendable {
    /// The vault that holds the entry.
    public let vault: Vault
    /// The entry whose token authorizes the requests.
    public let key: CredentialKey
    /// A token that expires within this many seconds is refreshed before it is sent.
    public var leeway: TimeInterval
    /// How long to wait for another task's or process's refresh of the same entry.
    public var lockTimeout: Duration
    /// How refreshes are sent (transport, time-outs, deadline) and the clock that decides expiry.
    public var client: TokenEndpointClient

    public init(
        vault: Vault, key: CredentialKey, leeway: TimeInterval = 60, lockTimeout: Duration = .seconds(30),
        client: TokenEndpointClient = TokenEndpointClient()
    ) {
        self.vault = vault
        self.key = key
        self.leeway = leeway
        self.lockTimeout = lockTimeout
        self.client = client
    }

    /// Sends a request through `attempt`, which is given the `Authorization` header value to set,
    /// and follows the steps on the type. Adapters for an HTTP stack are built on this.
    ///
    /// - Parameters:
    ///   - attempt: sends the request once with the given `Authorization` value and returns the answer.
    ///   - rejectsToken: whether an answer refuses the token (see ``rejectsToken(status:challenges:)``).
    ///   - discard: lets go of a refused answer before the retry (drains or drops its body).
    /// - Throws: what `attempt` throws, and ``VaultError`` from the vault: `notFound`,
    ///   `reauthenticationRequired` (the grant is gone: log in again), `expired` or
    ///   `configurationError` (the entry cannot be refreshed), `networkFailure` and the rest listed
    ///   on ``Vault/freshToken(for:leeway:timeout:client:)``.
    nonisolated(nonsending) public func send<Response>(
        _ attempt: (_ authorization: String) async throws -> Response,
        rejectsToken: (Response) -> Bool,
        discard: (Response) async -> Void = { _ in }
    ) async throws -> Response {
        let token = try await vault.freshToken(for: key, leeway: leeway, timeout: lockTimeout, client: client)
        let first = try await attempt(try Self.authorization(for: token, key: key))
        guard rejectsToken(first) else { return first }
        await discard(first)
        let renewed = try await vault.refreshAfterRejection(of: token.accessToken, for: key, timeout: lockTimeout, client: client)
        return try await attempt(try Self.authorization(for: renewed, key: key))
    }

    /// What a resource server's answer says about the token it was sent with: its status, its
    /// `WWW-Authenticate` challenges and its `DPoP-Nonce`, as an adapter reads them.
    public struct Answer: Sendable {
        public var status: Int
        public var challenges: [String]
        public var dpopNonce: String?

        public init(status: Int, challenges: [String], dpopNonce: String? = nil) {
            self.status = status
            self.challenges = challenges
            self.dpopNonce = dpopNonce
        }
    }

    /// Sends a `method` request to `url` through `attempt`, which is given the header fields to
    /// set (``AuthorizationHeaders/fields``: `Authorization`, and `DPoP` for a DPoP-bound entry),
    /// and follows the steps on the type: a DPoP nonce challenge is met once with a new proof
    /// carrying the nonce, and a refused token once with a refresh.
    ///
    /// - Parameters:
    ///   - method: the request's method, for the DPoP proof's `htm`.
    ///   - url: the request's URL, for the DPoP proof's `htu`.
    ///   - attempt: sends the request once with the given fields set (replacing any of the same name).
    ///   - answer: reads an answer's status, `WWW-Authenticate` fields and `DPoP-Nonce`.
    ///   - discard: lets go of an answer before a retry.
    /// - Throws: as ``send(_:rejectsToken:discard:)``, and `configurationError` for a DPoP-bound
    ///   entry in a program that cannot sign (without `TokenVaultDPoP`'s `DPoP.install()`).
    nonisolated(nonsending) public func send<Response>(
        method: String, url: URL,
        _ attempt: (_ fields: [(name: String, value: String)]) async throws -> Response,
        answer: (Response) -> Answer,
        discard: (Response) async -> Void = { _ in }
    ) async throws -> Response {
        let (token, dpopKey) = try await vault.freshTokenAndKey(for: key, leeway: leeway, timeout: lockTimeout, client: client)
        var headers = try AuthorizationHeaders.make(
            token: token, dpopKey: dpopKey, key: key, method: method, url: url, nonce: nil)
        var response = try await attempt(headers.fields)
        var read = answer(response)
        if headers.isDPoP {
            DPoPNonces.remember(read.dpopNonce, for: url, .resourceServer)
            if let nonce = read.dpopNonce, read.challenges.contains(where: Self.isNonceChallenge) {
                // The resource server wants a nonce in the proof (RFC 9449 §9): once more with it.
                await discard(response)
                headers = try AuthorizationHeaders.make(
                    token: token, dpopKey: dpopKey, key: key, method: method, url: url, nonce: nonce)
                response = try await attempt(headers.fields)
                read = answer(response)
                DPoPNonces.remember(read.dpopNonce, for: url, .resourceServer)
            }
        }
        guard Self.rejectsToken(status: read.status, challenges: read.challenges) else { return response }
        await discard(response)
        let renewed = try await vault.refreshAfterRejection(of: token.accessToken, for: key, timeout: lockTimeout, client: client)
        headers = try AuthorizationHeaders.make(
            token: renewed, dpopKey: dpopKey, key: key, method: method, url: url, nonce: nil)
        return try await attempt(headers.fields)
    }

    /// Sends `request` through `transport` with the entry's token, as
    /// ``send(method:url:_:answer:discard:)``. Any `Authorization` and `DPoP` fields of
    /// `request` are replaced.
    public func send(_ request: TokenTransportRequest, through transport: any TokenTransport) async throws -> TokenTransportResponse {
        try await send(
            method: request.method, url: request.url,
            { fields in
                var authorized = request
                authorized.headers.removeAll { field in
                    fields.contains { $0.name.equalsIgnoringCase(field.name) }
                        || field.name.equalsIgnoringCase("DPoP")
                }
                authorized.headers.append(contentsOf: fields)
                return try await transport.send(authorized)
            },
            answer: { response in
                Answer(
                    status: response.status,
                    challenges: response.headers.filter { $0.name.equalsIgnoringCase("WWW-Authenticate") }.map(\.value),
                    dpopNonce: response.value(forHeader: "DPoP-Nonce"))
            })
    }

    /// The `Authorization` header value for `token`: `Bearer <token>` (the scheme as RFC 6750
    /// spells it, whatever case the server used), or `<type> <token>` for another type.
    /// - Throws: `invalidInput` for a DPoP token, which needs a proof with each request.
    package static func authorization(for token: OAuthToken, key: CredentialKey) throws -> String {
        switch token.tokenType.lowercased() {
        case "bearer":
            return "Bearer \(token.accessToken)"
        case "dpop":
            throw VaultError(
                .invalidInput,
                "The token for \(key) is a DPoP token: each request needs a DPoP proof besides the Authorization header, which TokenAuthorizer does not make.")
        default:
            return "\(token.tokenType) \(token.accessToken)"
        }
    }

    /// Whether an answer refuses the access token it was sent with: HTTP 401, or a Bearer
    /// challenge with `error="invalid_token"` (RFC 6750 §3.1) in any of the `WWW-Authenticate`
    /// fields `challenges`, whatever the status.
    public static func rejectsToken(status: Int, challenges: [String]) -> Bool {
        status == 401 || challenges.contains(where: isInvalidTokenChallenge)
    }

    /// `Bearer realm="x", error="invalid_token"` or `DPoP error="invalid_token"` (parameter names
    /// and the scheme in any case, the value quoted or not).
    static func isInvalidTokenChallenge(_ field: String) -> Bool {
        hasError("invalid_token", in: field)
    }

    /// `DPoP error="use_dpop_nonce"` (RFC 9449 §9).
    static func isNonceChallenge(_ field: String) -> Bool {
        hasError("use_dpop_nonce", in: field, schemes: ["dpop"])
    }

    private static func hasError(_ code: String, in field: String, schemes: [String] = ["bearer", "dpop"]) -> Bool {
        let lowered = field.lowercased()
        guard let scheme = schemes.lazy.compactMap({ lowered.firstRange(of: $0) }).first else { return false }
        var rest = lowered[scheme.upperBound...]
        while let error = rest.firstRange(of: "error") {
            let before = rest[..<error.lowerBound].last
            rest = rest[error.upperBound...]
            // `error`, not `error_description` or `my_error`.
            guard before == nil || before == " " || before == "," else { continue }
            var value = rest.drop { $0 == " " }
            guard value.first == "=" else { continue }
            value = value.dropFirst().drop { $0 == " " }
            if value.first == "\"" { value = value.dropFirst() }
            if value.hasPrefix(code) {
                let after = value.dropFirst(code.count).first
                if after == nil || after == "\"" || after == "," || after == " " { return true }
            }
        }
        return false
    }
}
