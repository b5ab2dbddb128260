public import Foundation

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
/// The token never appears in a message, a log or `description`. A DPoP token is refused
/// (`invalidInput`): each of its requests needs a proof this type does not make.
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

    /// Sends `request` through `transport` with the entry's token, as ``send(_:rejectsToken:discard:)``.
    /// Any `Authorization` field of `request` is replaced.
    public func send(_ request: TokenTransportRequest, through transport: any TokenTransport) async throws -> TokenTransportResponse {
        try await send(
            { authorization in
                var authorized = request
                authorized.headers.removeAll { $0.name.caseInsensitiveCompare("Authorization") == .orderedSame }
                authorized.headers.append((name: "Authorization", value: authorization))
                return try await transport.send(authorized)
            },
            rejectsToken: { response in
                Self.rejectsToken(
                    status: response.status,
                    challenges: response.headers.filter { $0.name.caseInsensitiveCompare("WWW-Authenticate") == .orderedSame }.map(\.value))
            })
    }

    /// The `Authorization` header value for `token`: `Bearer <token>` (the scheme as RFC 6750
    /// spells it, whatever case the server used), or `<type> <token>` for another type.
    /// - Throws: `invalidInput` for a DPoP token, which needs a proof with each request.
    public static func authorization(for token: OAuthToken, key: CredentialKey) throws -> String {
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

    /// `Bearer realm="x", error="invalid_token"` (parameter names and the scheme in any case, the
    /// value quoted or not).
    static func isInvalidTokenChallenge(_ field: String) -> Bool {
        let lowered = field.lowercased()
        guard let scheme = lowered.range(of: "bearer") else { return false }
        var rest = lowered[scheme.upperBound...]
        while let error = rest.range(of: "error") {
            let before = rest[..<error.lowerBound].last
            rest = rest[error.upperBound...]
            // `error`, not `error_description` or `my_error`.
            guard before == nil || before == " " || before == "," else { continue }
            var value = rest.drop { $0 == " " }
            guard value.first == "=" else { continue }
            value = value.dropFirst().drop { $0 == " " }
            if value.first == "\"" { value = value.dropFirst() }
            if value.hasPrefix("invalid_token") {
                let after = value.dropFirst("invalid_token".count).first
                if after == nil || after == "\"" || after == "," || after == " " { return true }
            }
        }
        return false
    }
}
