public import FoundationEssentials

internal import TokenVaultSystem

/// The authorization code grant with PKCE (RFC 7636) for a desktop: a loopback redirect on
/// `127.0.0.1` with a random port (RFC 8252 §7.3), or the exact one the client registered
/// (``redirectURI``), a random `state` checked on return, and a time-out.
public struct AuthorizationCodeLogin: Sendable {
    /// The authorization endpoint the user's browser opens.
    public let authorizationEndpoint: URL
    /// The client, its token endpoint and the scope to ask for.
    public let registration: ClientRegistration
    /// How long to wait for the browser to come back.
    public var timeout: Duration
    /// The fixed loopback redirect URI, `http://127.0.0.1:PORT/PATH` (or `localhost`), for a
    /// provider that accepts only the exact URI registered for the client; `nil` for a port the
    /// kernel picks and the path `/callback` (RFC 8252 §7.3).
    public let redirectURI: URL?
    /// Extra parameters for the authorization request alone, such as Atlassian's
    /// `audience=api.atlassian.com` and `prompt=consent` (never sent to the token endpoint).
    public let authorizationParameters: [String: String]
    /// The OpenID Connect `nonce` this login sends in its authorization request, made at random
    /// when the scope holds `openid` (else `nil`). The ID token the login gets must carry it back:
    /// hand it to the ID-token verifier (TokenVaultIDToken's `IDTokenVerifier`, which `vault login`
    /// runs), so that an ID token replayed from another login is refused. One login per value:
    /// make a new `AuthorizationCodeLogin` for each login.
    public let nonce: String?

    /// The authorization request's own parameters, which ``authorizationParameters`` cannot set.
    package static let reservedAuthorizationParameters: Set<String> = [
        "response_type", "client_id", "redirect_uri", "state", "code_challenge", "code_challenge_method", "scope", "nonce",
    ]

    /// - Throws: `configurationError` for an authorization endpoint that is not `https` (loopback
    ///   aside), a `redirectURI` that is not `http://127.0.0.1:PORT/PATH` (or `localhost`) with a
    ///   port, or a reserved parameter name in `authorizationParameters`.
    public init(
        authorizationEndpoint: URL, registration: ClientRegistration, timeout: Duration = .seconds(300), redirectURI: URL? = nil,
        authorizationParameters: [String: String] = [:]
    ) throws {
        try ClientRegistration.checkEndpoint(authorizationEndpoint, role: "authorization endpoint")
        if let redirectURI { _ = try Self.loopbackRedirect(redirectURI) }
        if let name = authorizationParameters.keys.sorted().first(where: { Self.reservedAuthorizationParameters.contains($0) || $0.isEmpty }) {
            throw VaultError(
                .configurationError,
                "The authorization parameter '\(name)' is set by the login itself (or by the scope); it cannot be set here.")
        }
        self.authorizationEndpoint = authorizationEndpoint
        self.registration = registration
        self.timeout = timeout
        self.redirectURI = redirectURI
        self.authorizationParameters = authorizationParameters
        let openID = registration.scope?.split(separator: " ").contains("openid") ?? false
        self.nonce = try openID ? Self.randomToken(16) : nil
    }

    /// The port and path of a fixed loopback redirect URI, checked: `http`, host `127.0.0.1` or
    /// `localhost`, an explicit port from 1 to 65535, no user, query or fragment.
    /// - Throws: `configurationError` naming what is wrong.
    package static func loopbackRedirect(_ uri: URL) throws -> (host: String, port: UInt16, path: String) {
        guard let components = URLComponents(url: uri, resolvingAgainstBaseURL: false), components.scheme?.lowercased() == "http",
            let host = components.host?.lowercased(), host == "127.0.0.1" || host == "localhost"
        else {
            throw VaultError(
                .configurationError,
                "The redirect URI must be http://127.0.0.1:PORT/PATH (or http://localhost:PORT/PATH): the login listens on the loopback address.")
        }
        guard let port = components.port, (1...65535).contains(port) else {
            throw VaultError(.configurationError, "The redirect URI must name its port, as registered: http://127.0.0.1:PORT/PATH.")
        }
        guard components.user == nil, components.password == nil, components.query == nil, components.fragment == nil else {
            throw VaultError(.configurationError, "The redirect URI must have no user name, query or fragment.")
        }
        let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        return (host, UInt16(port), path)
    }

    /// The URL the browser opens: the authorization endpoint with the request's parameters
    /// (RFC 6749 §4.1.1, RFC 7636 §4.3), the registration's scope and extra parameters, and
    /// ``authorizationParameters``. `vault login --dry-run` shows it with stand-ins for `state`
    /// and the challenge.
    package func authorizationURL(redirectURI: String, state: String, codeChallenge: String) throws -> URL {
        try authorizationURL(redirectURI: redirectURI, state: state, codeChallenge: codeChallenge, nonce: nonce)
    }

    /// The URL the browser opens, with `nonce` (OpenID Connect Core §3.1.2.1) in place of this
    /// login's own ``nonce``: `vault login --dry-run` shows a stand-in.
    package func authorizationURL(redirectURI: String, state: String, codeChallenge: String, nonce: String?) throws -> URL {
        guard var components = URLComponents(url: authorizationEndpoint, resolvingAgainstBaseURL: false) else {
            throw VaultError(.configurationError, "The authorization endpoint is not a valid URL.")
        }
        var items = components.queryItems ?? []
        items += [
            URLQueryItem(name: "response_type", value: "code"),
            URLQueryItem(name: "client_id", value: registration.clientID),
            URLQueryItem(name: "redirect_uri", value: redirectURI),
            URLQueryItem(name: "state", value: state),
            URLQueryItem(name: "code_challenge", value: codeChallenge),
            URLQueryItem(name: "code_challenge_method", value: "S256"),
        ]
        if let scope = registration.scope { items.append(URLQueryItem(name: "scope", value: scope)) }
        if let nonce { items.append(URLQueryItem(name: "nonce", value: nonce)) }
        for (name, value) in registration.additionalParameters.sorted(by: { $0.key < $1.key })
        where authorizationParameters[name] == nil {
            items.append(URLQueryItem(name: name, value: value))
        }
        for (name, value) in authorizationParameters.sorted(by: { $0.key < $1.key }) {
            items.append(URLQueryItem(name: name, value: value))
        }
        components.percentEncodedQueryItems = items.map {
            URLQueryItem(name: FormEncoding.encode($0.name), value: $0.value.map(FormEncoding.encode))
        }
        guard let url = components.url else {
            throw VaultError(.configurationError, "Could not build the authorization URL.")
        }
        return url
    }

    /// The earlier spelling of ``init(authorizationEndpoint:registration:timeout:)``.
    @available(*, deprecated, renamed: "init(authorizationEndpoint:registration:timeout:)")
    public init(authorizationEndpoint: URL, description: ClientRegistration, timeout: Duration = .seconds(300)) throws {
        try self.init(authorizationEndpoint: authorizationEndpoint, registration: description, timeout: timeout)
    }

    /// The earlier name of ``registration``.
    @available(*, deprecated, renamed: "registration")
    public var description: ClientRegistration { registration }

    /// Runs the login: listens on a loopback port, gives `present` the URL to open (print it;
    /// open a browser; an error it throws ends the login), waits for the redirect, and exchanges
    /// the code with its PKCE verifier for a token.
    ///
    /// The listener answers only this login's redirect: a request for another path, with another
    /// `Host` than its own address, with a `state` this login did not send, or from a connection
    /// that another user's process opened (read from `/proc/net/tcp`) is ignored, and the wait
    /// goes on until the time-out. So a local user who learns the URL (with a display, it is in
    /// `xdg-open`'s argv, which `/proc` shows) can neither end the login nor inject a code.
    /// - Throws: `timeout` when no redirect came in time; `tokenEndpointError` when the server
    ///   sent an error (the user denied, say); the ``TokenEndpointClient`` errors for the exchange.
    public func run(client: TokenEndpointClient = TokenEndpointClient(), present: @Sendable (URL) async throws -> Void) async throws -> OAuthToken {
        let fixed = try self.redirectURI.map(Self.loopbackRedirect)
        let listener = try LoopbackListener(port: fixed?.port ?? 0, redirectURI: self.redirectURI)
        defer { listener.close() }
        let host = fixed?.host ?? "127.0.0.1"
        let path = fixed?.path ?? "/callback"
        let redirect = self.redirectURI?.absoluteString ?? "http://127.0.0.1:\(listener.port)/callback"
        let verifier = try Self.randomToken(32)
        let state = try Self.randomToken(16)
        let url = try authorizationURL(redirectURI: redirect, state: state, codeChallenge: try Self.challenge(verifier))
        try await present(url)

        let query = try await listener.waitForRedirect(
            path: path, host: "\(host):\(listener.port)", state: state, timeout: timeout, redirectURI: redirect, fixed: fixed != nil)
        if let error = query["error"] {
            // The provider's own error, escaped (OAuthErrorResponse's description): never a time-out.
            let oauthError = OAuthErrorResponse(error: String(error.prefix(100)), errorDescription: query["error_description"].map { String($0.prefix(300)) })
            throw VaultError(
                .tokenEndpointError, "The authorization server refused the login and redirected with an error: \(oauthError).",
                underlying: oauthError)
        }
        guard let code = query["code"], !code.isEmpty else {
            throw VaultError(.invalidInput, "The redirect holds neither a code nor an error.")
        }
        return try await client.requestToken(
            [("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirect), ("code_verifier", verifier)],
            registration: registration)
    }

    /// Opens `url` with `xdg-open` when there is a display (`DISPLAY` or `WAYLAND_DISPLAY`).
    /// Returns whether it tried; the caller prints the URL either way.
    public static func openInBrowser(_ url: URL, environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        guard environment["DISPLAY"].map({ !$0.isEmpty }) == true || environment["WAYLAND_DISPLAY"].map({ !$0.isEmpty }) == true
        else { return false }
        return SystemCall.spawnQuietly(["xdg-open", url.absoluteString])
    }

    /// Compares two secrets without stopping at the first difference.
    static func same(_ left: String, _ right: String) -> Bool {
        Sodium.constantTimeEqual(left, right)
    }

    /// `count` random bytes, base64url without padding (RFC 7636 §4.1: 43 characters for 32 bytes).
    static func randomToken(_ count: Int) throws -> String {
        try Sodium.ensureInitialized()
        return base64URL(Data(Sodium.randomBytes(count)))
    }

    /// `BASE64URL(SHA256(verifier))` (RFC 7636 §4.2).
    static func challenge(_ verifier: String) throws -> String {
        try Sodium.ensureInitialized()
        return base64URL(Data(Sodium.sha256(Array(verifier.utf8))))
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacing("+", with: "-").replacing("/", with: "_")
            .replacing("=", with: "")
    }
}

/// A one-shot HTTP listener on `127.0.0.1` and a port the kernel picks (or the registered one),
/// for the redirect.
final class LoopbackListener: @unchecked Sendable {  // a socket descriptor, used by the one login task that made it
    private var descriptor: Int32
    let port: UInt16

    /// - Parameters:
    ///   - port: 0 for a port the kernel picks; else this port, as registered.
    ///   - redirectURI: the fixed redirect URI, named in the error when its port is taken.
    /// - Throws: `addressInUse` when `port` is taken; `io` for any other failure.
    init(port requested: UInt16 = 0, redirectURI: URL? = nil) throws {
        let fd: Int32
        do { fd = try SystemCall.inetStreamSocket() } catch { throw Self.failure("create a socket", error) }
        descriptor = fd
        let bindError: Errno?
        do {
            // A port a login just left in TIME_WAIT can be listened on again at once.
            try SystemCall.bindLoopback(fd, port: requested, reuseAddress: requested != 0)
            bindError = nil
        } catch {
            bindError = error
        }
        if bindError == .addressInUse {
            SystemCall.closeAfterUse(fd)
            throw VaultError(
                .addressInUse,
                "The port \(requested) of the redirect URI \(redirectURI.map(ClientRegistration.safe) ?? "") is in use by another program, so the login cannot listen there. Stop that program (another vault login, say) and try again; the provider accepts only the registered redirect URI, so another port would not do.")
        }
        do throws(Errno) {
            if let bindError { throw bindError }
            try SystemCall.listen(fd, backlog: 8)
        } catch {
            SystemCall.closeAfterUse(fd)
            throw Self.failure("listen on 127.0.0.1", error)
        }
        let named: (address: UInt32, port: UInt16)?
        do { named = try SystemCall.inetAddress(fd, peer: false) } catch {
            SystemCall.closeAfterUse(fd)
            throw Self.failure("read the listening port", error)
        }
        port = named?.port ?? 0
        SystemCall.setNonBlocking(fd, true)
    }

    deinit { close() }

    func close() {
        guard descriptor >= 0 else { return }
        SystemCall.closeAfterUse(descriptor)
        descriptor = -1
    }

    /// Waits for a `GET path?…` carrying `state` and answers it with a page that says the login
    /// can go on in the terminal; returns its query. Anything else is answered (a favicon gets a
    /// 404, a wrong `state` a 400) or, from another user or for another `Host`, dropped, and the
    /// wait goes on.
    /// `host` is the `Host` the browser sends (`127.0.0.1:PORT`, or `localhost:PORT` for a
    /// registered `localhost` URI); `redirectURI` and `fixed` only shape the time-out's message.
    func waitForRedirect(
        path: String, host: String, state: String, timeout: Duration, redirectURI: String = "", fixed: Bool = false
    ) async throws -> [String: String] {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        while true {
            let accepted: Int32?
            do { accepted = try SystemCall.accept(descriptor) } catch { throw Self.failure("accept the redirect", error) }
            guard let connection = accepted else {
                guard clock.now < deadline else {
                    throw Self.timedOut(timeout, redirectURI: redirectURI, fixed: fixed)
                }
                do {
                    try await Task.sleep(for: .milliseconds(20))
                } catch {
                    throw VaultError(.cancelled, "The login was cancelled.")
                }
                continue
            }
            defer { SystemCall.closeAfterUse(connection) }
            // Another user's process: dropped unanswered, before a byte is read.
            guard Self.peerIsThisUser(connection, listeningPort: port) else { continue }
            guard let request = Self.readRequest(connection), request.host?.lowercased() == host else { continue }
            let parts = request.target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.first.map(String.init) == path else {
                Self.respond(connection, status: "404 Not Found", body: "Not found.")
                continue
            }
            var query: [String: String] = [:]
            if parts.count == 2 {
                for pair in parts[1].split(separator: "&") {
                    let field = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                    let decode = { (text: Substring) in String(text).replacing("+", with: " ").percentDecoded }
                    guard let name = decode(field[0]) else { continue }
                    query[name] = field.count == 2 ? decode(field[1]) ?? "" : ""
                }
            }
            guard let given = query["state"], AuthorizationCodeLogin.same(given, state) else {
                // Not this login's redirect: whoever sent it learns nothing, and the login waits on.
                Self.respond(connection, status: "400 Bad Request", body: "This is not the redirect of the login in progress.")
                continue
            }
            let body =
                query["error"] == nil
                ? "<!doctype html><title>Signed in</title><p>The login is complete; you can close this window and return to the terminal.</p>"
                : "<!doctype html><title>Login refused</title><p>The authorization server refused the login; the terminal says why. You can close this window.</p>"
            Self.respond(connection, status: "200 OK", body: body)
            return query
        }
    }

    /// Whether the process at the other end of `connection` runs as this user: the kernel lists
    /// every TCP socket with its owner's uid in `/proc/net/tcp`, and the peer's socket is the one
    /// whose local address is the peer's and whose remote address is this listener's port.
    /// `true` when the table cannot be read (no `/proc`), so that the login still works there.
    static func peerIsThisUser(_ connection: Int32, listeningPort: UInt16) -> Bool {
        guard let address = try? SystemCall.inetAddress(connection, peer: true) else { return false }
        // The kernel prints an address as the hex of its raw (network-order) 32 bits read in host
        // order, and a port as its number.
        let peer = "\(hexDigits(address.address, width: 8, uppercase: true)):\(hexDigits(address.port, width: 4, uppercase: true))"
        let ours = "\(hexDigits(SystemCall.loopbackAddressRaw, width: 8, uppercase: true)):\(hexDigits(listeningPort, width: 4, uppercase: true))"
        // Read to the end: procfs files report a size of 0.
        guard let table = try? SystemCall.readWhole("/proc/net/tcp") else { return true }
        for line in table.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid …
            guard fields.count > 7, fields[1] == peer, fields[2] == ours else { continue }
            return UInt32(fields[7]) == SystemCall.effectiveUserID
        }
        return false
    }

    /// The request target of an HTTP/1 request line and its `Host` field, read with a 5 s bound
    /// and an 8 KiB cap.
    private static func readRequest(_ connection: Int32) -> (target: String, host: String?)? {
        SystemCall.setNonBlocking(connection, false)
        SystemCall.setReceiveTimeout(connection, seconds: 5)
        var data = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 2048)
        let endOfHeader: [UInt8] = [0x0d, 0x0a, 0x0d, 0x0a]
        while data.count < 8192 {
            // nil: the 5 s passed (EAGAIN); a failure or the end of the stream ends the request too.
            guard let count = try? buffer.withUnsafeMutableBytes({ raw throws(Errno) in try SystemCall.receive(connection, into: raw) }),
                count > 0
            else { break }
            data += buffer[0..<count]
            if data.count >= 4, data.indices.dropLast(3).contains(where: { Array(data[$0..<$0 + 4]) == endOfHeader }) { break }
        }
        guard let text = String(bytes: data, encoding: .utf8) else { return nil }
        let lines = text.split(separator: "\r\n", omittingEmptySubsequences: false)
        guard let requestLine = lines.first else { return nil }
        let fields = requestLine.trimmingWhitespaceAndNewlines().split(separator: " ")
        guard fields.count == 3, fields[0] == "GET" else { return nil }
        var host: String?
        for line in lines.dropFirst() {
            if line.isEmpty { break }
            guard let colon = line.firstIndex(of: ":"), line[..<colon].lowercased() == "host" else { continue }
            host = line[line.index(after: colon)...].trimmingWhitespace()
        }
        return (String(fields[1]), host)
    }

    private static func respond(_ connection: Int32, status: String, body: String) {
        let text = "HTTP/1.1 \(status)\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n\(body)"
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            // A blocking socket (readRequest made it one): nil (EAGAIN) or a failure ends the answer.
            guard let count = try? bytes[sent...].withUnsafeBytes({ raw throws(Errno) in try SystemCall.send(connection, raw) }),
                count > 0
            else { break }
            sent += count
        }
    }

    /// No redirect in time. The likely cause is a redirect URI the provider does not accept: it
    /// then shows its own error page ("redirect URI mismatch") and never comes back.
    static func timedOut(_ timeout: Duration, redirectURI: String, fixed: Bool) -> VaultError {
        let seconds = Int(TokenEndpointClient.seconds(timeout).rounded(.up))
        let uri = redirectURI.isEmpty ? "" : " \(redirectURI)"
        let advice =
            fixed
            ? "If the provider showed an error page instead (\"redirect URI mismatch\", \"invalid redirect\"), the redirect URI\(uri) is not the one registered for the client: it must match exactly, scheme, host, port and path."
            : "If the provider showed an error page instead (\"redirect URI mismatch\", \"invalid redirect\"), it does not accept the redirect URI\(uri): it probably wants the exact URI registered for the client; register http://127.0.0.1:PORT/callback there and log in with that fixed redirect URI (vault login --redirect-uri)."
        return VaultError(
            .timeout, "No redirect came back from the browser within \(seconds) s; the login was abandoned. \(advice)")
    }

    private static func failure(_ action: String, _ error: Errno) -> VaultError {
        VaultError(.io, "Could not \(action) for the login redirect: \(error.message).")
    }
}
