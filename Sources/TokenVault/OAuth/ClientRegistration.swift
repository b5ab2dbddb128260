public import FoundationEssentials

/// The OAuth client as its authorization server knows it: the token endpoint, the client id and
/// how it authenticates, and what to ask for. Stored with the token (see <doc:StoredTokenFormat>),
/// so that any process, and `vault get --fresh`, can refresh the entry without knowing the client.
///
/// Earlier releases called this type `RefreshDescription`; that name stays, deprecated, for one
/// release.
///
/// The client secret, if any, is sealed in the same entry as the token (encrypted in the file
/// backend, a secret item in the Secret Service). It never appears in `description`, in logs or
/// in error messages.
///
/// Token endpoints must be `https`; `http` is accepted only on loopback (`127.0.0.0/8`, `::1`,
/// `localhost`), where nothing leaves the machine.
public struct ClientRegistration: Sendable, Equatable, Codable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// The token endpoint (RFC 6749 §3.2).
    public let tokenEndpoint: URL
    /// The client identifier (RFC 6749 §2.2).
    public let clientID: String
    /// How the client authenticates at the token endpoint.
    public let clientAuthentication: ClientAuthentication
    /// The scope to ask for on refresh, or `nil` to keep the one originally granted (RFC 6749 §6).
    public let scope: String?
    /// Other parameters sent with every token request, such as `resource` (RFC 8707) or
    /// `audience`. The grant's own parameters cannot be overridden this way.
    public let additionalParameters: [String: String]
    /// The revocation endpoint (RFC 7009) that ``Vault/logout(_:forgetAnyway:timeout:client:)``
    /// and `vault logout` revoke the entry's tokens at, or `nil` when none is known.
    public let revocationEndpoint: URL?
    /// The authorization server's metadata, when the registration was made from it by discovery
    /// (``init(metadata:clientID:clientAuthentication:scope:additionalParameters:)``); kept with
    /// the entry, so that discovery is not repeated for a refresh.
    public let metadata: AuthorizationServerMetadata?

    /// The issuer the registration was discovered from, if it was.
    public var issuer: URL? { metadata?.issuer }

    /// - Throws: ``VaultError`` with code `configurationError` for an endpoint that is not
    ///   `https` (loopback aside), an empty client id, a reserved parameter name, or a client
    ///   authentication method that `metadata` says the server does not take.
    public init(
        tokenEndpoint: URL,
        clientID: String,
        clientAuthentication: ClientAuthentication = .none,
        scope: String? = nil,
        additionalParameters: [String: String] = [:],
        revocationEndpoint: URL? = nil,
        metadata: AuthorizationServerMetadata? = nil
    ) throws {
        try Self.checkEndpoint(tokenEndpoint, role: "token endpoint")
        if let revocationEndpoint { try Self.checkEndpoint(revocationEndpoint, role: "revocation endpoint") }
        if let supported = metadata?.tokenEndpointAuthMethodsSupported, !supported.isEmpty,
            !supported.contains(clientAuthentication.method)
        {
            throw VaultError(
                .configurationError,
                "The server's metadata lists the client authentication methods \(supported.prefix(8).joined(separator: ", ")); \(clientAuthentication.method) is not among them.")
        }
        guard !clientID.isEmpty, !clientID.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else {
            throw VaultError(.configurationError, "The client id must be non-empty printable text.")
        }
        let reserved: Set<String> = [
            "grant_type", "refresh_token", "client_id", "client_secret", "scope", "code", "code_verifier",
            "redirect_uri", "device_code",
        ]
        if let name = additionalParameters.keys.sorted().first(where: { reserved.contains($0) || $0.isEmpty }) {
            throw VaultError(
                .configurationError, "The extra parameter '\(name)' is reserved by the grant; it cannot be set here.")
        }
        self.tokenEndpoint = tokenEndpoint
        self.clientID = clientID
        self.clientAuthentication = clientAuthentication
        self.scope = scope.flatMap { $0.isEmpty ? nil : $0 }
        self.additionalParameters = additionalParameters
        self.revocationEndpoint = revocationEndpoint
        self.metadata = metadata
    }

    /// A registration at the authorization server that `metadata` describes (from
    /// ``TokenEndpointClient/discover(issuer:)``): its token endpoint and revocation endpoint,
    /// with the metadata kept for the authorization and device endpoints.
    /// - Throws: as ``init(tokenEndpoint:clientID:clientAuthentication:scope:additionalParameters:revocationEndpoint:metadata:)``.
    public init(
        metadata: AuthorizationServerMetadata,
        clientID: String,
        clientAuthentication: ClientAuthentication = .none,
        scope: String? = nil,
        additionalParameters: [String: String] = [:]
    ) throws {
        try self.init(
            tokenEndpoint: metadata.tokenEndpoint, clientID: clientID, clientAuthentication: clientAuthentication, scope: scope,
            additionalParameters: additionalParameters, revocationEndpoint: metadata.revocationEndpoint, metadata: metadata)
    }

    /// Refuses any endpoint that is not `https`, except `http` on a loopback host.
    package static func checkEndpoint(_ url: URL, role: String) throws {
        let scheme = url.scheme?.lowercased()
        guard let host = url.host, !host.isEmpty, scheme == "https" || scheme == "http" else {
            throw VaultError(.configurationError, "The \(role) \(Self.safe(url)) is not an https URL with a host.")
        }
        guard url.user == nil, url.password == nil else {
            throw VaultError(.configurationError, "The \(role) URL must not hold a user name or password.")
        }
        if scheme == "http" && !isLoopback(host) {
            throw VaultError(
                .configurationError,
                "The \(role) \(Self.safe(url)) uses plain http on a host that is not loopback; tokens and secrets would cross the network unencrypted. Use https (http is accepted only for 127.0.0.0/8, ::1 and localhost)."
            )
        }
    }

    /// `127.0.0.0/8`, `::1` and `localhost`.
    package static func isLoopback(_ host: String) -> Bool {
        let host = host.lowercased().trimming { $0 == "[" || $0 == "]" }
        if host == "localhost" || host == "::1" || host == "0:0:0:0:0:0:0:1" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "127" else { return false }
        return parts.allSatisfy { part in UInt8(part).map { _ in part.allSatisfy(\.isASCII) } ?? false }
    }

    /// A URL fit for a message: scheme, host, port and path, never a query or user info.
    package static func safe(_ url: URL) -> String {
        var components = URLComponents()
        components.scheme = url.scheme
        components.host = url.host
        components.port = url.port
        components.path = url.path
        return components.string ?? "(unprintable URL)"
    }

    public var description: String {
        var parts = ["token endpoint: \(Self.safe(tokenEndpoint))", "client: \(clientID)", "authentication: \(clientAuthentication)"]
        if let scope { parts.append("scope: \(scope)") }
        if !additionalParameters.isEmpty { parts.append("parameters: \(additionalParameters.keys.sorted().joined(separator: ", "))") }
        if let revocationEndpoint { parts.append("revocation endpoint: \(Self.safe(revocationEndpoint))") }
        if let issuer { parts.append("issuer: \(Self.safe(issuer))") }
        return "ClientRegistration(\(parts.joined(separator: ", ")))"
    }

    public var debugDescription: String { description }

    /// `dump` and debuggers see the method, never the secret.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "tokenEndpoint": Self.safe(tokenEndpoint), "clientID": clientID,
                "clientAuthentication": clientAuthentication.description, "scope": scope ?? "nil",
                "additionalParameters": additionalParameters.keys.sorted(),
                "revocationEndpoint": revocationEndpoint.map(Self.safe) ?? "nil", "issuer": issuer.map(Self.safe) ?? "nil",
            ],
            displayStyle: .struct)
    }

    private enum CodingKeys: String, CodingKey {
        case tokenEndpoint = "token_url"
        case clientID = "client_id"
        case authentication = "auth"
        case clientSecret = "client_secret"
        case scope
        case additionalParameters = "params"
        case revocationEndpoint = "revocation_url"
        case metadata
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let method = try container.decode(String.self, forKey: .authentication)
        let secret = try container.decodeIfPresent(String.self, forKey: .clientSecret)
        let authentication: ClientAuthentication
        switch (method, secret) {
        case ("none", _): authentication = .none
        case ("client_secret_basic", let secret?): authentication = .clientSecretBasic(secret)
        case ("client_secret_post", let secret?): authentication = .clientSecretPost(secret)
        default:
            throw VaultError(.unsupportedVersion, "The stored client registration names a client authentication this release does not know.")
        }
        guard let url = URL(string: try container.decode(String.self, forKey: .tokenEndpoint)) else {
            throw VaultError(.integrityFailure, "The stored client registration's token endpoint is not a URL.")
        }
        var revocation: URL?
        if let text = try container.decodeIfPresent(String.self, forKey: .revocationEndpoint) {
            guard let parsed = URL(string: text) else {
                throw VaultError(.integrityFailure, "The stored client registration's revocation endpoint is not a URL.")
            }
            revocation = parsed
        }
        try self.init(
            tokenEndpoint: url,
            clientID: try container.decode(String.self, forKey: .clientID),
            clientAuthentication: authentication,
            scope: try container.decodeIfPresent(String.self, forKey: .scope),
            additionalParameters: try container.decodeIfPresent([String: String].self, forKey: .additionalParameters) ?? [:],
            revocationEndpoint: revocation,
            metadata: try container.decodeIfPresent(AuthorizationServerMetadata.self, forKey: .metadata))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(tokenEndpoint.absoluteString, forKey: .tokenEndpoint)
        try container.encode(clientID, forKey: .clientID)
        try container.encode(clientAuthentication.method, forKey: .authentication)
        try container.encodeIfPresent(clientAuthentication.secret, forKey: .clientSecret)
        try container.encodeIfPresent(scope, forKey: .scope)
        if !additionalParameters.isEmpty {
            try container.encode(additionalParameters, forKey: .additionalParameters)
        }
        try container.encodeIfPresent(revocationEndpoint?.absoluteString, forKey: .revocationEndpoint)
        try container.encodeIfPresent(metadata, forKey: .metadata)
    }
}

/// How a client authenticates at a token endpoint (RFC 6749 §2.3.1).
///
/// Its `description` names the method only, never the secret.
public struct ClientAuthentication: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// `none`, `client_secret_basic` or `client_secret_post`, as OAuth metadata names them.
    public let method: String
    let secret: String?

    private init(method: String, secret: String?) {
        self.method = method
        self.secret = secret
    }

    /// A public client: only `client_id` is sent.
    public static let none = ClientAuthentication(method: "none", secret: nil)

    /// The secret in an HTTP Basic `Authorization` header, form-encoded first (RFC 6749 §2.3.1).
    public static func clientSecretBasic(_ secret: String) -> ClientAuthentication {
        ClientAuthentication(method: "client_secret_basic", secret: secret)
    }

    /// The secret as a `client_secret` parameter in the request body.
    public static func clientSecretPost(_ secret: String) -> ClientAuthentication {
        ClientAuthentication(method: "client_secret_post", secret: secret)
    }

    /// Whether a secret is held (never the secret itself).
    package var hasSecret: Bool { secret != nil }

    public var description: String { secret == nil ? method : "\(method) (secret hidden)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["method": method], displayStyle: .struct) }
}

/// The earlier name of ``ClientRegistration``.
@available(*, deprecated, renamed: "ClientRegistration", message: "RefreshDescription is the OAuth client's registration; use ClientRegistration.")
public typealias RefreshDescription = ClientRegistration
