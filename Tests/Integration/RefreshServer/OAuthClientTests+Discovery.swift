#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

/// Discovery (OpenID Connect Discovery 1.0, RFC 8414) against the real server's documents: the
/// endpoints come from the issuer, a document for another issuer is refused, and the document is
/// fetched once per registration, never per refresh (the server counts).
extension OAuthClientTests {
    @Test func discoveryFindsTheEndpointsAndIsFetchedOncePerRegistration() async throws {
        let server = try TestOAuthServer.require()
        let issuer = server.tenantIssuer("issuer")
        let document = issuer.path + "/.well-known/openid-configuration"
        let metadata = try await TokenEndpointClient().discover(issuer: issuer)
        #expect(metadata.issuer == issuer)
        #expect(metadata.tokenEndpoint == server.url.appendingPathComponent("token"))
        #expect(metadata.authorizationEndpoint == server.url.appendingPathComponent("authorize"))
        #expect(metadata.deviceAuthorizationEndpoint == server.url.appendingPathComponent("device_authorization"))
        #expect(metadata.revocationEndpoint == server.url.appendingPathComponent("revoke"))
        #expect(metadata.jwksURI == server.url.appendingPathComponent("jwks"))
        #expect(metadata.tokenEndpointAuthMethodsSupported == ["none", "client_secret_basic", "client_secret_post"])

        let registration = try ClientRegistration(metadata: metadata, clientID: TestOAuthServer.clientID)
        #expect(registration.issuer == issuer && registration.revocationEndpoint == metadata.revocationEndpoint)
        let user = uniqueName("discovered")
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "discovery", account: user)
        try await vault.saveToken(try await server.login(user: user), for: key, registration: registration)
        #expect(try await vault.registration(for: key) == registration, "the metadata is stored with the entry")
        for _ in 0..<3 { _ = try await vault.refreshToken(for: key) }
        #expect(try await server.stats(user: user).refreshSucceeded == 3)
        #expect(try await server.discoveryRequests(path: document) == 1, "fetched once, not per refresh")
        try await vault.logout(key)
        #expect(try await server.stats(user: user).revocations == 2, "logout used the discovered revocation endpoint")

        // A registration that asks for a method the server does not list is refused when made.
        let basicOnly = AuthorizationServerMetadata(
            issuer: issuer, tokenEndpoint: metadata.tokenEndpoint, tokenEndpointAuthMethodsSupported: ["client_secret_basic"])
        let refused = #expect(throws: VaultError.self) { try ClientRegistration(metadata: basicOnly, clientID: TestOAuthServer.clientID) }
        #expect(refused?.code == .configurationError)
    }

    @Test func aDocumentForAnotherIssuerIsRefused() async throws {
        let server = try TestOAuthServer.require()
        let issuer = server.tenantIssuer("mixup")
        let error = await #expect(throws: VaultError.self) { _ = try await TokenEndpointClient().discover(issuer: issuer) }
        #expect(error?.code == .configurationError)
        #expect(error?.message.contains("mix-up") == true && error?.message.contains(issuer.absoluteString) == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("attacker.example") == true, "the stated issuer is named")
    }

    @Test func theRFC8414DocumentServesWhenThereIsNoOpenIDOne() async throws {
        let server = try TestOAuthServer.require()
        let issuer = server.tenantIssuer("oauth-only")
        let metadata = try await TokenEndpointClient().discover(issuer: issuer)
        #expect(metadata.issuer == issuer && metadata.tokenEndpoint == server.url.appendingPathComponent("token"))
        #expect(try await server.discoveryRequests(path: issuer.path + "/.well-known/openid-configuration") == 1)
        #expect(try await server.discoveryRequests(path: "/.well-known/oauth-authorization-server" + issuer.path) == 1)

        let none = server.url.appendingPathComponent("nothing-here").appendingPathComponent(uniqueName("x"))
        let missing = await #expect(throws: VaultError.self) { _ = try await TokenEndpointClient().discover(issuer: none) }
        #expect(missing?.code == .notFound, "\(missing?.message ?? "")")
    }

    @Test func vaultLoginWithAnIssuerAlone() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("issuer-cli")
        let issuer = server.tenantIssuer("cli")
        let key = try CredentialKey(service: uniqueName("tv-issuer"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let child = try HelperProcess(
                "vault",
                arguments: ["login", key.service, key.account, "--issuer", issuer.absoluteString, "--client-id", TestOAuthServer.clientID, "--timeout", "60"],
                environment: scratch.environment(.encryptedFile), outputPath: scratch.path("login.out"))
            try child.start()
            defer { if child.process.isRunning { child.kill9() } }
            var authorizationURL: URL?
            try await eventually("vault login printing the URL") {
                authorizationURL = child.errorOutput.split(separator: "\n")
                    .first { $0.hasPrefix(server.url.appendingPathComponent("authorize").absoluteString) }
                    .flatMap { URL(string: String($0)) }
                return authorizationURL != nil || !child.process.isRunning
            }
            try await server.browse(try #require(authorizationURL, "\(child.errorOutput)"), as: user)
            let status = try await child.wait(bound: .seconds(60))
            #expect(status == 0, "\(child.errorOutput)")
            let stored = try #require(try await vault.token(for: key))
            #expect(try await server.user(for: stored) == user)
            #expect(try await vault.registration(for: key)?.issuer == issuer)

            for _ in 0..<2 {
                let refresh = try await Self.vault(scratch, ["refresh", key.service, key.account])
                #expect(refresh.status == 0, "\(refresh.stderr)")
            }
            #expect(try await server.discoveryRequests(path: issuer.path + "/.well-known/openid-configuration") == 1)
            let logout = try await Self.vault(scratch, ["logout", key.service, key.account])
            #expect(logout.status == 0, "\(logout.stderr)")

            let mixup = server.tenantIssuer("mixup")
            let refused = try await Self.vault(
                scratch, ["login", key.service, "mixup", "--issuer", mixup.absoluteString, "--client-id", TestOAuthServer.clientID])
            #expect(refused.status == 1, "\(refused.status): \(refused.stderr)")
            #expect(refused.stderr.contains("mix-up"), "\(refused.stderr)")
            #expect(try await vault.token(for: try CredentialKey(service: key.service, account: "mixup")) == nil)
        }
    }
}
#endif
