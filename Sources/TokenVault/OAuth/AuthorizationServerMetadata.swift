public import FoundationEssentials

/// What an authorization server says about itself (OpenID Connect Discovery 1.0, RFC 8414): its
/// issuer, its endpoints and the client authentication methods its token endpoint takes. Get it
/// with ``TokenEndpointClient/discover(issuer:)`` and keep it in a ``ClientRegistration``
/// (``ClientRegistration/init(metadata:clientID:clientAuthentication:scope:additionalParameters:)``),
/// so that it is fetched once per registration, never per refresh.
///
/// Its `issuer` is the one that was asked for: a document that names another issuer is refused
/// (the mix-up defence of RFC 8414 §3.3 and OpenID Connect Discovery §4.3).
public struct AuthorizationServerMetadata: Sendable, Equatable, Codable {
    /// The issuer identifier, as the server states it and as it was asked for.
    public let issuer: URL
    /// `token_endpoint`.
    public let tokenEndpoint: URL
    /// `authorization_endpoint`, for the code grant.
    public let authorizationEndpoint: URL?
    /// `device_authorization_endpoint` (RFC 8628), for the device grant.
    public let deviceAuthorizationEndpoint: URL?
    /// `revocation_endpoint` (RFC 7009), for logout.
    public let revocationEndpoint: URL?
    /// `jwks_uri`: the server's signing keys.
    public let jwksURI: URL?
    /// `token_endpoint_auth_methods_supported`, or `nil` when the server did not say (RFC 8414
    /// then means `client_secret_basic` alone).
    public let tokenEndpointAuthMethodsSupported: [String]?
    /// `dpop_signing_alg_values_supported` (RFC 9449 §5.1): the DPoP proof algorithms the server
    /// takes, or `nil` when it did not say. `vault login --dpop` picks ES256 from it, else EdDSA.
    public internal(set) var dpopSigningAlgValuesSupported: [String]? = nil

    public init(
        issuer: URL, tokenEndpoint: URL, authorizationEndpoint: URL? = nil, deviceAuthorizationEndpoint: URL? = nil,
        revocationEndpoint: URL? = nil, jwksURI: URL? = nil, tokenEndpointAuthMethodsSupported: [String]? = nil
    ) {
        self.issuer = issuer
        self.tokenEndpoint = tokenEndpoint
        self.authorizationEndpoint = authorizationEndpoint
        self.deviceAuthorizationEndpoint = deviceAuthorizationEndpoint
        self.revocationEndpoint = revocationEndpoint
        self.jwksURI = jwksURI
        self.tokenEndpointAuthMethodsSupported = tokenEndpointAuthMethodsSupported
    }

    /// Whether `issuer` (as the server states it) is `asked`, the one the caller named. They
    /// must be the same string; a trailing `/` on either side is the only difference allowed.
    static func sameIssuer(_ stated: String, _ asked: URL) -> Bool {
        func trimmed(_ text: String) -> String { text.hasSuffix("/") ? String(text.dropLast()) : text }
        return trimmed(stated) == trimmed(asked.absoluteString)
    }

    /// Parses a discovery document fetched for `asked`.
    /// - Throws: `httpError` for a document that is not JSON, lacks `issuer` or `token_endpoint`,
    ///   or holds an endpoint that is not a URL; `configurationError` when it names another issuer.
    init(document: Data, asked: URL, source: String) throws {
        let fields: [String: JSONValue]
        do {
            fields = try TokenResponseFields.parseJSON(document)
        } catch {
            throw VaultError(.httpError, "The discovery document at \(source) is not a JSON object.")
        }
        guard let stated = fields["issuer"]?.stringValue, let issuer = URL(string: stated) else {
            throw VaultError(.httpError, "The discovery document at \(source) names no issuer.")
        }
        guard Self.sameIssuer(stated, asked) else {
            let shown = stated.count <= 200 && stated.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value < 0x7f }) ? stated : "(unprintable)"
            throw VaultError(
                .configurationError,
                "The discovery document at \(source) is for the issuer \(shown), not \(asked.absoluteString), which was asked for; it is refused (a mix-up defence: tokens meant for one server must never be sent to another). Check the issuer URL.")
        }
        func endpoint(_ name: String) throws -> URL? {
            guard let value = fields[name] else { return nil }
            guard let text = value.stringValue, let url = URL(string: text), url.scheme != nil, url.host != nil else {
                throw VaultError(.httpError, "The discovery document at \(source) holds a \(name) that is not a URL.")
            }
            return url
        }
        guard let tokenEndpoint = try endpoint("token_endpoint") else {
            throw VaultError(.httpError, "The discovery document at \(source) names no token_endpoint.")
        }
        var methods: [String]?
        if case .array(let values)? = fields["token_endpoint_auth_methods_supported"] {
            methods = values.compactMap(\.stringValue)
        }
        self.init(
            issuer: issuer, tokenEndpoint: tokenEndpoint, authorizationEndpoint: try endpoint("authorization_endpoint"),
            deviceAuthorizationEndpoint: try endpoint("device_authorization_endpoint"),
            revocationEndpoint: try endpoint("revocation_endpoint"), jwksURI: try endpoint("jwks_uri"),
            tokenEndpointAuthMethodsSupported: methods)
        if case .array(let values)? = fields["dpop_signing_alg_values_supported"] {
            dpopSigningAlgValuesSupported = values.compactMap(\.stringValue).filter { $0.count <= 16 }
        }
    }

    private enum CodingKeys: String, CodingKey {
        case issuer
        case tokenEndpoint = "token_endpoint"
        case authorizationEndpoint = "authorization_endpoint"
        case deviceAuthorizationEndpoint = "device_authorization_endpoint"
        case revocationEndpoint = "revocation_endpoint"
        case jwksURI = "jwks_uri"
        case tokenEndpointAuthMethodsSupported = "token_endpoint_auth_methods_supported"
        case dpopSigningAlgValuesSupported = "dpop_signing_alg_values_supported"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func url(_ key: CodingKeys) throws -> URL? {
            guard let text = try container.decodeIfPresent(String.self, forKey: key) else { return nil }
            guard let url = URL(string: text) else {
                throw VaultError(.integrityFailure, "The stored server metadata's \(key.rawValue) is not a URL.")
            }
            return url
        }
        guard let issuer = try url(.issuer), let tokenEndpoint = try url(.tokenEndpoint) else {
            throw VaultError(.integrityFailure, "The stored server metadata lacks its issuer or token endpoint.")
        }
        self.init(
            issuer: issuer, tokenEndpoint: tokenEndpoint, authorizationEndpoint: try url(.authorizationEndpoint),
            deviceAuthorizationEndpoint: try url(.deviceAuthorizationEndpoint), revocationEndpoint: try url(.revocationEndpoint),
            jwksURI: try url(.jwksURI),
            tokenEndpointAuthMethodsSupported: try container.decodeIfPresent([String].self, forKey: .tokenEndpointAuthMethodsSupported))
        dpopSigningAlgValuesSupported = try container.decodeIfPresent([String].self, forKey: .dpopSigningAlgValuesSupported)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(issuer.absoluteString, forKey: .issuer)
        try container.encode(tokenEndpoint.absoluteString, forKey: .tokenEndpoint)
        try container.encodeIfPresent(authorizationEndpoint?.absoluteString, forKey: .authorizationEndpoint)
        try container.encodeIfPresent(deviceAuthorizationEndpoint?.absoluteString, forKey: .deviceAuthorizationEndpoint)
        try container.encodeIfPresent(revocationEndpoint?.absoluteString, forKey: .revocationEndpoint)
        try container.encodeIfPresent(jwksURI?.absoluteString, forKey: .jwksURI)
        try container.encodeIfPresent(tokenEndpointAuthMethodsSupported, forKey: .tokenEndpointAuthMethodsSupported)
        try container.encodeIfPresent(dpopSigningAlgValuesSupported, forKey: .dpopSigningAlgValuesSupported)
    }
}

extension TokenEndpointClient {
    /// Fetches the metadata of the authorization server `issuer` names: first its OpenID Connect
    /// Discovery document (`{issuer}/.well-known/openid-configuration`), then, if there is none
    /// (HTTP 404), its RFC 8414 document (`/.well-known/oauth-authorization-server{issuer's path}`).
    /// One request (two at most), under the client's retry policy and ``deadline`` each.
    ///
    /// - Throws: ``VaultError`` with code `configurationError` when the issuer is not `https`
    ///   (loopback aside) or the document names another issuer (mix-up); `notFound` when neither
    ///   document exists; `httpError` for a document that is not valid metadata; the transport's
    ///   errors (`networkFailure`, …) as for a token request.
    public func discover(issuer: URL) async throws -> AuthorizationServerMetadata {
        try ClientRegistration.checkEndpoint(issuer, role: "issuer")
        guard issuer.query == nil, issuer.fragment == nil else {
            throw VaultError(.configurationError, "An issuer URL has no query or fragment (RFC 8414 §2).")
        }
        var base = issuer.absoluteString
        if base.hasSuffix("/") { base.removeLast() }
        var candidates: [URL] = []
        if let oidc = URL(string: base + "/.well-known/openid-configuration") { candidates.append(oidc) }
        var components = URLComponents(url: issuer, resolvingAgainstBaseURL: false)
        let path = components?.path ?? ""
        components?.path = "/.well-known/oauth-authorization-server" + (path == "/" ? "" : path)
        if let oauth = components?.url { candidates.append(oauth) }
        for url in candidates {
            let (body, status) = try await get(url, role: "discovery document", passing: [404])
            if status == 404 { continue }
            return try AuthorizationServerMetadata(document: body, asked: issuer, source: ClientRegistration.safe(url))
        }
        throw VaultError(
            .notFound,
            "The issuer \(ClientRegistration.safe(issuer)) publishes no discovery document (neither /.well-known/openid-configuration nor /.well-known/oauth-authorization-server answered); name its endpoints instead.")
    }
}
