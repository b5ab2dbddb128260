#if AsyncHTTPClientAdapter  // built with the package trait AsyncHTTPClientAdapter; see Package.swift
public import AsyncHTTPClient
import Foundation
public import NIOCore
import NIOHTTP1
public import TokenVault

/// The OAuth client's requests (refresh, login, discovery, revocation) over AsyncHTTPClient, so
/// that the server's own HTTP stack, with its TLS configuration, proxy, event loops and tracing,
/// reaches the token endpoint:
///
/// ```swift
/// let transport = AsyncHTTPClientTokenTransport(configuration: myConfiguration)
/// let client = TokenEndpointClient(transport: transport)
/// let token = try await vault.freshToken(for: key, client: client)
/// // …
/// try await transport.shutdown()
/// ```
///
/// It keeps the ``TokenTransport`` contract: its client is made from the given configuration with
/// redirects disallowed (a token request and its secrets go only to the configured endpoint; a
/// 3xx answer is handed back, and the OAuth client reports it), and each request is bounded by
/// the time-out it is given. Its client must be shut down with ``shutdown()``.
public struct AsyncHTTPClientTokenTransport: TokenTransport {
    /// The client requests go through.
    public let client: HTTPClient

    /// The most of an answer's body that is read; the OAuth client refuses longer ones too.
    static let maximumBodySize = 1 << 20

    /// A transport over a new client made from `configuration`, with redirects disallowed.
    public init(
        configuration: HTTPClient.Configuration = HTTPClient.Configuration(),
        eventLoopGroup: any EventLoopGroup = HTTPClient.defaultEventLoopGroup
    ) {
        var configuration = configuration
        configuration.redirectConfiguration = .disallow
        client = HTTPClient(eventLoopGroup: eventLoopGroup, configuration: configuration)
    }

    /// Shuts the client down; call it once no request is in flight.
    public func shutdown() async throws {
        try await client.shutdown()
    }

    public func send(_ request: TokenTransportRequest) async throws -> TokenTransportResponse {
        var outgoing = HTTPClientRequest(url: request.url.absoluteString)
        outgoing.method = HTTPMethod(rawValue: request.method)
        for (name, value) in request.headers {
            outgoing.headers.add(name: name, value: value)
        }
        if request.method != "GET" {
            outgoing.body = .bytes(ByteBuffer(bytes: request.body))
        }
        let (seconds, attoseconds) = request.timeout.components
        let timeout = TimeAmount.nanoseconds(max(1, seconds * 1_000_000_000 + attoseconds / 1_000_000_000))
        do {
            let response = try await client.execute(outgoing, timeout: timeout)
            let body = try await response.body.collect(upTo: Self.maximumBodySize + 1)
            let data = Data(body.readableBytesView)
            return TokenTransportResponse(
                status: Int(response.status.code), headers: response.headers.map { ($0.name, $0.value) }, body: data)
        } catch let error as TokenTransportError {
            throw error
        } catch {
            throw TokenTransportError(asyncHTTPClientError: error)
        }
    }
}

extension TokenTransportError {
    /// AsyncHTTPClient's (or NIO's) error in the transport's terms (its text names no URL).
    init(asyncHTTPClientError error: any Error) {
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout, .writeTimeout, .connectTimeout, .getConnectionFromPoolTimeout:
                self.init(.timedOut, "no answer within the request's time-out", underlying: error)
            case .tlsHandshakeTimeout:
                self.init(.tlsFailure, "the TLS handshake timed out", underlying: error)
            case .remoteConnectionClosed:
                self.init(.connectionLost, "the connection was lost", underlying: error)
            case .cancelled, .requestStreamCancelled:
                self.init(.cancelled, "the request was cancelled", underlying: error)
            case .invalidProxyResponse, .proxyAuthenticationRequired, .httpProxyHandshakeTimeout, .socksHandshakeTimeout,
                .invalidProxyConfiguration:
                self.init(.proxyFailure, "the proxy could not be used (\(error.shortDescription))", underlying: error)
            default:
                self.init(.other, "AsyncHTTPClient: \(error.shortDescription)", underlying: error)
            }
            return
        }
        if error is CancellationError {
            self.init(.cancelled, "the request was cancelled", underlying: nil)
            return
        }
        // NIO's connection errors and NIOSSL's handshake errors, by the name of their type: their
        // modules are not this adapter's to import.
        let kind = String(reflecting: type(of: error))
        if kind.contains("NIOSSL") || kind.contains("BoringSSL") {
            self.init(.tlsFailure, "the TLS connection failed (\(kind))", underlying: nil)
        } else if kind.contains("Connect") || kind.contains("IOError") || kind.contains("Resolution") {
            self.init(.cannotConnect, "could not connect (\(kind))", underlying: nil)
        } else {
            self.init(.other, kind, underlying: nil)
        }
    }
}

extension HTTPClientError {
    /// The error's name, without the request's URL.
    fileprivate var shortDescription: String {
        String(describing: self).split(separator: "(").first.map(String.init) ?? "error"
    }
}
#endif
