public import FoundationEssentials

/// How the OAuth client (``TokenEndpointClient``) sends its requests: TokenVault's built-in
/// transport (libcurl, opened on the first request) unless the app supplies its own, such as its
/// own HTTP stack or, in a unit test, the `FakeTokenEndpoint` of the `TokenVaultTesting` product.
///
/// A transport sends one request and returns the server's answer, whatever its status: the
/// client reads OAuth errors out of non-2xx answers and retries transient failures itself. It
/// must not follow redirects (a token request and its secrets go only to the configured
/// endpoint), and it must never log the request's body or its `Authorization` header.
public protocol TokenTransport: Sendable {
    /// Sends `request` and returns the answer; throws when no HTTP answer came (the client
    /// counts that as a transient failure and retries within its attempts).
    func send(_ request: TokenTransportRequest) async throws -> TokenTransportResponse
}

/// One request of the OAuth client: a form POST to a token, device or revocation endpoint, or a
/// GET of a discovery document.
public struct TokenTransportRequest: Sendable {
    /// `POST` for token, device and revocation requests; `GET` for discovery documents.
    public var method: String
    public var url: URL
    /// The header fields, in order (`Content-Type`, `Accept`, and `Authorization` for
    /// `client_secret_basic`).
    public var headers: [(name: String, value: String)]
    /// The form-encoded body: it carries grants, refresh tokens and client secrets.
    public var body: Data
    /// How long this one request may take.
    public var timeout: Duration

    public init(method: String = "POST", url: URL, headers: [(name: String, value: String)], body: Data, timeout: Duration) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }

    /// The first value of the header field `name` (case-insensitive).
    public func value(forHeader name: String) -> String? {
        headers.first { $0.name.equalsIgnoringCase(name) }?.value
    }

    /// The form fields of the body, decoded.
    public var form: [(name: String, value: String)] {
        FormEncoding.decode(String(decoding: body, as: UTF8.self))
    }
}

/// A server's answer to a ``TokenTransportRequest``.
public struct TokenTransportResponse: Sendable {
    public var status: Int
    /// The header fields, in order.
    public var headers: [(name: String, value: String)]
    public var body: Data

    public init(status: Int, headers: [(name: String, value: String)] = [], body: Data) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first value of the header field `name` (case-insensitive).
    public func value(forHeader name: String) -> String? {
        headers.first { $0.name.equalsIgnoringCase(name) }?.value
    }
}
