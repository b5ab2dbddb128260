package import FoundationEssentials
internal import TokenVaultSystem
internal import CCurl

/// Sends OAuth requests to a token endpoint (and a device authorization endpoint) the way the
/// RFCs want, and turns every answer into a token or a typed ``VaultError``.
///
/// - The body is `application/x-www-form-urlencoded`, with `Accept: application/json`.
/// - The client authenticates as its ``ClientAuthentication`` says: `client_id` alone, HTTP Basic
///   (`client_secret_basic`, id and secret form-encoded first, RFC 6749 §2.3.1), or
///   `client_secret` in the body (`client_secret_post`).
/// - An OAuth error response (RFC 6749 §5.2) becomes: `invalid_grant` → `reauthenticationRequired`;
///   `invalid_client`, `unauthorized_client` → `configurationError`; any other →
///   `tokenEndpointError`. Each carries the ``OAuthErrorResponse`` as ``VaultError/oauthError``.
/// - HTTP 5xx, 429, time-outs and connection failures are transient: the request is sent again,
///   at most ``maximumAttempts`` times in all, after an exponential back-off with jitter, or after
///   the server's `Retry-After` on 429 and 503. Then `networkFailure`, with the last reason.
/// - Two bounds: each request gets at most ``requestTimeout`` (8 s by default), and the whole
///   operation (one refresh, one code exchange, one device poll), every attempt and back-off
///   included, at most ``deadline`` (20 s by default). A token endpoint that accepts the
///   connection and never answers fails after 20 s, not after 3 × 30 s. The error names the bound
///   that ran out.
/// - Any other HTTP error whose body is not an OAuth error (an HTML page, say) is `httpError`,
///   naming the status, never a parse failure.
///
/// No message ever contains a token, a client secret or a response body.
public struct TokenEndpointClient: Sendable {
    /// How long one request may take before it counts as failed (and, attempts allowing, is retried).
    public var requestTimeout: Duration
    /// How long one operation may take in all: every attempt, back-off and `Retry-After` wait of
    /// one refresh (or code exchange, or device poll) included. Short enough by default for a
    /// person waiting on `vault get --fresh`; `vault` takes `--http-deadline` or
    /// `TOKEN_VAULT_HTTP_DEADLINE` to change it.
    public var deadline: Duration
    /// Requests sent in all for one operation, the first included. At least 1.
    public var maximumAttempts: Int
    /// The first back-off; each later one doubles, with jitter.
    public var initialBackoff: Duration
    /// The longest `Retry-After` honoured. A server that asks for a longer wait gets an error
    /// instead of a process that hangs.
    public var maximumRetryAfter: Duration
    /// The clock for token times, back-offs and device polling.
    public var clock: VaultClock
    /// How requests are sent: `nil` is TokenVault's built-in transport (libcurl); an app can give
    /// its own HTTP stack, and a unit test `TokenVaultTesting`'s `FakeTokenEndpoint`.
    public var transport: (any TokenTransport)?
    /// A CA bundle and a client certificate for the built-in transport (mutual TLS, RFC 8705);
    /// `nil` trusts the system's CAs and presents no certificate. An app's own ``transport``
    /// configures TLS itself: both together is a `configurationError` at the first request.
    public var tls: TransportTLS?
    /// The DPoP key (RFC 9449) that token requests (the code, device and refresh grants) are
    /// signed with, or `nil` for Bearer tokens. A login sets it to a new key
    /// (``DPoPKey/generate(_:)``) and saves that key with the token
    /// (``Vault/saveToken(_:for:registration:dpopKey:)``); the vault's own refreshes use the key
    /// stored in the entry, whatever this says. A `use_dpop_nonce` answer is retried once with the
    /// server's nonce, which is kept for the server's next request.
    public var dpopKey: DPoPKey?

    /// The default ``deadline``: 20 s for a whole refresh, retries included.
    public static let defaultDeadline: Duration = .seconds(20)
    /// The default ``requestTimeout``: 8 s, so that a retry still fits in the default deadline.
    public static let defaultRequestTimeout: Duration = .seconds(8)

    public init(
        requestTimeout: Duration = TokenEndpointClient.defaultRequestTimeout,
        maximumAttempts: Int = 3,
        initialBackoff: Duration = .milliseconds(500),
        maximumRetryAfter: Duration = .seconds(60),
        deadline: Duration = TokenEndpointClient.defaultDeadline,
        clock: VaultClock = .system,
        transport: (any TokenTransport)? = nil,
        tls: TransportTLS? = nil,
        dpopKey: DPoPKey? = nil
    ) {
        self.requestTimeout = requestTimeout
        self.deadline = deadline
        self.maximumAttempts = max(1, maximumAttempts)
        self.initialBackoff = initialBackoff
        self.maximumRetryAfter = maximumRetryAfter
        self.clock = clock
        self.transport = transport
        self.tls = tls
        self.dpopKey = dpopKey
    }

    // MARK: The refresh grant

    /// Runs the refresh grant (RFC 6749 §6) for `token` and returns the server's response as a
    /// token, merged with `token` by ``OAuthToken/updated(byRefresh:)``: a response without a
    /// new refresh token keeps the old one.
    ///
    /// - Throws: ``VaultError``: `reauthenticationRequired` when `token` has no refresh token or
    ///   the server answers `invalid_grant`; see the type's documentation for the rest.
    public func refresh(_ token: OAuthToken, using registration: ClientRegistration) async throws -> OAuthToken {
        guard let refreshToken = token.refreshToken, !refreshToken.isEmpty else {
            throw VaultError(.reauthenticationRequired, "The token holds no refresh token; log in again.")
        }
        var form = [("grant_type", "refresh_token"), ("refresh_token", refreshToken)]
        if let scope = registration.scope { form.append(("scope", scope)) }
        let response = try await requestToken(form, registration: registration)
        return token.updated(byRefresh: response)
    }

    /// Sends a token request with `form` (the grant's own parameters) plus the client's
    /// authentication and extra parameters, and parses the token response.
    public func requestToken(_ form: [(String, String)], registration: ClientRegistration) async throws -> OAuthToken {
        let (body, receivedAt) = try await post(
            registration.tokenEndpoint, form: form, registration: registration, role: "token endpoint", proof: true)
        do {
            return try OAuthToken(tokenResponse: body, receivedAt: receivedAt)
        } catch let error as VaultError where error.code == .tokenEndpointError {
            // A 200 with an error in it, as GitHub sends.
            throw Self.mapped(error.oauthError ?? OAuthErrorResponse(error: "unknown"), endpoint: registration.tokenEndpoint)
        } catch let error as VaultError {
            throw VaultError(
                .httpError,
                "The token endpoint \(ClientRegistration.safe(registration.tokenEndpoint)) answered with a body that is not a token response: \(error.message)",
                underlying: error)
        }
    }

    /// The earlier spelling of ``requestToken(_:registration:)``.
    @available(*, deprecated, renamed: "requestToken(_:registration:)")
    public func requestToken(_ form: [(String, String)], description: ClientRegistration) async throws -> OAuthToken {
        try await requestToken(form, registration: description)
    }

    // MARK: HTTP

    /// POSTs `form` with the client's authentication to `url`, retrying transient failures, and
    /// returns the body of a 2xx answer with the time it was received.
    /// - Throws: an OAuth error response as `tokenEndpointError` (callers that poll look at it
    ///   before mapping), or the errors listed on the type.
    func post(
        _ url: URL, form: [(String, String)], registration: ClientRegistration, role: String, mapOAuthErrors: Bool = true,
        additionalParameters: Bool = true, proof: Bool = false
    ) async throws -> (Data, Date) {
        try ClientRegistration.checkEndpoint(url, role: role)
        var fields = form
        var headers = [
            "Content-Type: application/x-www-form-urlencoded",
            "Accept: application/json",
            // No `Expect: 100-continue` round trip before a body of more than 1 KiB.
            "Expect:",
        ]
        let authentication = registration.clientAuthentication
        switch (authentication.method, authentication.secret) {
        case ("client_secret_basic", let secret?):
            let credentials = "\(FormEncoding.encode(registration.clientID)):\(FormEncoding.encode(secret))"
            headers.append("Authorization: Basic \(Data(credentials.utf8).base64EncodedString())")
        case ("client_secret_post", let secret?):
            fields.append(("client_id", registration.clientID))
            fields.append(("client_secret", secret))
        default:
            fields.append(("client_id", registration.clientID))
        }
        for (name, value) in registration.additionalParameters.sorted(by: { $0.key < $1.key }) where additionalParameters {
            fields.append((name, value))
        }
        let body = FormEncoding.body(fields)
        let dpopKey = proof ? self.dpopKey : nil
        let (data, receivedAt, _) = try await send(url, role: role, mapOAuthErrors: mapOAuthErrors) { timeout in
            guard let dpopKey else {
                return try await dispatch(url, method: "POST", headers: headers, body: body, timeout: timeout)
            }
            return try await dispatchWithProof(url, key: dpopKey, headers: headers, body: body, timeout: timeout)
        }
        return (data, receivedAt)
    }

    /// A token request with a DPoP proof (RFC 9449 §5), a fresh one for each request sent: with
    /// the server's last nonce, and once more with a new one if the server answers
    /// `use_dpop_nonce` (§8). Every `DPoP-Nonce` the server sends is kept for its next request.
    private func dispatchWithProof(_ url: URL, key: DPoPKey, headers: [String], body: Data, timeout: Duration) async throws
        -> HTTPTransport.Response
    {
        let started = ContinuousClock.now
        let nonce = DPoPNonces.nonce(for: url, .authorizationServer)
        var proof = try key.proof(method: "POST", url: url, nonce: nonce)
        var answer = try await dispatch(url, method: "POST", headers: headers + ["DPoP: \(proof)"], body: body, timeout: timeout)
        let next = answer.value(forHeader: "DPoP-Nonce")
        DPoPNonces.remember(next, for: url, .authorizationServer)
        guard answer.status == 400, let next, next != nonce, Self.oauthError(in: answer.body)?.error == "use_dpop_nonce" else {
            return answer
        }
        proof = try key.proof(method: "POST", url: url, nonce: next)
        let left = timeout - (ContinuousClock.now - started)
        answer = try await dispatch(
            url, method: "POST", headers: headers + ["DPoP: \(proof)"], body: body, timeout: max(left, .milliseconds(10)))
        DPoPNonces.remember(answer.value(forHeader: "DPoP-Nonce"), for: url, .authorizationServer)
        return answer
    }

    /// GETs `url` (a discovery document), retrying transient failures; returns the body of a 2xx
    /// answer, or of one whose status is in `passing` (a 404 the caller falls back on), with the status.
    package func get(_ url: URL, role: String, passing: Set<Int> = []) async throws -> (Data, Int) {
        try ClientRegistration.checkEndpoint(url, role: role)
        let (data, _, status) = try await send(url, role: role, mapOAuthErrors: false, passing: passing) { timeout in
            try await dispatch(url, method: "GET", headers: ["Accept: application/json"], body: Data(), timeout: timeout)
        }
        return (data, status)
    }

    /// One request to `url`, sent by `perform` with the time-out it is given, under the retry
    /// policy and the deadline described on the type.
    private func send(
        _ url: URL, role: String, mapOAuthErrors: Bool, passing: Set<Int> = [],
        perform: (Duration) async throws -> HTTPTransport.Response
    ) async throws -> (Data, Date, Int) {
        let where_ = "The \(role) \(ClientRegistration.safe(url))"
        if transport != nil && tls != nil {
            throw VaultError(
                .configurationError,
                "\(where_) cannot be asked: TokenEndpointClient has both a transport of the app's and TLS files for the built-in one; configure TLS in the app's transport.")
        }
        if transport == nil {
            do {
                try HTTPTransport.require()
            } catch let error as VaultError {
                throw VaultError(.networkFailure, "\(where_) cannot be asked: \(error.message)", underlying: error)
            }
        }
        var lastReason = ""
        // Why the last attempt got no answer, for the final error's `underlying`.
        var lastFailure: TokenTransportError?
        let end = ContinuousClock.now.advanced(by: deadline)
        var attempts = 0
        for attempt in 1...maximumAttempts {
            try Task.checkCancellation()
            let remaining = end - ContinuousClock.now
            guard remaining > .milliseconds(10) else {
                throw deadlineExpired(where_, attempts: attempts, lastReason: lastReason)
            }
            // The last attempt gets what is left of the deadline, if that is less than a request's own bound.
            let timeout = min(requestTimeout, remaining)
            attempts = attempt
            var wait: Duration?
            do {
                let response = try await perform(timeout)
                let receivedAt = clock.now()
                let status = response.status
                guard status >= 100 else {
                    throw VaultError(.httpError, "\(where_) did not answer with HTTP.")
                }
                if (200..<300).contains(status) || passing.contains(status) {
                    return (response.body, receivedAt, status)
                }
                let oauthError = Self.oauthError(in: response.body)
                let transient = status >= 500 || status == 429 || oauthError?.error == "temporarily_unavailable"
                if !transient {
                    if let oauthError {
                        if mapOAuthErrors { throw Self.mapped(oauthError, endpoint: url) }
                        throw VaultError(.tokenEndpointError, "\(where_) answered \(oauthError.error).", underlying: oauthError)
                    }
                    throw VaultError(
                        .httpError,
                        "\(where_) answered HTTP \(status)\(Self.kind(of: response)), which is not an OAuth response.")
                }
                lastReason = "HTTP \(status)\(Self.kind(of: response))" + (oauthError.map { " (\($0.error))" } ?? "")
                lastFailure = nil
                if status == 429 || status == 503,
                    let retryAfter = Self.retryAfter(response.value(forHeader: "Retry-After"), now: receivedAt)
                {
                    guard retryAfter <= maximumRetryAfter else {
                        throw VaultError(
                            .networkFailure,
                            "\(where_) answered \(lastReason) and asked to retry after \(Self.seconds(retryAfter)) s, longer than the \(Self.seconds(maximumRetryAfter)) s allowed; try again later.")
                    }
                    wait = retryAfter
                }
            } catch let error as VaultError {
                throw error
            } catch let failure as HTTPTransport.Failure {
                if failure.aborted || Task.isCancelled {
                    throw VaultError(.cancelled, "\(where_): the request was cancelled.")
                }
                if failure.bodyTooLarge {
                    throw VaultError(
                        .httpError, "\(where_) answered with a body of more than \(HTTPTransport.maximumBodySize) bytes, which is not an OAuth response.")
                }
                guard Self.isTransient(failure) else {
                    throw VaultError(
                        .networkFailure, "\(where_) could not be reached: \(Self.reason(failure)).",
                        underlying: Self.transportError(failure))
                }
                if failure.timedOut && timeout < requestTimeout {
                    // Cut short by the deadline, not by the request's own time-out.
                    let before = lastReason.isEmpty ? "" : "\(lastReason), then "
                    throw deadlineExpired(where_, attempts: attempt, lastReason: before + "no answer before the deadline")
                }
                lastReason = failure.timedOut ? "no answer within the \(Self.secondsText(timeout)) per-request time-out" : Self.reason(failure)
                lastFailure = Self.transportError(failure)
            } catch let failure as TokenTransportError {
                // The app's transport (an adapter) says why it got no answer.
                if failure.code == .cancelled || Task.isCancelled {
                    throw VaultError(.cancelled, "\(where_): the request was cancelled.")
                }
                guard failure.isTransient else {
                    throw VaultError(.networkFailure, "\(where_) could not be reached: \(failure.message).", underlying: failure)
                }
                if failure.code == .timedOut && timeout < requestTimeout {
                    let before = lastReason.isEmpty ? "" : "\(lastReason), then "
                    throw deadlineExpired(where_, attempts: attempt, lastReason: before + "no answer before the deadline")
                }
                lastReason = failure.code == .timedOut ? "no answer within the \(Self.secondsText(timeout)) per-request time-out" : failure.message
                lastFailure = failure
            } catch is CancellationError {
                throw VaultError(.cancelled, "\(where_): the request was cancelled.")
            } catch {
                lastReason = "\(type(of: error))"
            }
            guard attempt < maximumAttempts else { break }
            let backoff = wait ?? (initialBackoff * (1 << (attempt - 1))) * Double.random(in: 0.5...1.0)
            if backoff >= end - ContinuousClock.now {
                let why = wait.map { "; the server asked to retry after \(Self.secondsText($0))" } ?? ""
                throw deadlineExpired(where_, attempts: attempt, lastReason: lastReason + why)
            }
            do {
                try await clock.sleep(backoff)
            } catch {
                throw VaultError(.cancelled, "\(where_): cancelled while waiting to retry.")
            }
        }
        throw VaultError(
            .networkFailure,
            "\(where_) failed \(maximumAttempts) time(s); the last attempt: \(lastReason). Check the network and the endpoint, then try again.",
            underlying: lastFailure)
    }

    /// One request through the app's transport, or the built-in one, bounded by `timeout`.
    private func dispatch(_ url: URL, method: String, headers: [String], body: Data, timeout: Duration) async throws
        -> HTTPTransport.Response
    {
        guard let transport else {
            if method == "GET" { return try await HTTPTransport.get(url, headers: headers, timeout: timeout, tls: tls) }
            return try await HTTPTransport.post(url, headers: headers, body: body, timeout: timeout, tls: tls)
        }
        let fields = headers.compactMap { line -> (name: String, value: String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            let value = line[line.index(after: colon)...].trimmingWhitespace()
            return value.isEmpty ? nil : (String(line[..<colon]), value)  // "Expect:" is curl's, not a field
        }
        let answer = try await transport.send(
            TokenTransportRequest(method: method, url: url, headers: fields, body: body, timeout: timeout))
        guard answer.body.count <= HTTPTransport.maximumBodySize else {
            throw VaultError(
                .httpError, "The answer of \(ClientRegistration.safe(url)) has a body of more than \(HTTPTransport.maximumBodySize) bytes, which is not an OAuth response.")
        }
        return HTTPTransport.Response(status: answer.status, headers: answer.headers, body: answer.body)
    }

    /// The whole operation ran out of ``deadline``: says so, and how to change it.
    private func deadlineExpired(_ where_: String, attempts: Int, lastReason: String) -> VaultError {
        let last = lastReason.isEmpty ? "" : ": \(lastReason)"
        return VaultError(
            .networkFailure,
            "\(where_) gave no answer within the \(Self.secondsText(deadline)) deadline for the whole request (\(attempts) attempt(s)\(last)). Check the network and the endpoint; the deadline is TokenEndpointClient's deadline (vault: --http-deadline or TOKEN_VAULT_HTTP_DEADLINE).")
    }

    /// `20 s`, `2.5 s`.
    static func secondsText(_ duration: Duration) -> String {
        let value = seconds(duration)
        if value == value.rounded() { return "\(Int(value)) s" }
        return "\(oneDecimal(value)) s"
    }

    /// What an OAuth error response means for the caller.
    static func mapped(_ oauthError: OAuthErrorResponse, endpoint: URL) -> VaultError {
        let where_ = "The token endpoint \(ClientRegistration.safe(endpoint))"
        switch oauthError.error {
        case "invalid_grant":
            return VaultError(
                .reauthenticationRequired, "\(where_) rejected the grant (\(oauthError)); log in again.", underlying: oauthError)
        case "invalid_client", "unauthorized_client":
            return VaultError(
                .configurationError,
                "\(where_) refused the client (\(oauthError)); check the client id, its secret and how it authenticates.",
                underlying: oauthError)
        default:
            return VaultError(.tokenEndpointError, "\(where_) answered with an error: \(oauthError).", underlying: oauthError)
        }
    }

    /// The OAuth error in a JSON body, if that is what it is.
    static func oauthError(in body: Data) -> OAuthErrorResponse? {
        guard body.count <= TokenResponseFields.maximumBodySize,
            let fields = try? TokenResponseFields.parseJSON(body),
            case .string(let error)? = fields["error"], !error.isEmpty, error.count <= 100,
            error.unicodeScalars.allSatisfy({ $0.isASCII && $0.value >= 0x20 && $0.value < 0x7f })
        else { return nil }
        return OAuthErrorResponse(
            error: error, errorDescription: fields["error_description"]?.stringValue.map { String($0.prefix(300)) },
            errorURI: fields["error_uri"]?.stringValue)
    }

    private static func kind(of response: HTTPTransport.Response) -> String {
        guard let type = response.value(forHeader: "Content-Type")?.split(separator: ";").first else { return "" }
        let plain = type.trimmingWhitespace()
        guard plain.count <= 60, plain.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else { return "" }
        return " with a \(plain) body"
    }

    /// `Retry-After` as seconds or an HTTP date (RFC 9110 §10.2.3).
    static func retryAfter(_ header: String?, now: Date) -> Duration? {
        guard let value = header?.trimmingWhitespace() else { return nil }
        if let seconds = Int(value), seconds >= 0 { return .seconds(seconds) }
        guard let date = HTTPDate.parse(value) else { return nil }
        return .milliseconds(Int(max(0, date.timeIntervalSince(now)) * 1000))
    }

    private static func isTransient(_ failure: HTTPTransport.Failure) -> Bool {
        if failure.timedOut { return true }
        switch failure.code {
        case Int32(TV_CURLE_COULDNT_CONNECT), Int32(TV_CURLE_COULDNT_RESOLVE_HOST), Int32(TV_CURLE_COULDNT_RESOLVE_PROXY),
            Int32(TV_CURLE_SEND_ERROR), Int32(TV_CURLE_RECV_ERROR), Int32(TV_CURLE_GOT_NOTHING), Int32(TV_CURLE_PARTIAL_FILE),
            Int32(TV_CURLE_WEIRD_SERVER_REPLY), Int32(TV_CURLE_HTTP2), Int32(TV_CURLE_HTTP2_STREAM):
            return true
        default:
            return false
        }
    }

    /// The built-in transport's failure as the public ``TokenTransportError``.
    static func transportError(_ failure: HTTPTransport.Failure) -> TokenTransportError {
        let code: TokenTransportError.Code
        switch failure.code {
        case _ where failure.timedOut: code = .timedOut
        case Int32(TV_CURLE_COULDNT_CONNECT), Int32(TV_CURLE_COULDNT_RESOLVE_HOST): code = .cannotConnect
        case Int32(TV_CURLE_COULDNT_RESOLVE_PROXY): code = .proxyFailure
        case Int32(TV_CURLE_SEND_ERROR), Int32(TV_CURLE_RECV_ERROR), Int32(TV_CURLE_GOT_NOTHING), Int32(TV_CURLE_PARTIAL_FILE):
            code = .connectionLost
        case Int32(TV_CURLE_SSL_CONNECT_ERROR), Int32(TV_CURLE_PEER_FAILED_VERIFICATION), Int32(TV_CURLE_SSL_CERTPROBLEM),
            Int32(TV_CURLE_SSL_CIPHER), Int32(TV_CURLE_SSL_CACERT_BADFILE), Int32(TV_CURLE_SSL_ISSUER_ERROR),
            Int32(TV_CURLE_SSL_CLIENTCERT):
            code = .tlsFailure
        case Int32(TV_CURLE_ABORTED_BY_CALLBACK): code = .cancelled
        default: code = .other
        }
        return TokenTransportError(code, reason(failure), underlying: failure)
    }

    /// What went wrong, in words that name no URL, header or body.
    private static func reason(_ failure: HTTPTransport.Failure) -> String {
        if failure.timedOut { return "no answer within the time-out" }
        switch failure.code {
        case Int32(TV_CURLE_COULDNT_CONNECT):
            return failure.osErrno == Errno.connectionRefused.rawValue ? "the connection was refused" : "could not connect (\(failure.reason))"
        case Int32(TV_CURLE_SEND_ERROR), Int32(TV_CURLE_RECV_ERROR), Int32(TV_CURLE_GOT_NOTHING), Int32(TV_CURLE_PARTIAL_FILE):
            return "the connection was lost"
        case Int32(TV_CURLE_COULDNT_RESOLVE_HOST), Int32(TV_CURLE_COULDNT_RESOLVE_PROXY):
            return "the host name did not resolve"
        case Int32(TV_CURLE_PEER_FAILED_VERIFICATION), Int32(TV_CURLE_SSL_ISSUER_ERROR):
            return "the TLS connection failed: the server's certificate is not trusted (the CA bundle, --cacert, decides which are)"
        case Int32(TV_CURLE_SSL_CERTPROBLEM):
            return "the TLS connection failed: the client certificate or its key could not be used (--client-cert, --client-key)"
        case Int32(TV_CURLE_SSL_CACERT_BADFILE):
            return "the TLS connection failed: the CA bundle could not be read (--cacert)"
        case Int32(TV_CURLE_SSL_CLIENTCERT):
            return "the TLS connection failed: the server refused the client certificate, or wants one (mutual TLS: --client-cert)"
        case Int32(TV_CURLE_SSL_CONNECT_ERROR), Int32(TV_CURLE_SSL_CIPHER):
            return "the TLS connection failed (handshake; a server that wants a client certificate ends it so too)"
        default:
            return "curl error \(failure.code): \(failure.reason)"
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
