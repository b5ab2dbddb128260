public import FoundationEssentials

/// A started device authorization (RFC 8628 §3.2): what to show the user, and what the client
/// polls with. The device code is kept inside; `description` never shows it.
public struct DeviceAuthorization: Sendable, CustomStringConvertible {
    /// The code the user types at ``verificationURI``.
    public let userCode: String
    /// Where the user goes to approve.
    public let verificationURI: URL
    /// The same page with the user code filled in, if the server offers one.
    public let verificationURIComplete: URL?
    /// When the device code expires.
    public let expiresAt: Date
    /// The polling interval the server asked for (5 s when it said nothing).
    public let interval: Duration
    let deviceCode: String

    public var description: String {
        "DeviceAuthorization(user code: \(CredentialKey.escaped(userCode)), verify at: \(ClientRegistration.safe(verificationURI)), expires: \(expiresAt))"
    }
}

extension TokenEndpointClient {
    /// Starts the device authorization grant (RFC 8628 §3.1) at `endpoint` for the client that
    /// `registration` names, asking for its scope, with `parameters` added to this request alone
    /// (such as `audience`; `vault login --auth-param`).
    /// - Throws: `configurationError` for a parameter named `client_id` or `scope`.
    public func startDeviceAuthorization(
        at endpoint: URL, registration: ClientRegistration, parameters: [String: String] = [:]
    ) async throws -> DeviceAuthorization {
        var form: [(String, String)] = []
        if let scope = registration.scope { form.append(("scope", scope)) }
        if let name = parameters.keys.sorted().first(where: { ["client_id", "client_secret", "scope", ""].contains($0) }) {
            throw VaultError(
                .configurationError, "The device authorization parameter '\(name)' is set by the login itself (or by the scope); it cannot be set here.")
        }
        for (name, value) in parameters.sorted(by: { $0.key < $1.key }) where registration.additionalParameters[name] == nil {
            form.append((name, value))
        }
        let (body, receivedAt) = try await post(endpoint, form: form, registration: registration, role: "device authorization endpoint")
        let fields: [String: JSONValue]
        do {
            fields = try TokenResponseFields.parseJSON(body)
        } catch {
            throw VaultError(.httpError, "The device authorization endpoint \(ClientRegistration.safe(endpoint)) answered with a body that is not JSON.")
        }
        guard let deviceCode = fields["device_code"]?.stringValue, !deviceCode.isEmpty,
            let userCode = fields["user_code"]?.stringValue, !userCode.isEmpty,
            let uriText = (fields["verification_uri"] ?? fields["verification_url"])?.stringValue,
            let verificationURI = URL(string: uriText), verificationURI.scheme != nil
        else {
            throw VaultError(
                .httpError,
                "The device authorization endpoint \(ClientRegistration.safe(endpoint)) answered without device_code, user_code or verification_uri.")
        }
        // A code the user reads and types: no control character (C0, DEL, C1 such as U+009B, the
        // 8-bit CSI), no bidirectional formatting character, which would reorder what is shown.
        guard userCode.count <= 64, !userCode.unicodeScalars.contains(where: CredentialKey.needsEscaping) else {
            throw VaultError(.httpError, "The device authorization endpoint sent a user code that is not short printable text.")
        }
        let expiresIn = Self.number(fields["expires_in"]) ?? 600
        let interval = Self.number(fields["interval"]) ?? 5
        return DeviceAuthorization(
            userCode: userCode, verificationURI: verificationURI,
            verificationURIComplete: fields["verification_uri_complete"]?.stringValue.flatMap(URL.init(string:)),
            expiresAt: receivedAt.addingTimeInterval(min(max(expiresIn, 1), 86_400)),
            interval: .seconds(min(max(interval, 1), 300)), deviceCode: deviceCode)
    }

    /// Polls the token endpoint until the user approves (RFC 8628 §3.4, §3.5) and returns the token.
    ///
    /// `authorization_pending` polls again after the interval; `slow_down` adds 5 seconds to the
    /// interval for this and every later poll; `expired_token`, or the device code's expiry on this
    /// side, ends with `expired`; `access_denied` ends with `tokenEndpointError` carrying it.
    public func pollDeviceAuthorization(_ authorization: DeviceAuthorization, registration: ClientRegistration) async throws -> OAuthToken {
        var interval = authorization.interval
        while true {
            do {
                try await clock.sleep(interval)
            } catch {
                throw VaultError(.cancelled, "The device login was cancelled.")
            }
            guard clock.now() < authorization.expiresAt else { throw Self.deviceCodeExpired() }
            let form = [("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", authorization.deviceCode)]
            do {
                let (body, receivedAt) = try await post(
                    registration.tokenEndpoint, form: form, registration: registration, role: "token endpoint", mapOAuthErrors: false,
                    proof: true)
                do {
                    return try OAuthToken(tokenResponse: body, receivedAt: receivedAt)
                } catch let error as VaultError where error.code == .tokenEndpointError {
                    throw error
                } catch let error as VaultError {
                    throw VaultError(.httpError, "The token endpoint answered with a body that is not a token response: \(error.message)")
                }
            } catch let error as VaultError where error.code == .tokenEndpointError {
                guard let oauthError = error.oauthError else { throw error }
                switch oauthError.error {
                case "authorization_pending":
                    continue
                case "slow_down":
                    interval += .seconds(5)
                    continue
                case "expired_token":
                    throw Self.deviceCodeExpired()
                case "access_denied":
                    throw VaultError(
                        .tokenEndpointError, "The user denied the device login (access_denied); nothing was stored.",
                        underlying: oauthError)
                default:
                    throw Self.mapped(oauthError, endpoint: registration.tokenEndpoint)
                }
            }
        }
    }

    /// The earlier spelling of ``startDeviceAuthorization(at:registration:)``.
    @available(*, deprecated, renamed: "startDeviceAuthorization(at:registration:)")
    public func startDeviceAuthorization(at endpoint: URL, description: ClientRegistration) async throws -> DeviceAuthorization {
        try await startDeviceAuthorization(at: endpoint, registration: description)
    }

    /// The earlier spelling of ``pollDeviceAuthorization(_:registration:)``.
    @available(*, deprecated, renamed: "pollDeviceAuthorization(_:registration:)")
    public func pollDeviceAuthorization(_ authorization: DeviceAuthorization, description: ClientRegistration) async throws -> OAuthToken {
        try await pollDeviceAuthorization(authorization, registration: description)
    }

    private static func deviceCodeExpired() -> VaultError {
        VaultError(.expired, "The device code expired before the login was approved (expired_token); start the login again.")
    }

    private static func number(_ value: JSONValue?) -> Double? {
        switch value {
        case .number(let number)?: return number.isFinite ? number : nil
        case .string(let text)?: return Double(text)
        default: return nil
        }
    }
}
