public import FoundationEssentials
import Logging

/// What ``Vault/logout(_:forgetAnyway:timeout:client:)`` did.
public struct LogoutResult: Sendable, CustomStringConvertible {
    /// Whether the server took the revocation of the refresh token (RFC 7009 §2.2: also when it
    /// no longer knew it). `false` when the entry held none, or revocation failed.
    public let revokedRefreshToken: Bool
    /// Whether the server took the revocation of the access token. `false` when revocation
    /// failed, or the server does not revoke access tokens (`unsupported_token_type`).
    public let revokedAccessToken: Bool
    /// Why revocation failed, when `forgetAnyway` deleted the entry all the same; `nil` otherwise.
    /// The grant may then still be alive at the server.
    public let revocationFailure: VaultError?

    public var description: String {
        "LogoutResult(refresh token revoked: \(revokedRefreshToken), access token revoked: \(revokedAccessToken), failure: \(revocationFailure.map { "\($0.code)" } ?? "none"))"
    }
}

extension Vault {
    /// Logs out of the entry under `key`: revokes its refresh token, then its access token, at the
    /// revocation endpoint of its ``ClientRegistration`` (RFC 7009, with the registration's client
    /// authentication), then deletes the entry. Runs under the entry's refresh lock, so no refresh
    /// can store a new token in between.
    ///
    /// If the server cannot be reached or answers an error, the entry stays (so that a logout
    /// can be tried again, and the grant is not left alive unseen) and the error is thrown,
    /// unless `forgetAnyway` is set: then the entry is deleted all the same and the error is
    /// returned in ``LogoutResult/revocationFailure``.
    ///
    /// - Throws: ``VaultError`` with code `notFound` when there is no entry; `configurationError`
    ///   when the entry names no revocation endpoint (save one with ``ClientRegistration``'s
    ///   `revocationEndpoint`, or by discovery), or the server refuses the client; `networkFailure`
    ///   when the endpoint cannot be reached within the client's deadline; `tokenEndpointError` or
    ///   `httpError` when it answers with an error; `timeout` when another process holds the
    ///   entry's refresh lock past `timeout`. In each case, without `forgetAnyway`, the entry is
    ///   left as it was.
    @discardableResult
    public func logout(
        _ key: CredentialKey, forgetAnyway: Bool = false, timeout: Duration = .seconds(30),
        client: TokenEndpointClient = TokenEndpointClient()
    ) async throws -> LogoutResult {
        try await withEntryLock(key, timeout: timeout) {
            guard let entry = try await storedEntry(for: key) else { throw Self.noToken(key) }
            var refreshRevoked = false
            var accessRevoked = false
            do {
                guard let registration = entry.refresh, let endpoint = registration.revocationEndpoint else {
                    throw VaultError(
                        .configurationError,
                        "The entry \(key) names no revocation endpoint, so its grant cannot be revoked at the server; store one (vault login or vault set with --revocation-endpoint, or --issuer), or forget the entry without revoking (vault logout --forget-anyway, vault delete).")
                }
                if let refreshToken = entry.token.refreshToken, !refreshToken.isEmpty {
                    refreshRevoked = try await client.revoke(refreshToken, hint: "refresh_token", at: endpoint, registration: registration)
                }
                accessRevoked = try await client.revoke(entry.token.accessToken, hint: "access_token", at: endpoint, registration: registration)
            } catch let error as VaultError {
                guard forgetAnyway else {
                    throw VaultError(error.code, "\(error.message) The entry \(key) was kept.", underlying: error.underlying)
                }
                try await store.delete(key)
                if let dpop = entry.dpop { DPoPKeyCache.forget(dpop.thumbprint) }
                logger.debug("forgot an entry whose tokens could not be revoked", metadata: ["key": "\(key)"])
                return LogoutResult(revokedRefreshToken: refreshRevoked, revokedAccessToken: accessRevoked, revocationFailure: error)
            }
            try await store.delete(key)
            if let dpop = entry.dpop { DPoPKeyCache.forget(dpop.thumbprint) }
            logger.debug("logged out", metadata: ["key": "\(key)"])
            return LogoutResult(revokedRefreshToken: refreshRevoked, revokedAccessToken: accessRevoked, revocationFailure: nil)
        }
    }
}

extension TokenEndpointClient {
    /// Revokes `token` at `endpoint` (RFC 7009 §2.1), authenticating as `registration` says.
    /// Returns `true` when the server took it (HTTP 200: also for a token it no longer knows),
    /// `false` when it does not revoke tokens of that type (`unsupported_token_type`).
    /// - Throws: `configurationError` when the server refuses the client; `tokenEndpointError` for
    ///   another OAuth error; the transport's errors as for a token request.
    public func revoke(_ token: String, hint: String, at endpoint: URL, registration: ClientRegistration) async throws -> Bool {
        do {
            // The registration's extra parameters (resource, audience) are for token requests.
            _ = try await post(
                endpoint, form: [("token", token), ("token_type_hint", hint)], registration: registration,
                role: "revocation endpoint", mapOAuthErrors: false, additionalParameters: false)
            return true
        } catch let error as VaultError where error.code == .tokenEndpointError {
            guard let oauthError = error.oauthError else { throw error }
            switch oauthError.error {
            case "unsupported_token_type":
                return false
            case "invalid_client", "unauthorized_client":
                throw VaultError(
                    .configurationError,
                    "The revocation endpoint \(ClientRegistration.safe(endpoint)) refused the client (\(oauthError)); check the client id, its secret and how it authenticates.",
                    underlying: oauthError)
            default:
                throw VaultError(
                    .tokenEndpointError, "The revocation endpoint \(ClientRegistration.safe(endpoint)) answered with an error: \(oauthError).",
                    underlying: oauthError)
            }
        }
    }
}
