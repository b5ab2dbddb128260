// Owns: the agent's wire format, as a pure value layer: frames and messages to and from bytes,
// with no descriptor, clock or lock (the I/O shell is AgentClient and AgentServer).
public import FoundationEssentials

/// The protocol `vault agent` speaks on its socket: versioned, length-prefixed request/response.
///
/// Every message is one frame:
///
/// ```
/// +----------------------+---------+------+-----------------+
/// | length (4 bytes, BE) | version | kind | payload         |
/// +----------------------+---------+------+-----------------+
///   = 2 + payload bytes     1 byte   1 byte  length - 2 bytes
/// ```
///
/// `length` counts the bytes after it, at least 2 and at most ``maximumBodyLength``; a larger
/// length is refused before any of the body is read (the client does not send one either). The
/// payload is compact JSON for every kind but `unlock`, whose payload is the passphrase's bytes.
/// See <doc:Agent> for every kind.
///
/// A peer that receives a frame whose version is not ``version`` answers (if it is the agent)
/// with a `failure` frame of its own version, code `unsupported-version`, and closes; a client
/// that receives one says so and goes direct.
///
/// Kinds are added within a version, never changed: an agent that does not know a request's kind
/// answers a `failure` with code ``AgentResponse/unsupportedRequest`` (an agent built before
/// the writes, `store` and `delete`, answers `invalid-input`, "unknown message kind"), and the
/// client goes direct. So a new client works with an older agent of the same version, and an
/// older client with a newer agent.
///
/// What a program needs is public: ``vaultIdentity(of:)`` and ``socketPath(environment:)``, with
/// ``AgentClient``. The wire itself (frames, requests, responses, the version and bounds) is
/// `@_spi(AgentWire)`: the `vault` command, the agent, and the Fuzz and Benchmarks packages
/// import it so; it is not an API a program builds on.
public enum AgentProtocol: Sendable {
    /// The version this build speaks.
    @_spi(AgentWire) public static let version: UInt8 = 1
    /// The largest body (version, kind and payload) either side accepts: 64 KiB, room for a JWT
    /// access token of some kilobytes and for the status of a few hundred entries.
    @_spi(AgentWire) public static let maximumBodyLength = 64 * 1024
    /// The length prefix.
    @_spi(AgentWire) public static let headerLength = 4

    /// A message kind: the second byte of every body.
    enum Kind: UInt8 {
        case tokenRequest = 0x01
        case statusRequest = 0x02
        case unlockRequest = 0x03
        case lockRequest = 0x04
        /// A DPoP proof for one request, with the token it goes with (issue 32).
        case proofRequest = 0x05
        /// Save a token entry (`vault set`, the store step of `vault login`); the agent's own uid only.
        case storeRequest = 0x06
        /// Remove an entry (`vault delete`); the agent's own uid only.
        case deleteRequest = 0x07
        /// The accounts of one service (`vault git-credential get` when git sends no user name).
        case accountsRequest = 0x08
        /// A page of what `vault list` shows, for a vault only the agent holds open.
        case listRequest = 0x09
        case tokenResponse = 0x81
        case statusResponse = 0x82
        case done = 0x83
        case proofResponse = 0x85
        /// A write done (the answer to `store` and `delete`).
        case writeResponse = 0x86
        case accountsResponse = 0x88
        case listResponse = 0x89
        case failure = 0xFF
    }

    /// Why bytes are not a message.
    @_spi(AgentWire) public struct DecodingError: Error, Sendable, Equatable, CustomStringConvertible {
        /// The other side speaks another version (the body's first byte), when that is the reason.
        public let peerVersion: UInt8?
        /// What is wrong, for a person; never holds the bytes.
        public let reason: String
        /// The kind byte names no kind this build knows (a later build's request, say): the agent
        /// answers ``AgentResponse/unsupportedRequest``.
        public let isUnknownKind: Bool

        init(_ reason: String, peerVersion: UInt8? = nil, unknownKind: Bool = false) {
            self.reason = reason
            self.peerVersion = peerVersion
            self.isUnknownKind = unknownKind
        }

        public var description: String { reason }
    }

    // MARK: Frames

    /// The body length a 4-byte header announces.
    /// - Throws: ``DecodingError`` when it is below 2 or above ``maximumBodyLength``: the frame
    ///   is refused before its body is read.
    @_spi(AgentWire) public static func bodyLength(header: some Collection<UInt8>) throws(DecodingError) -> Int {
        guard header.count == headerLength else { throw DecodingError("a frame header is \(headerLength) bytes") }
        let length = header.reduce(0) { ($0 << 8) | Int($1) }
        guard length >= 2 else { throw DecodingError("a frame body holds at least a version and a kind") }
        guard length <= maximumBodyLength else {
            throw DecodingError("a frame of \(length) bytes is larger than the \(maximumBodyLength) bytes the protocol allows")
        }
        return length
    }

    /// One frame: the header, then `body`.
    static func frame(kind: Kind, payload: some Collection<UInt8>, version: UInt8 = version) -> [UInt8] {
        let length = 2 + payload.count
        var bytes: [UInt8] = []
        bytes.reserveCapacity(headerLength + length)
        bytes += [UInt8(truncatingIfNeeded: length >> 24), UInt8(truncatingIfNeeded: length >> 16),
                  UInt8(truncatingIfNeeded: length >> 8), UInt8(truncatingIfNeeded: length)]
        bytes += [version, kind.rawValue]
        bytes += payload
        return bytes
    }

    /// The kind and payload of a body, once its version is checked.
    static func split(body: some Collection<UInt8>) throws(DecodingError) -> (Kind, ArraySlice<UInt8>) {
        let bytes = Array(body)
        guard bytes.count >= 2 else { throw DecodingError("a frame body holds at least a version and a kind") }
        guard bytes.count <= maximumBodyLength else { throw DecodingError("the frame is larger than the protocol allows") }
        guard bytes[0] == version else {
            throw DecodingError(
                "the other side speaks agent protocol version \(bytes[0]); this one speaks \(version)", peerVersion: bytes[0])
        }
        guard let kind = Kind(rawValue: bytes[1]) else {
            throw DecodingError("unknown message kind \(bytes[1])", unknownKind: true)
        }
        return (kind, bytes[2...])
    }

    static func json<Value: Decodable>(_ type: Value.Type, _ payload: ArraySlice<UInt8>) throws(DecodingError) -> Value {
        do {
            return try JSONDecoder().decode(type, from: Data(payload))
        } catch {
            throw DecodingError("the payload is not the JSON this message kind carries")
        }
    }

    /// `value` as compact JSON, handed to `body`; the bytes are wiped after (a payload with secrets).
    static func withJSON<Result>(_ value: some Encodable, _ body: ([UInt8]) -> Result) -> Result {
        var bytes = json(value)
        defer { bytes.wipe() }
        return body(bytes)
    }

    static func json(_ value: some Encodable) -> [UInt8] {
        // Keys sorted, so that one message is always the same bytes (the fuzz seeds are compared).
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding a struct of strings, finite numbers and booleans does not fail.
        return (try? encoder.encode(value)).map(Array.init) ?? Array("{}".utf8)
    }

    // MARK: Failure codes

    /// The ``VaultError/Code-swift.struct`` a `failure` frame names, by its stable name.
    static func code(named name: String) -> VaultError.Code? {
        codes.first { $0.description == name }
    }

    private static let codes: [VaultError.Code] = [
        .notFound, .expired, .backendUnavailable, .locked, .authenticationFailed, .integrityFailure, .notAVault,
        .unsupportedVersion, .truncated, .emptyFile, .permissionDenied, .insecurePermissions, .invalidInput, .io,
        .diskFull, .keyFileMissing, .alreadyExists, .tooLarge, .timeout, .tokenEndpointError,
        .reauthenticationRequired, .cancelled, .configurationError, .networkFailure, .httpError,
    ]
}

/// What a client asks the agent.
@_spi(AgentWire) public enum AgentRequest: Sendable, Equatable {
    /// The access token under a key. `vault` names the vault the client would open (see
    /// ``AgentProtocol/vaultIdentity(of:)``): an agent serving another vault refuses with
    /// `not-this-vault` and the client goes direct.
    case token(AgentTokenRequest)
    /// Whether the agent is unlocked, and when it refreshes each entry next.
    case status
    /// A passphrase for the agent's locked file vault (`vault unlock`).
    case unlock(passphrase: SecretBytes)
    /// Forget the key now (`vault lock`).
    case lock
    /// The access token under a key with a DPoP proof the agent signs for one request: the
    /// client never sees the DPoP key.
    case proof(AgentProofRequest)
    /// Save a token entry, as `vault set` or `vault login` would directly. Only the agent's own
    /// uid may write; the answer is ``AgentResponse/written(_:)``, which holds no secret.
    case store(AgentStoreRequest)
    /// Remove an entry, as `vault delete` would directly (the agent's own uid only).
    case delete(AgentDeleteRequest)
    /// The accounts of one service: which entry `vault git-credential get` uses when git sends
    /// no user name (the service's only one).
    case accounts(AgentAccountsRequest)
    /// A page of what `vault list` shows: for a vault that only the agent holds open here.
    case list(AgentListRequest)

    /// The frame for this request.
    public func encoded() -> [UInt8] {
        switch self {
        case .token(let request): AgentProtocol.frame(kind: .tokenRequest, payload: request.json)
        case .status: AgentProtocol.frame(kind: .statusRequest, payload: [])
        case .unlock(let passphrase):
            passphrase.withUnsafeBytes { AgentProtocol.frame(kind: .unlockRequest, payload: Array($0)) }
        case .lock: AgentProtocol.frame(kind: .lockRequest, payload: [])
        case .proof(let request): AgentProtocol.frame(kind: .proofRequest, payload: AgentProtocol.json(request))
        case .store(let request):
            // The payload holds the entry's secrets: the intermediate bytes are wiped.
            AgentProtocol.withJSON(request) { AgentProtocol.frame(kind: .storeRequest, payload: $0) }
        case .delete(let request): AgentProtocol.frame(kind: .deleteRequest, payload: AgentProtocol.json(request))
        case .accounts(let request): AgentProtocol.frame(kind: .accountsRequest, payload: AgentProtocol.json(request))
        case .list(let request): AgentProtocol.frame(kind: .listRequest, payload: AgentProtocol.json(request))
        }
    }

    /// The request a frame body (the bytes after the length) holds.
    /// - Throws: ``AgentProtocol/DecodingError`` for another version, an unknown or response kind,
    ///   a payload that is not what the kind carries, or an invalid key.
    public init(body: some Collection<UInt8>) throws(AgentProtocol.DecodingError) {
        let (kind, payload) = try AgentProtocol.split(body: body)
        switch kind {
        case .tokenRequest:
            let request = try AgentProtocol.json(AgentTokenRequest.self, payload)
            guard (try? request.key()) != nil else { throw AgentProtocol.DecodingError("the request names no valid entry") }
            guard request.leeway.isFinite, request.leeway >= 0, request.leeway <= 86_400 else {
                throw AgentProtocol.DecodingError("the leeway must be between 0 and 86400 seconds")
            }
            self = .token(request)
        case .proofRequest:
            let request = try AgentProtocol.json(AgentProofRequest.self, payload)
            guard (try? request.token.key()) != nil else { throw AgentProtocol.DecodingError("the request names no valid entry") }
            guard request.token.leeway.isFinite, request.token.leeway >= 0, request.token.leeway <= 86_400 else {
                throw AgentProtocol.DecodingError("the leeway must be between 0 and 86400 seconds")
            }
            guard URL(string: request.url)?.host != nil, !request.method.isEmpty, request.method.count <= 16 else {
                throw AgentProtocol.DecodingError("a proof request names a method and an http(s) URL")
            }
            self = .proof(request)
        case .storeRequest:
            let request = try AgentProtocol.json(AgentStoreRequest.self, payload)
            guard (try? request.key()) != nil else { throw AgentProtocol.DecodingError("the request names no valid entry") }
            // The entry must be one `vault set` or `vault login` writes: a token (with, to
            // replace the whole entry, a registration and a DPoP key), never a refresh verdict or
            // a refresh journal, which only the refresh path writes.
            guard let entry = try? request.storedEntry() else {
                throw AgentProtocol.DecodingError("the entry to store is not a TokenVault token entry")
            }
            guard entry.rejection == nil, entry.presenting == nil,
                request.registration == .replace || (entry.refresh == nil && entry.dpop == nil)
            else {
                throw AgentProtocol.DecodingError("the entry to store holds more than a write of `vault set` or `vault login` does")
            }
            self = .store(request)
        case .deleteRequest:
            let request = try AgentProtocol.json(AgentDeleteRequest.self, payload)
            guard (try? request.key()) != nil else { throw AgentProtocol.DecodingError("the request names no valid entry") }
            self = .delete(request)
        case .accountsRequest:
            let request = try AgentProtocol.json(AgentAccountsRequest.self, payload)
            guard (try? CredentialKey(service: request.service, account: CredentialKey.defaultAccount)) != nil else {
                throw AgentProtocol.DecodingError("the request names no valid service")
            }
            self = .accounts(request)
        case .listRequest:
            let request = try AgentProtocol.json(AgentListRequest.self, payload)
            if let service = request.service, (try? CredentialKey(service: service, account: CredentialKey.defaultAccount)) == nil {
                throw AgentProtocol.DecodingError("the request names no valid service")
            }
            guard (request.afterService == nil) == (request.afterAccount == nil), request.afterService == nil || request.after != nil else {
                throw AgentProtocol.DecodingError("the request names no valid entry to start after")
            }
            self = .list(request)
        case .statusRequest, .lockRequest:
            guard payload.isEmpty else { throw AgentProtocol.DecodingError("this message kind carries no payload") }
            self = kind == .statusRequest ? .status : .lock
        case .unlockRequest:
            guard !payload.isEmpty else { throw AgentProtocol.DecodingError("an unlock request carries a passphrase") }
            do {
                self = .unlock(passphrase: try SecretBytes(copying: payload))
            } catch {
                throw AgentProtocol.DecodingError("no secure memory for the passphrase")
            }
        default:
            throw AgentProtocol.DecodingError("a response is not a request")
        }
    }
}

/// A `token` request's fields.
@_spi(AgentWire) public struct AgentTokenRequest: Sendable, Equatable, Codable {
    public var service: String
    public var account: String
    /// Refresh first if the token expires within `leeway` seconds (and the entry can be refreshed).
    public var fresh: Bool
    public var leeway: Double
    /// The vault the client would open directly (``AgentProtocol/vaultIdentity(of:)``).
    public var vault: String

    public init(key: CredentialKey, fresh: Bool, leeway: TimeInterval = 60, vault: String) {
        self.service = key.service
        self.account = key.account
        self.fresh = fresh
        self.leeway = leeway
        self.vault = vault
    }

    public func key() throws -> CredentialKey { try CredentialKey(service: service, account: account) }

    /// The payload: the bytes ``AgentProtocol/json(_:)`` makes of it (keys sorted, slashes not
    /// escaped, JSONEncoder's escapes), written without JSONEncoder. A cold `vault get` through
    /// the agent sends one, and JSONEncoder's first use builds its generic containers through the
    /// runtime's type lookups: about 4 % of that process (`perf`, release build). A leeway that is
    /// not a whole number of seconds goes through JSONEncoder. `AgentWireTests` compares the two.
    var json: [UInt8] {
        guard leeway.sign == .plus, leeway < 1e15, leeway.rounded(.towardZero) == leeway else { return AgentProtocol.json(self) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(48 + service.utf8.count + account.utf8.count + vault.utf8.count)
        bytes += #"{"account":"#.utf8
        AgentProtocol.appendJSONString(account, to: &bytes)
        bytes += (fresh ? #","fresh":true,"leeway":"# : #","fresh":false,"leeway":"#).utf8
        bytes += String(Int64(leeway)).utf8
        bytes += #","service":"#.utf8
        AgentProtocol.appendJSONString(service, to: &bytes)
        bytes += #","vault":"#.utf8
        AgentProtocol.appendJSONString(vault, to: &bytes)
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }
}

extension AgentProtocol {
    /// `string` as a JSON string, escaped as JSONEncoder escapes it: a quote, a backslash,
    /// backspace, tab, newline, form feed and carriage return as two-character escapes, the other
    /// control characters as `\u00xx` (lower-case hex), everything else as its UTF-8 bytes.
    static func appendJSONString(_ string: String, to bytes: inout [UInt8]) {
        let hex = Array("0123456789abcdef".utf8)
        bytes.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0x08: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "b")]
            case 0x09: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case 0x0A: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0x0C: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "f")]
            case 0x0D: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            case 0x00..<0x20:
                bytes += Array(#"\u00"#.utf8)
                bytes += [hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}

/// A `proof` request's fields: the token request, and the request the proof is for.
@_spi(AgentWire) public struct AgentProofRequest: Sendable, Equatable, Codable {
    public var token: AgentTokenRequest
    /// The request's method (`htm`).
    public var method: String
    /// The request's URL (`htu`; its query and fragment are not signed).
    public var url: String
    /// The resource server's nonce, when it asked for one (else the agent's kept one).
    public var nonce: String?

    public init(token: AgentTokenRequest, method: String, url: URL, nonce: String? = nil) {
        self.token = token
        self.method = method
        self.url = url.absoluteString
        self.nonce = nonce
    }
}

/// What the agent answers a `proof` request: the token and, for a DPoP-bound entry, a proof it
/// signed for that one request (`nil` for a Bearer token).
public struct AgentAuthorization: Sendable, Equatable, Codable, CustomStringConvertible {
    public var token: AgentToken
    public var dpopProof: String?

    enum CodingKeys: String, CodingKey { case token, dpopProof = "dpop" }

    public init(token: AgentToken, dpopProof: String?) {
        self.token = token
        self.dpopProof = dpopProof
    }

    /// The header fields for the request: `Authorization` (`DPoP …` or `Bearer …`) and `DPoP`.
    public var fields: [(name: String, value: String)] {
        guard let dpopProof else {
            let scheme = token.tokenType.equalsIgnoringCase("bearer") ? "Bearer" : token.tokenType
            return [(name: "Authorization", value: "\(scheme) \(token.accessToken)")]
        }
        return [(name: "Authorization", value: "DPoP \(token.accessToken)"), (name: "DPoP", value: dpopProof)]
    }

    public var description: String { "AgentAuthorization(\(token.tokenType), \(dpopProof == nil ? "no proof" : "with a proof"))" }
}

/// What the agent hands out: the access token and what a caller needs to use it, never the
/// refresh token, the client secret or any key.
public struct AgentToken: Sendable, Equatable, Codable, CustomStringConvertible {
    public var accessToken: String
    public var tokenType: String
    /// Seconds since 1970, or nil when the server gave no expiry.
    public var expiresAt: Double?
    public var scope: String?
    /// The agent vouches for it: got from the refresh path (as fresh as the server makes them),
    /// or kept fresh by the agent's refresh ahead.
    public var fresh: Bool

    enum CodingKeys: String, CodingKey {
        case accessToken = "access_token", tokenType = "token_type", expiresAt = "expires_at", scope, fresh
    }

    public init(accessToken: String, tokenType: String, expiresAt: Date?, scope: String?, fresh: Bool) {
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.expiresAt = expiresAt?.timeIntervalSince1970
        self.scope = scope
        self.fresh = fresh
    }

    /// The expiry as a date.
    public var expiry: Date? { expiresAt.map(Date.init(timeIntervalSince1970:)) }

    /// The token as an ``OAuthToken`` with no refresh token (the agent never hands one out).
    public var oauthToken: OAuthToken {
        OAuthToken(accessToken: accessToken, tokenType: tokenType, scope: scope, expiresAt: expiry)
    }

    public var description: String { "AgentToken(\(tokenType), access token redacted)" }
}

/// What `status` answers.
public struct AgentStatus: Sendable, Equatable, Codable {
    /// One entry the agent refreshes ahead.
    public struct Entry: Sendable, Equatable, Codable {
        public var service: String
        public var account: String
        /// When the agent refreshes it next (seconds since 1970), or nil when it will not.
        public var nextRefresh: Double?
        /// `scheduled`, `backing-off`, `rejected` (log in again) or `not-refreshable` (a client
        /// registration but no refresh token). Entries the agent has no reason to refresh (no
        /// registration, or no expiry) are not listed.
        public var state: String

        enum CodingKeys: String, CodingKey { case service, account, nextRefresh = "next_refresh", state }

        public init(service: String, account: String, nextRefresh: Double?, state: String) {
            self.service = service
            self.account = account
            self.nextRefresh = nextRefresh
            self.state = state
        }
    }

    public var pid: Int32
    public var unlocked: Bool
    /// The vault it serves (``AgentProtocol/vaultIdentity(of:)``).
    public var vault: String
    /// The fraction of a token's lifetime after which it is refreshed.
    public var refreshAt: Double
    public var entries: [Entry]
    /// How many entries the vault holds, counted when the status was asked for: what `vault
    /// status` shows of a vault it cannot open itself (a passphrase vault the agent holds
    /// unlocked). Nil while the agent is locked, to a peer of another uid (which sees only its
    /// granted entries), and from an agent built before it was added.
    public var count: Int?

    enum CodingKeys: String, CodingKey { case pid, unlocked, vault, refreshAt = "refresh_at", entries, count }

    public init(pid: Int32, unlocked: Bool, vault: String, refreshAt: Double, entries: [Entry], count: Int? = nil) {
        self.pid = pid
        self.unlocked = unlocked
        self.vault = vault
        self.refreshAt = refreshAt
        self.entries = entries
        self.count = count
    }
}

/// What the agent answers.
@_spi(AgentWire) public enum AgentResponse: Sendable, Equatable {
    case token(AgentToken)
    case status(AgentStatus)
    /// The answer to a `proof` request.
    case authorization(AgentAuthorization)
    /// `unlock` or `lock` done.
    case done
    /// A `store` or `delete` done: where, and (for `delete`) whether there was an entry.
    case written(AgentWriteResult)
    /// The answer to `accounts`.
    case accounts(AgentAccounts)
    /// The answer to `list`: one page.
    case listing(AgentListing)
    /// The request failed: `code` is a ``VaultError/Code-swift.struct`` name (or `not-this-vault`),
    /// `message` a message that holds no secret.
    case failure(code: String, message: String)

    /// The code of a failure that means "this agent serves another vault".
    public static let notThisVault = "not-this-vault"
    /// The code of a failure that means "this agent does not know that request's kind" (a client
    /// of a later build): the client goes direct.
    public static let unsupportedRequest = "unsupported-request"
    /// The code of a failure that means "every connection slot this peer may use is taken"
    /// (`--max-connections`, or its uid's share, `--max-connections-per-user`): sent as the agent
    /// accepts the connection, which it then closes, before the request is read. A client of the
    /// agent's own user goes direct; a client of another user tries again within its bound.
    public static let noFreeConnection = "no-free-connection"

    struct Failure: Codable {
        var code: String
        var message: String
    }

    /// The frame for this response, in `version` (the agent answers a client of another version
    /// in its own version, with `unsupported-version`).
    public func encoded(version: UInt8 = AgentProtocol.version) -> [UInt8] {
        switch self {
        case .token(let token): AgentProtocol.frame(kind: .tokenResponse, payload: AgentProtocol.json(token), version: version)
        case .status(let status): AgentProtocol.frame(kind: .statusResponse, payload: AgentProtocol.json(status), version: version)
        case .done: AgentProtocol.frame(kind: .done, payload: [], version: version)
        case .written(let result): AgentProtocol.frame(kind: .writeResponse, payload: AgentProtocol.json(result), version: version)
        case .accounts(let accounts): AgentProtocol.frame(kind: .accountsResponse, payload: AgentProtocol.json(accounts), version: version)
        case .listing(let listing): AgentProtocol.frame(kind: .listResponse, payload: AgentProtocol.json(listing), version: version)
        case .authorization(let authorization):
            AgentProtocol.frame(kind: .proofResponse, payload: AgentProtocol.json(authorization), version: version)
        case .failure(let code, let message):
            AgentProtocol.frame(kind: .failure, payload: AgentProtocol.json(Failure(code: code, message: message)), version: version)
        }
    }

    /// The response a frame body holds.
    public init(body: some Collection<UInt8>) throws(AgentProtocol.DecodingError) {
        let (kind, payload) = try AgentProtocol.split(body: body)
        switch kind {
        case .tokenResponse:
            // Read by hand when it is the flat object the agent writes; JSONDecoder otherwise.
            let token: AgentToken
            if let read = AgentToken(flatJSON: payload) {
                token = read
            } else {
                token = try AgentProtocol.json(AgentToken.self, payload)
            }
            guard token.expiresAt?.isFinite ?? true else { throw AgentProtocol.DecodingError("the expiry is not a finite time") }
            self = .token(token)
        case .statusResponse:
            let status = try AgentProtocol.json(AgentStatus.self, payload)
            guard status.refreshAt.isFinite, status.entries.allSatisfy({ $0.nextRefresh?.isFinite ?? true }) else {
                throw AgentProtocol.DecodingError("a time in the status is not finite")
            }
            self = .status(status)
        case .proofResponse:
            let authorization = try AgentProtocol.json(AgentAuthorization.self, payload)
            guard authorization.token.expiresAt?.isFinite ?? true else { throw AgentProtocol.DecodingError("the expiry is not a finite time") }
            self = .authorization(authorization)
        case .done:
            guard payload.isEmpty else { throw AgentProtocol.DecodingError("this message kind carries no payload") }
            self = .done
        case .writeResponse:
            self = .written(try AgentProtocol.json(AgentWriteResult.self, payload))
        case .accountsResponse:
            self = .accounts(try AgentProtocol.json(AgentAccounts.self, payload))
        case .listResponse:
            let listing = try AgentProtocol.json(AgentListing.self, payload)
            guard listing.entries.allSatisfy({ $0.expiresAt?.isFinite ?? true }) else {
                throw AgentProtocol.DecodingError("an expiry in the listing is not a finite time")
            }
            self = .listing(listing)
        case .failure:
            let failure = try AgentProtocol.json(Failure.self, payload)
            self = .failure(code: failure.code, message: failure.message)
        default:
            throw AgentProtocol.DecodingError("a request is not a response")
        }
    }

    /// The error a failure stands for, as the library would have thrown it directly.
    public var error: VaultError? {
        guard case .failure(let code, let message) = self else { return nil }
        return VaultError(AgentProtocol.code(named: code) ?? .io, message)
    }
}

extension AgentProtocol {
    /// What names a vault between a client and the agent: the backend asked for and the file it
    /// would use. An agent answers only requests that name the vault it opened.
    public static func vaultIdentity(of configuration: VaultConfiguration) -> String {
        "\(configuration.backend.rawValue) \(configuration.resolvedFilePath)"
    }

    /// The same, with the default file's location read from `environment` (the `vault` command's
    /// environment, read once) instead of the process's environment, read anew.
    package static func vaultIdentity(of configuration: VaultConfiguration, environment: [String: String]) -> String {
        "\(configuration.backend.rawValue) \(configuration.resolvedFilePath(environment: environment))"
    }

    /// The agent's socket: `TOKEN_VAULT_AGENT_SOCKET` when set (a system agent, or the socket
    /// `vault run` hands its command), else `$XDG_RUNTIME_DIR/tokenvault/agent.sock`; nil when
    /// `TOKEN_VAULT_AGENT=off` or there is no runtime directory.
    public static func socketPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        if environment["TOKEN_VAULT_AGENT"] == "off" { return nil }
        if let path = environment["TOKEN_VAULT_AGENT_SOCKET"], path.hasPrefix("/") { return path }
        guard let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") else { return nil }
        return runtime + "/tokenvault/agent.sock"
    }
}

extension AgentRequest {
    /// Whether the agent may wait on the token endpoint before it answers: its own refresh, or
    /// (a write) the entry's refresh lock, which a refresh in flight holds.
    var mayRefresh: Bool {
        switch self {
        case .token(let request): request.fresh
        case .proof, .store, .delete: true
        case .status, .unlock, .lock, .accounts, .list: false
        }
    }
}
