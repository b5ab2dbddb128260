public import Foundation
public import TokenVault

#if canImport(FoundationNetworking)
    public import FoundationNetworking
#endif

extension URLSession {
    /// Sends `request` with the fresh access token of `authorizer`'s entry in its `Authorization`
    /// field, and, if the server refuses the token (HTTP 401, or `WWW-Authenticate: Bearer
    /// error="invalid_token"`), refreshes the entry once (``TokenAuthorizer`` shares one refresh
    /// among every caller refused with the same token) and sends it once more.
    ///
    /// ```swift
    /// let authorizer = TokenAuthorizer(vault: vault, key: key)
    /// let (data, response) = try await URLSession.shared.data(for: request, authorizedBy: authorizer)
    /// ```
    ///
    /// - Returns: the answer to the last request sent: a second refusal is returned as it is.
    /// - Throws: what `data(for:)` throws, and the vault's ``VaultError`` (`reauthenticationRequired`
    ///   when the grant is gone and only a new login helps).
    public func data(for request: URLRequest, authorizedBy authorizer: TokenAuthorizer) async throws -> (Data, URLResponse) {
        try await authorizer.send(
            { authorization in
                var authorized = request
                authorized.setValue(authorization, forHTTPHeaderField: "Authorization")
                return try await self.data(for: authorized)
            },
            rejectsToken: { answer in
                guard let response = answer.1 as? HTTPURLResponse else { return false }
                let challenge = response.value(forHTTPHeaderField: "WWW-Authenticate")
                return TokenAuthorizer.rejectsToken(status: response.statusCode, challenges: challenge.map { [$0] } ?? [])
            })
    }
}
