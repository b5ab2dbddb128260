import Foundation
public import TokenVault

#if canImport(FoundationNetworking)
    public import FoundationNetworking
#endif

/// The OAuth client's requests (refresh, login, discovery, revocation) over URLSession, so that
/// the app's own configuration (proxy, TLS, protocol classes, headers) reaches the token endpoint:
///
/// ```swift
/// let client = TokenEndpointClient(transport: URLSessionTokenTransport(configuration: myConfiguration))
/// let token = try await vault.freshToken(for: key, client: client)
/// ```
///
/// It keeps the ``TokenTransport`` contract: it never follows a redirect (the token request and
/// its secrets go only to the configured endpoint; a 3xx answer is handed back, and the client
/// reports it), stores no cookies, and bounds each request by the time-out it is given.
public struct URLSessionTokenTransport: TokenTransport {
    /// The session requests go through: made from the configuration given, with redirects refused.
    public let session: URLSession

    /// A transport over a session made from `configuration` (an ephemeral one by default), with
    /// cookies off and a delegate that refuses every redirect.
    public init(configuration: URLSessionConfiguration = .ephemeral) {
        let configuration = configuration.copy() as! URLSessionConfiguration
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        session = URLSession(configuration: configuration, delegate: RedirectRefusal(), delegateQueue: nil)
    }

    public func send(_ request: TokenTransportRequest) async throws -> TokenTransportResponse {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers {
            urlRequest.addValue(value, forHTTPHeaderField: name)
        }
        if request.method != "GET" { urlRequest.httpBody = request.body }
        let (seconds, attoseconds) = request.timeout.components
        urlRequest.timeoutInterval = max(0.001, Double(seconds) + Double(attoseconds) / 1e18)
        let session = self.session
        let sendable = SendableRequest(value: urlRequest)
        let (data, response) = try await withTimeLimit(request.timeout) {
            let (data, response) = try await session.data(for: sendable.value)
            return SendableAnswer(data: data, response: response)
        }.unpacked
        guard let http = response as? HTTPURLResponse else {
            throw TokenTransportError(.other, "the answer was not an HTTP response")
        }
        let headers = http.allHeaderFields.compactMap { field -> (name: String, value: String)? in
            guard let name = field.key as? String, let value = field.value as? String else { return nil }
            return (name, value)
        }
        return TokenTransportResponse(status: http.statusCode, headers: headers, body: data)
    }

    /// Runs `operation`, or throws ``TokenTransportError/timedOut`` once `limit` has passed
    /// (the operation is cancelled, which cancels its URLSession task).
    private func withTimeLimit(_ limit: Duration, _ operation: @escaping @Sendable () async throws -> SendableAnswer) async throws
        -> SendableAnswer
    {
        try await withThrowingTaskGroup(of: SendableAnswer.self) { group in
            group.addTask {
                do {
                    return try await operation()
                } catch let error as URLError {
                    throw TokenTransportError(urlError: error)
                }
            }
            group.addTask {
                try await Task.sleep(for: limit)
                throw TokenTransportError(.timedOut, "no answer within the request's time-out")
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }
}

/// URLRequest and URLResponse carried across the time limit's child task.
private struct SendableRequest: @unchecked Sendable { var value: URLRequest }  // a value the child task alone reads
private struct SendableAnswer: @unchecked Sendable {  // an answer handed from the child task to its one waiter
    var data: Data
    var response: URLResponse
    var unpacked: (Data, URLResponse) { (data, response) }
}

/// Refuses every redirect: URLSession then hands back the 3xx answer itself.
private final class RedirectRefusal: NSObject, URLSessionTaskDelegate, Sendable {
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }
}

extension TokenTransportError {
    /// URLSession's error in the transport's terms (its text names no URL).
    init(urlError: URLError) {
        switch urlError.code {
        case .timedOut:
            self.init(.timedOut, "no answer within the request's time-out", underlying: urlError)
        case .cannotConnectToHost, .cannotFindHost, .dnsLookupFailed, .notConnectedToInternet:
            self.init(.cannotConnect, "could not connect (URLError \(urlError.code.rawValue))", underlying: urlError)
        case .networkConnectionLost:
            self.init(.connectionLost, "the connection was lost", underlying: urlError)
        case .secureConnectionFailed, .serverCertificateUntrusted, .serverCertificateHasBadDate, .serverCertificateNotYetValid,
            .serverCertificateHasUnknownRoot, .clientCertificateRejected, .clientCertificateRequired:
            self.init(.tlsFailure, "the TLS connection failed (URLError \(urlError.code.rawValue))", underlying: urlError)
        case .cancelled:
            self.init(.cancelled, "the request was cancelled", underlying: urlError)
        default:
            self.init(.other, "URLError \(urlError.code.rawValue)", underlying: urlError)
        }
    }
}
