#if AsyncHTTPClientAdapter  // built with the package trait AsyncHTTPClientAdapter; see Package.swift
public import AsyncHTTPClient
public import NIOCore
import NIOHTTP1
public import TokenVault
import Foundation

extension HTTPClient {
    /// Sends `request` with the fresh access token of `authorizer`'s entry in its `Authorization`
    /// field (and, for a DPoP-bound entry, `Authorization: DPoP …` with a `DPoP` proof for this
    /// request, meeting a nonce challenge once), and, if the server refuses the token (HTTP 401, or `WWW-Authenticate: Bearer
    /// error="invalid_token"`), refreshes the entry once (``TokenAuthorizer`` shares one refresh
    /// among every caller refused with the same token) and sends it once more.
    ///
    /// ```swift
    /// let authorizer = TokenAuthorizer(vault: vault, key: key)
    /// let response = try await httpClient.execute(request, authorizedBy: authorizer, timeout: .seconds(30))
    /// ```
    ///
    /// The request may be sent twice, so its body must be one that can be sent again (`.bytes`,
    /// not a single-use stream). A refused answer's body is read (up to 64 KiB) and dropped
    /// before the retry.
    ///
    /// - Parameter timeout: the time each of the (at most two) requests has to complete.
    /// - Returns: the answer to the last request sent: a second refusal is returned as it is.
    /// - Throws: what `execute(_:timeout:)` throws, and the vault's ``VaultError``
    ///   (`reauthenticationRequired` when the grant is gone and only a new login helps).
    public func execute(
        _ request: HTTPClientRequest, authorizedBy authorizer: TokenAuthorizer, timeout: TimeAmount
    ) async throws -> HTTPClientResponse {
        guard let url = URL(string: request.url) else {
            throw VaultError(.invalidInput, "The request's URL could not be read, so no DPoP proof or token was attached.")
        }
        return try await authorizer.send(
            method: request.method.rawValue, url: url,
            { fields in
                var authorized = request
                for field in fields { authorized.headers.replaceOrAdd(name: field.name, value: field.value) }
                return try await self.execute(authorized, timeout: timeout)
            },
            answer: { response in
                TokenAuthorizer.Answer(
                    status: Int(response.status.code), challenges: response.headers["WWW-Authenticate"],
                    dpopNonce: response.headers.first(name: "DPoP-Nonce"))
            },
            discard: { response in
                _ = try? await response.body.collect(upTo: 64 * 1024)
            })
    }
}
#endif
