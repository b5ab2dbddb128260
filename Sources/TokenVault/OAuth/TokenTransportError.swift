/// Why a ``TokenTransport`` got no HTTP answer: what a transport throws (the built-in one, the
/// URLSession and AsyncHTTPClient adapters) and what a ``VaultError`` with code `networkFailure`
/// carries as its ``VaultError/underlying`` error when the OAuth client gave up.
///
/// The OAuth client retries ``Code/cannotConnect``, ``Code/timedOut`` and ``Code/connectionLost``
/// within its attempts and deadline; the others end the operation at once. Its ``message`` names
/// no URL, header or body.
public struct TokenTransportError: Error, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case cannotConnect, timedOut, connectionLost, tlsFailure, proxyFailure, cancelled, other
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// No connection: refused, no route, or the host name did not resolve.
        public static let cannotConnect = Code(.cannotConnect)
        /// No answer within the request's time-out.
        public static let timedOut = Code(.timedOut)
        /// The connection broke before the whole answer came.
        public static let connectionLost = Code(.connectionLost)
        /// The TLS handshake failed: the server's certificate was not trusted (CA bundle), the
        /// client certificate was refused or could not be loaded, or no common cipher.
        public static let tlsFailure = Code(.tlsFailure)
        /// The proxy (from `https_proxy` and its neighbours) could not be used.
        public static let proxyFailure = Code(.proxyFailure)
        /// The request was cancelled.
        public static let cancelled = Code(.cancelled)
        /// Anything else; the message says what.
        public static let other = Code(.other)

        public var description: String { base.rawValue }
    }

    public let code: Code
    /// What went wrong, in words that name no URL, header or body.
    public let message: String
    /// The HTTP stack's own error, if there is one.
    public let underlying: (any Error & Sendable)?

    public init(_ code: Code, _ message: String, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String { "\(code): \(message)" }

    /// Whether the OAuth client sends the request again (attempts and deadline allowing).
    var isTransient: Bool { [.cannotConnect, .timedOut, .connectionLost].contains(code) }
}
