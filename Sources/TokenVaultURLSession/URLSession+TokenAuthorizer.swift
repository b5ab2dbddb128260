public import Foundation
public import TokenVault

#if canImport(FoundationNetworking)
    public import FoundationNetworking
#endif

extension URLSession {
    /// Sends `request` with the fresh access token of `authorizer`'s entry in its `Authorization`
    /// field (and, for a DPoP-bound entry, `Authorization: DPoP …` with a `DPoP` proof for this
    /// request, meeting a nonce challenge once), and, if the server refuses the token (HTTP 401,
    /// or `WWW-Authenticate: Bearer error="invalid_token"`), refreshes the entry once (``TokenAuthorizer`` shares one refresh
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
        guard let url = request.url else { return try await data(for: request) }
        return try await authorizer.send(
            method: request.httpMethod ?? "GET", url: url,
            { fields in
                var authorized = request
                for field in fields { authorized.setValue(field.value, forHTTPHeaderField: field.name) }
                return try await self.data(for: authorized)
            },
            answer: { answer in
                guard let response = answer.1 as? HTTPURLResponse else { return TokenAuthorizer.Answer(status: 0, challenges: []) }
                let challenge = response.value(forHTTPHeaderField: "WWW-Authenticate")
                return TokenAuthorizer.Answer(
                    status: response.statusCode, challenges: challenge.map { [$0] } ?? [],
                    dpopNonce: response.value(forHTTPHeaderField: "DPoP-Nonce"))
            })
    }
}
