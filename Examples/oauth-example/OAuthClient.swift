import Foundation
import TokenVault

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A minimal OAuth 2.0 client for a public client: the device authorization grant (RFC 8628)
/// and the refresh grant (RFC 6749 §6), over URLSession. Responses are parsed by TokenVault's
/// ``OAuthToken/init(tokenResponse:receivedAt:)``, which turns an error response into a
/// ``VaultError`` carrying the OAuth error, the shape `Vault.freshToken` understands.
struct OAuthClient: Sendable {
    var tokenEndpoint: URL
    var deviceAuthorizationEndpoint: URL
    var clientID: String
    var session: URLSession = .shared

    /// What the device authorization endpoint returns (RFC 8628 §3.2).
    struct DeviceAuthorization: Decodable, Sendable {
        var deviceCode: String
        var userCode: String
        var verificationURI: String
        var verificationURIComplete: String?
        var expiresIn: Int
        var interval: Int?

        enum CodingKeys: String, CodingKey {
            case deviceCode = "device_code"
            case userCode = "user_code"
            case verificationURI = "verification_uri"
            case verificationURIComplete = "verification_uri_complete"
            case expiresIn = "expires_in"
            case interval
        }
    }

    struct HTTPFailure: Error, CustomStringConvertible {
        var status: Int
        var description: String { "the server answered HTTP \(status)" }
    }

    /// Step 1 of the device grant: ask for a device code and a user code.
    func startDeviceAuthorization(scope: String?) async throws -> DeviceAuthorization {
        var form = ["client_id": clientID]
        if let scope { form["scope"] = scope }
        let (data, status) = try await post(deviceAuthorizationEndpoint, form)
        guard status == 200 else {
            // An error body becomes a VaultError with the OAuth error; anything else an HTTP failure.
            _ = try OAuthToken(tokenResponse: data)
            throw HTTPFailure(status: status)
        }
        return try JSONDecoder().decode(DeviceAuthorization.self, from: data)
    }

    /// Step 2: poll the token endpoint until the user approves, denies, or the code expires.
    func pollForToken(_ authorization: DeviceAuthorization) async throws -> OAuthToken {
        var interval = max(authorization.interval ?? 5, 1)
        let deadline = Date().addingTimeInterval(TimeInterval(authorization.expiresIn))
        while Date() < deadline {
            try await Task.sleep(for: .seconds(interval))
            let (data, _) = try await post(tokenEndpoint, [
                "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
                "device_code": authorization.deviceCode,
                "client_id": clientID,
            ])
            do {
                return try OAuthToken(tokenResponse: data)
            } catch let error as VaultError where error.code == .tokenEndpointError {
                switch error.oauthError?.error {
                case "authorization_pending": continue
                case "slow_down": interval += 5  // RFC 8628 §3.5
                default: throw error  // access_denied, expired_token, …
                }
            }
        }
        throw VaultError(.timeout, "The device code expired before the sign-in was approved.")
    }

    /// The refresh grant. Hand this to `Vault.freshToken`; it never needs to store anything.
    func refresh(_ stale: OAuthToken) async throws -> OAuthToken {
        guard let refreshToken = stale.refreshToken else {
            throw VaultError(.reauthenticationRequired, "There is no refresh token; sign in again.")
        }
        let (data, status) = try await post(tokenEndpoint, [
            "grant_type": "refresh_token",
            "refresh_token": refreshToken,
            "client_id": clientID,
        ])
        // A 400 with {"error":"invalid_grant"} throws here, and freshToken turns it into
        // reauthenticationRequired; a body that is neither a token nor an error is an HTTP failure.
        do {
            return try OAuthToken(tokenResponse: data)
        } catch let error as VaultError where error.code == .invalidInput && status != 200 {
            throw HTTPFailure(status: status)
        }
    }

    private func post(_ url: URL, _ form: [String: String]) async throws -> (Data, Int) {
        var request = URLRequest(url: url, timeoutInterval: 30)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        request.httpBody = Data(Self.formEncoded(form).utf8)
        let (data, response) = try await session.data(for: request)
        return (data, (response as? HTTPURLResponse)?.statusCode ?? 0)
    }

    static func formEncoded(_ form: [String: String]) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        func encode(_ text: String) -> String {
            text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
        }
        return form.sorted { $0.key < $1.key }.map { "\(encode($0.key))=\(encode($0.value))" }.joined(separator: "&")
    }
}
