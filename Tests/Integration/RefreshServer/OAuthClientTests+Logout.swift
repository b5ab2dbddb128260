#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

/// Logout: RFC 7009 revocation at the real authlib server, then the entry is deleted; a server
/// that cannot be reached or refuses leaves the entry, unless it is forgotten anyway.
extension OAuthClientTests {
    /// The confidential client's registration with the server's revocation endpoint (or `revocation`).
    static func revocable(_ server: TestOAuthServer, revocation: URL? = nil) throws -> ClientRegistration {
        try ClientRegistration(
            tokenEndpoint: server.url.appendingPathComponent("token"), clientID: TestOAuthServer.confidentialClientID,
            clientAuthentication: .clientSecretBasic(TestOAuthServer.confidentialSecret),
            revocationEndpoint: revocation ?? server.url.appendingPathComponent("revoke"))
    }

    @Test func logoutRevokesBothTokensAtTheServerThenDeletesTheEntry() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("logout")
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "logout", account: user)
        let token = try await server.login(user: user, confidential: true)
        try await vault.saveToken(token, for: key, registration: try Self.revocable(server))
        #expect(try await server.user(for: token) == user)

        let result = try await vault.logout(key)
        #expect(result.revokedRefreshToken && result.revokedAccessToken && result.revocationFailure == nil, "\(result)")
        #expect(try await vault.token(for: key) == nil, "the entry is deleted")
        // At the server, the grant is gone: the old refresh token no longer refreshes, and the
        // access token no longer opens the API.
        let refresh = try await server.tryRefresh(try #require(token.refreshToken))
        #expect(refresh.status == 400 && refresh.error == "invalid_grant", "\(refresh)")
        #expect(try await server.user(for: token) == nil)
        #expect(try await server.stats(user: user).revocations == 2)

        let again = await #expect(throws: VaultError.self) { try await vault.logout(key) }
        #expect(again?.code == .notFound)
    }

    @Test func aServerThatRefusesTheRevocationKeepsTheEntryUnlessForgottenAnyway() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("logout-refused")
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "logout", account: user)
        let token = try await server.login(user: user, confidential: true)
        try await vault.saveToken(token, for: key, registration: try Self.revocable(server))

        try await server.fault(user: user, "revoke_error")
        let refused = await #expect(throws: VaultError.self) { try await vault.logout(key) }
        #expect(refused?.code == .tokenEndpointError)
        #expect(refused?.message.contains("invalid_request") == true && refused?.message.contains("was kept") == true, "\(refused?.message ?? "")")
        let kept = try await vault.token(for: key)?.accessToken == token.accessToken
        #expect(kept, "the entry is kept")
        #expect(try await server.user(for: token) == user, "and the grant is alive: a logout can be tried again")

        try await server.fault(user: user, "revoke_error")
        let forgotten = try await vault.logout(key, forgetAnyway: true)
        #expect(forgotten.revocationFailure?.code == .tokenEndpointError)
        #expect(!forgotten.revokedRefreshToken)
        #expect(try await vault.token(for: key) == nil, "forgotten anyway")
    }

    @Test func anUnreachableOrMissingRevocationEndpointKeepsTheEntry() async throws {
        let server = try TestOAuthServer.require()
        let vault = Vault(store: MemoryStore())
        let unreachable = try CredentialKey(service: "logout", account: uniqueName("unreachable"))
        let token = OAuthToken(accessToken: "at-unreachable", refreshToken: "rt-unreachable")
        let nowhere = try #require(URL(string: "http://127.0.0.1:1/revoke"))
        try await vault.saveToken(token, for: unreachable, registration: try Self.revocable(server, revocation: nowhere))
        let down = await #expect(throws: VaultError.self) {
            try await vault.logout(unreachable, client: TokenEndpointClient(initialBackoff: .milliseconds(10)))
        }
        #expect(down?.code == .networkFailure)
        #expect(down?.message.contains("refused") == true && down?.message.contains("was kept") == true, "\(down?.message ?? "")")
        #expect(try await vault.token(for: unreachable) != nil)

        let unnamed = try CredentialKey(service: "logout", account: uniqueName("unnamed"))
        try await vault.saveToken(token, for: unnamed, registration: try server.publicClient())
        let none = await #expect(throws: VaultError.self) { try await vault.logout(unnamed) }
        #expect(none?.code == .configurationError)
        #expect(none?.message.contains("no revocation endpoint") == true, "\(none?.message ?? "")")
        #expect(try await vault.token(for: unnamed) != nil)
    }

    @Test func vaultLogoutRevokesAndDeletesOrSaysWhyNot() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("logout-cli")
        let key = try CredentialKey(service: uniqueName("tv-logout"), account: "acct")
        let kept = try CredentialKey(service: key.service, account: "unreachable")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let secretFile = scratch.path("client.secret")
            #expect(FileManager.default.createFile(
                atPath: secretFile, contents: Data("\(TestOAuthServer.confidentialSecret)\n".utf8), attributes: [.posixPermissions: 0o600]))
            let token = try await server.login(user: user, confidential: true)
            let client = [
                "--token-url", server.url.appendingPathComponent("token").absoluteString, "--client-id",
                TestOAuthServer.confidentialClientID, "--client-secret-file", secretFile,
            ]
            let set = try await Self.vault(
                scratch, ["set", key.service, key.account, "--revocation-endpoint", server.url.appendingPathComponent("revoke").absoluteString] + client,
                input: try Self.response(token))
            #expect(set.status == 0, "\(set.stderr)")

            let logout = try await Self.vault(scratch, ["logout", key.service, key.account])
            #expect(logout.status == 0, "\(logout.status): \(logout.stderr)")
            #expect(logout.stderr.contains("Revoked the refresh token and the access token"), "\(logout.stderr)")
            #expect(try await vault.token(for: key) == nil)
            let oldRefresh = try await server.tryRefresh(try #require(token.refreshToken))
            #expect(oldRefresh.error == "invalid_grant", "\(oldRefresh)")
            for text in [logout.stdout, logout.stderr] {
                let holdsASecret = text.contains(token.accessToken) || text.contains(TestOAuthServer.confidentialSecret)
                #expect(!holdsASecret)
            }

            let other = try await server.login(user: user, confidential: true)
            let setKept = try await Self.vault(
                scratch, ["set", kept.service, kept.account, "--revocation-endpoint", "http://127.0.0.1:1/revoke"] + client,
                input: try Self.response(other))
            #expect(setKept.status == 0, "\(setKept.stderr)")
            let down = try await Self.vault(scratch, ["logout", kept.service, kept.account, "--http-deadline", "3"])
            #expect(down.status == 6, "\(down.status): \(down.stderr)")
            #expect(down.stderr.contains("was kept"), "\(down.stderr)")
            #expect(try await vault.token(for: kept) != nil)
            let forgotten = try await Self.vault(scratch, ["logout", kept.service, kept.account, "--forget-anyway", "--http-deadline", "3"])
            #expect(forgotten.status == 0, "\(forgotten.status): \(forgotten.stderr)")
            #expect(forgotten.stderr.contains("Warning") && forgotten.stderr.contains("may still be alive"), "\(forgotten.stderr)")
            #expect(try await vault.token(for: kept) == nil)

            let missing = try await Self.vault(scratch, ["logout", key.service, "nobody"])
            #expect(missing.status == 2, "\(missing.status): \(missing.stderr)")
        }
    }
}
#endif
