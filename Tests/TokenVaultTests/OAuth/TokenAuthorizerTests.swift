import Foundation
import Testing
@testable import TokenVault
import TokenVaultTesting

/// TokenAuthorizer's own logic, in process: which answers refuse a token, and one refresh and one
/// retry through a transport (the fake token endpoint and resource server of TokenVaultTesting).
/// The adapters against the real test server: Tests/Integration/RefreshServer/AuthorizedRequestTests.
@Suite struct TokenAuthorizerTests {
    @Test(arguments: [
        (401, [], true),
        (403, [#"Bearer error="invalid_token""#], true),
        (400, [#"Bearer realm="api", error="invalid_token", error_description="expired""#], true),
        (200, [#"bearer ERROR=invalid_token"#], true),
        (403, [#"Bearer error="insufficient_scope""#], false),
        (403, [#"Bearer error_description="not invalid_token", error="insufficient_scope""#], false),
        (403, [#"Basic realm="x""#, #"Bearer error="invalid_token_x""#], false),
        (200, [], false),
        (500, [], false),
    ] as [(Int, [String], Bool)])
    func whichAnswersRefuseTheToken(status: Int, challenges: [String], refuses: Bool) {
        #expect(TokenAuthorizer.rejectsToken(status: status, challenges: challenges) == refuses)
    }

    @Test func theHeaderSpellsBearerAsRFC6750AndRefusesDPoP() throws {
        let key = try CredentialKey(service: "authorizer", account: "a")
        #expect(try TokenAuthorizer.authorization(for: OAuthToken(accessToken: "abc", tokenType: "bearer"), key: key) == "Bearer abc")
        #expect(try TokenAuthorizer.authorization(for: OAuthToken(accessToken: "abc", tokenType: "MAC"), key: key) == "MAC abc")
        let error = #expect(throws: VaultError.self) {
            try TokenAuthorizer.authorization(for: OAuthToken(accessToken: "abc", tokenType: "DPoP"), key: key)
        }
        #expect(error?.code == .invalidInput)
        #expect(error?.message.contains("abc") == false)
    }

    @Test func aRefusedTokenIsRefreshedOnceAndTheRequestSentOnceMore() async throws {
        let endpoint = FakeTokenEndpoint()
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "authorizer", account: "refused")
        try await vault.saveToken(await endpoint.issueToken(), for: key, registration: try endpoint.registration())
        let authorizer = TokenAuthorizer(vault: vault, key: key, client: endpoint.client)
        let request = TokenTransportRequest(
            method: "GET", url: endpoint.resourceURL, headers: [("Authorization", "Bearer stale-header")], body: Data(), timeout: .seconds(5))

        #expect(try await authorizer.send(request, through: endpoint).status == 200)
        #expect(await endpoint.refreshCount == 0, "a fresh token is sent as it is")

        await endpoint.invalidateAccessTokens()
        let answers = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<8 { group.addTask { try await authorizer.send(request, through: endpoint).status } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(answers == Array(repeating: 200, count: 8))
        #expect(await endpoint.refreshCount == 1, "eight refusals of one token, one refresh")

        // A grant the server no longer honours: the refusal ends in "log in again", not a loop.
        await endpoint.revokeAll()
        let error = await #expect(throws: VaultError.self) { try await authorizer.send(request, through: endpoint) }
        #expect(error?.code == .reauthenticationRequired)
    }
}
