import Foundation
internal import CCurl
internal import Glibc

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
/// - Any other HTTP error whose body is not an OAuth error (an HTML page, say) is `httpError`,
///   naming the status, never a parse failure.
///
/// No message ever contains a token, a client secret or a response body.
public struct TokenEndpointClient: Sendable {
    /// How long one request may take before it counts as failed (and, attempts allowing, is retried).
    public var requestTimeout: Duration
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

    public init(
        requestTimeout: Duration = .seconds(30),
        maximumAttempts: Int = 3,
        initialBackoff: Duration = .milliseconds(500),
        maximumRetryAfter: Duration = .seconds(60),
        clock: VaultClock = .system,
        transport: (any TokenTransport)? = nil
    ) {
        self.requestTimeout = requestTimeout
        self.maximumAttempts = max(1, maximumAttempts)
        self.initialBackoff = initialBackoff
        self.maximumRetryAfter = maximumRetryAfter
        self.clock = clock
        self.transport = transport
    }

    // MARK: The refresh grant

    /// Runs the refresh grant (RFC 6749 §6) for `token` and returns the server's response as a
    /// token, merged with `token` by ``OAuthToken/updated(byRefresh:)``: a response without a
    /// new refresh token keeps the old one.
    ///
    /// - Throws: ``VaultError``: `reauthenticationRequired` when `token` has no refresh token or
    ///   the server answers `invalid_grant`; see the type's documentation for the rest.
    public func refresh(_ token: OAuthToken, using description: RefreshDescription) async throws -> OAuthToken {
        guard let refreshToken = token.refreshToken, !refreshToken.isEmpty else {
            throw VaultError(.reauthenticationRequired, "The token holds no refresh token; log in again.")
        }
        var form = [("grant_type", "refresh_token"), ("refresh_token", refreshToken)]
        if let scope = description.scope { form.append(("scope", scope)) }
        let response = try await requestToken(form, description: description)
        return token.updated(byRefresh: response)
    }

    /// Sends a token request with `form` (the grant's own parameters) plus the client's
    /// authentication and extra parameters, and parses the token response.
    public func requestToken(_ form: [(String, String)], description: RefreshDescription) async throws -> OAuthToken {
        let (body, receivedAt) = try await post(
            description.tokenEndpoint, form: form, description: description, role: "token endpoint")
        do {
            return try OAuthToken(tokenResponse: body, receivedAt: receivedAt)
        } catch let error as VaultError where error.code == .tokenEndpointError {
            // A 200 with an error in it, as GitHub sends.
            throw Self.mapped(error.oauthError ?? OAuthErrorResponse(error: "unknown"), endpoint: description.tokenEndpoint)
        } catch let error as VaultError {
            throw VaultError(
                .httpError,
                "The token endpoint \(RefreshDescription.safe(description.tokenEndpoint)) answered with a body that is not a token response: \(error.message)",
                underlying: error)
        }
    }

    // MARK: HTTP

    /// POSTs `form` with the client's authentication to `url`, retrying transient failures, and
    /// returns the body of a 2xx answer with the time it was received.
    /// - Throws: an OAuth error response as `tokenEndpointError` (callers that poll look at it
    ///   before mapping), or the errors listed on the type.
    func post(
        _ url: URL, form: [(String, String)], description: RefreshDescription, role: String, mapOAuthErrors: Bool = true
    ) async throws -> (Data, Date) {
        try RefreshDescription.checkEndpoint(url, role: role)
        var fields = form
        var headers = [
            "Content-Type: application/x-www-form-urlencoded",
            "Accept: application/json",
            // No `Expect: 100-continue` round trip before a body of more than 1 KiB.
            "Expect:",
        ]
        let authentication = description.clientAuthentication
        switch (authentication.method, authentication.secret) {
        case ("client_secret_basic", let secret?):
            let credentials = "\(FormEncoding.encode(description.clientID)):\(FormEncoding.encode(secret))"
            headers.append("Authorization: Basic \(Data(credentials.utf8).base64EncodedString())")
        case ("client_secret_post", let secret?):
            fields.append(("client_id", description.clientID))
            fields.append(("client_secret", secret))
        default:
            fields.append(("client_id", description.clientID))
        }
        for (name, value) in description.additionalParameters.sorted(by: { $0.key < $1.key }) {
            fields.append((name, value))
        }
        let body = FormEncoding.body(fields)

        let where_ = "The \(role) \(RefreshDescription.safe(url))"
        if transport == nil {
            do {
                try HTTPTransport.require()
            } catch let error as VaultError {
                throw VaultError(.networkFailure, "\(where_) cannot be asked: \(error.message)", underlying: error)
            }
        }
        var lastReason = ""
        for attempt in 1...maximumAttempts {
            try Task.checkCancellation()
            var wait: Duration?
            do {
                let response = try await send(url, headers: headers, body: body)
                let receivedAt = clock.now()
                let status = response.status
                guard status >= 100 else {
                    throw VaultError(.httpError, "\(where_) did not answer with HTTP.")
                }
                if (200..<300).contains(status) {
                    return (response.body, receivedAt)
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
                    throw VaultError(.networkFailure, "\(where_) could not be reached: \(Self.reason(failure)).", underlying: failure)
                }
                lastReason = Self.reason(failure)
            } catch is CancellationError {
                throw VaultError(.cancelled, "\(where_): the request was cancelled.")
            } catch {
                lastReason = "\(type(of: error))"
            }
            guard attempt < maximumAttempts else { break }
            let backoff = wait ?? (initialBackoff * (1 << (attempt - 1))) * Double.random(in: 0.5...1.0)
            do {
                try await clock.sleep(backoff)
            } catch {
                throw VaultError(.cancelled, "\(where_): cancelled while waiting to retry.")
            }
        }
        throw VaultError(
            .networkFailure,
            "\(where_) failed \(maximumAttempts) time(s); the last attempt: \(lastReason). Check the network and the endpoint, then try again.")
    }

    /// One request through the app's transport, or the built-in one.
    private func send(_ url: URL, headers: [String], body: Data) async throws -> HTTPTransport.Response {
        guard let transport else {
            return try await HTTPTransport.post(url, headers: headers, body: body, timeout: requestTimeout)
        }
        let fields = headers.compactMap { line -> (name: String, value: String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            return value.isEmpty ? nil : (String(line[..<colon]), value)  // "Expect:" is curl's, not a field
        }
        let answer = try await transport.send(
            TokenTransportRequest(url: url, headers: fields, body: body, timeout: requestTimeout))
        guard answer.body.count <= HTTPTransport.maximumBodySize else {
            throw VaultError(
                .httpError, "The answer of \(RefreshDescription.safe(url)) has a body of more than \(HTTPTransport.maximumBodySize) bytes, which is not an OAuth response.")
        }
        return HTTPTransport.Response(status: answer.status, headers: answer.headers, body: answer.body)
    }

    /// What an OAuth error response means for the caller.
    static func mapped(_ oauthError: OAuthErrorResponse, endpoint: URL) -> VaultError {
        let where_ = "The token endpoint \(RefreshDescription.safe(endpoint))"
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
        let plain = type.trimmingCharacters(in: .whitespaces)
        guard plain.count <= 60, plain.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else { return "" }
        return " with a \(plain) body"
    }

    /// `Retry-After` as seconds or an HTTP date (RFC 9110 §10.2.3).
    static func retryAfter(_ header: String?, now: Date) -> Duration? {
        guard let value = header?.trimmingCharacters(in: .whitespaces) else { return nil }
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

    /// What went wrong, in words that name no URL, header or body.
    private static func reason(_ failure: HTTPTransport.Failure) -> String {
        if failure.timedOut { return "no answer within the time-out" }
        switch failure.code {
        case Int32(TV_CURLE_COULDNT_CONNECT):
            return failure.osErrno == ECONNREFUSED ? "the connection was refused" : "could not connect (\(failure.reason))"
        case Int32(TV_CURLE_SEND_ERROR), Int32(TV_CURLE_RECV_ERROR), Int32(TV_CURLE_GOT_NOTHING), Int32(TV_CURLE_PARTIAL_FILE):
            return "the connection was lost"
        case Int32(TV_CURLE_COULDNT_RESOLVE_HOST), Int32(TV_CURLE_COULDNT_RESOLVE_PROXY):
            return "the host name did not resolve"
        case Int32(TV_CURLE_SSL_CONNECT_ERROR), Int32(TV_CURLE_PEER_FAILED_VERIFICATION), Int32(TV_CURLE_SSL_CERTPROBLEM),
            Int32(TV_CURLE_SSL_CIPHER), Int32(TV_CURLE_SSL_CACERT_BADFILE), Int32(TV_CURLE_SSL_ISSUER_ERROR):
            return "the TLS connection failed (certificate or handshake)"
        default:
            return "curl error \(failure.code): \(failure.reason)"
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
