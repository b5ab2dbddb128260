#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
import TokenVaultIDToken

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Issue 31 point 6: ID tokens that the real server signs (Tests/oauth-server/idtokens.py, joserfc)
/// are verified against its JWKS before their claims count as verified; every spoiled one is
/// refused naming the check that failed, and rotated keys are fetched once.
extension OAuthClientTests {
    /// The server's ID-token controls (idtokens.py).
    struct IDTokenControls: Sendable {
        let server: TestOAuthServer

        func set(user: String, alg: String? = nil, fault: String? = nil) async throws {
            var form: [String: String] = ["user": user]
            if let alg { form["alg"] = alg }
            if let fault { form["fault"] = fault }
            #expect(try await send("idtoken/control", form: form).1 == 200)
        }

        func rotate() async throws {
            #expect(try await send("idtoken/rotate", form: [:]).1 == 200)
        }

        func jwksRequests(probe: String) async throws -> Int {
            let (data, status) = try await send("idtoken/stats?probe=\(probe)", form: nil)
            try #require(status == 200)
            return try #require((try JSONSerialization.jsonObject(with: data) as? [String: Any])?["jwks_requests"] as? Int)
        }

        private func send(_ path: String, form: [String: String]?) async throws -> (Data, Int) {
            var request = URLRequest(url: try #require(URL(string: server.url.absoluteString + "/" + path)))
            request.timeoutInterval = 30
            if let form {
                request.httpMethod = "POST"
                request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
                request.httpBody = Data(form.map { "\($0.key)=\($0.value)" }.joined(separator: "&").utf8)
            }
            let (data, response) = try await URLSession.shared.data(for: request)
            return (data, (response as? HTTPURLResponse)?.statusCode ?? 0)
        }
    }

    /// The server's own issuer (its ID tokens' `iss`), discovered, with an `openid` scope.
    static func openIDRegistration(_ server: TestOAuthServer) async throws -> ClientRegistration {
        let metadata = try await TokenEndpointClient().discover(issuer: server.url)
        #expect(metadata.jwksURI == server.url.appendingPathComponent("jwks"))
        return try ClientRegistration(metadata: metadata, clientID: TestOAuthServer.clientID, scope: "openid profile")
    }

    /// A real browser login (code grant with PKCE and a nonce) of `user`; the URL it opened too.
    static func codeLogin(_ server: TestOAuthServer, _ registration: ClientRegistration, user: String) async throws -> (
        token: OAuthToken, nonce: String, url: URL
    ) {
        let login = try AuthorizationCodeLogin(
            authorizationEndpoint: try #require(registration.metadata?.authorizationEndpoint), registration: registration, timeout: .seconds(30))
        let seen = AuthorizationBox.URLBox()
        let token = try await login.run { url in
            seen.value = url
            Task { try await server.browse(url, as: user) }
        }
        return (token, try #require(login.nonce), try #require(seen.value))
    }

    /// A verifier of the server's ID tokens whose key-set fetches the server counts under `probe`.
    static func probingVerifier(_ server: TestOAuthServer, _ registration: ClientRegistration, probe: String) throws -> IDTokenVerifier {
        try IDTokenVerifier(
            issuer: try #require(registration.issuer?.absoluteString), clientID: registration.clientID,
            jwksURI: try #require(URL(string: server.url.absoluteString + "/jwks?probe=\(probe)")))
    }

    @Test(arguments: ["RS256", "ES256"])
    func aSignedIDTokenFromACodeLoginIsVerified(algorithm: String) async throws {
        let server = try TestOAuthServer.require()
        let controls = IDTokenControls(server: server)
        let user = uniqueName("oidc-\(algorithm)")
        try await controls.set(user: user, alg: algorithm)
        let registration = try await Self.openIDRegistration(server)
        let (token, nonce, url) = try await Self.codeLogin(server, registration, user: user)
        let sent = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems?.first { $0.name == "nonce" }?.value
        #expect(sent == nonce && nonce.count >= 22, "the authorization request carries the login's nonce")

        #expect(token.idToken != nil)
        #expect(token.unverifiedIDTokenClaims?["sub"] == .string(user))
        #expect(token.verifiedIDTokenClaims == nil && token.idTokenVerification == nil, "not verified before the check")

        let probe = uniqueName("probe")
        let verifier = try Self.probingVerifier(server, registration, probe: probe)
        let verified = try await verifier.verify(token: token, nonce: nonce)
        #expect(verified.verifiedIDTokenClaims?["sub"] == .string(user))
        #expect(verified.verifiedIDTokenClaims?["nonce"] == .string(nonce))
        let record = try #require(verified.idTokenVerification)
        #expect(record.algorithm == algorithm && record.nonceChecked && record.audience == TestOAuthServer.clientID)
        #expect(record.keyID?.hasPrefix(algorithm == "RS256" ? "rsa-" : "ec-") == true, "\(record)")
        #expect(record.issuer == registration.issuer?.absoluteString)

        // The record survives the stored form, and vouches for this ID token only.
        let stored = try JSONDecoder().decode(OAuthToken.self, from: try verified.storedForm())
        #expect(stored.idTokenVerification == record && stored.verifiedIDTokenClaims?["sub"] == .string(user))
        var swapped = stored
        swapped.idToken = token.idToken.map { $0 + "x" }
        #expect(swapped.idTokenVerification == nil && swapped.verifiedIDTokenClaims == nil, "another ID token is not vouched for")
        // A refresh that brings no ID token keeps the verified one; one that brings a new one is unverified.
        let refreshed = stored.updated(byRefresh: OAuthToken(accessToken: "new-access"))
        #expect(refreshed.idTokenVerification == record)

        // The key set is kept: a second verification fetches nothing.
        _ = try await verifier.verify(token: token, nonce: nonce)
        #expect(try await controls.jwksRequests(probe: probe) == 1)

        // The same valid ID token presented for another login (another nonce) is refused.
        let replay = await #expect(throws: VaultError.self) { _ = try await verifier.verify(token: token, nonce: "another-logins-nonce") }
        #expect((replay?.underlying as? IDTokenVerificationError)?.reason == .nonce, "\(String(describing: replay))")
    }

    /// Each spoiled ID token the server can make, and the check that must refuse it.
    static let spoiled: [(fault: String, reason: IDTokenVerificationError.Reason, says: String)] = [
        ("bad_signature", .signature, "does not verify"),
        ("tampered", .signature, "does not verify"),
        ("wrong_iss", .issuer, "attacker.example"),
        ("wrong_aud", .audience, "another client"),
        ("expired", .expired, "expired at"),
        ("future_iat", .issuedInFuture, "in the future"),
        ("wrong_nonce", .nonce, "another login's nonce"),
        ("no_nonce", .nonce, "carries no nonce"),
        ("alg_none", .algorithm, "alg: none"),
        ("hs256_public_key", .algorithm, "HS256"),
        ("jwk_header", .keyInHeader, "(jwk)"),
        ("jku_header", .keyInHeader, "(jku)"),
        ("unknown_kid", .unknownKey, "stranger-1"),
    ]

    @Test func everySpoiledIDTokenIsRefusedNamingTheCheck() async throws {
        let server = try TestOAuthServer.require()
        let controls = IDTokenControls(server: server)
        let registration = try await Self.openIDRegistration(server)
        let verifier = try IDTokenVerifier(registration: registration)
        for (fault, reason, says) in Self.spoiled {
            let user = uniqueName("spoiled")
            try await controls.set(user: user, fault: fault)
            let (token, nonce, _) = try await Self.codeLogin(server, registration, user: user)
            let idToken = try #require(token.idToken, "\(fault)")
            let error = await #expect(throws: VaultError.self, "\(fault)") { _ = try await verifier.verify(token: token, nonce: nonce) }
            #expect(error?.code == .integrityFailure, "\(fault): \(String(describing: error))")
            #expect((error?.underlying as? IDTokenVerificationError)?.reason == reason, "\(fault): \(String(describing: error))")
            let message = error?.message ?? ""
            #expect(message.contains(says), "\(fault): \(message)")
            for part in idToken.split(separator: ".") where part.count > 8 {
                #expect(!message.contains(part) && !String(describing: error).contains(part), "\(fault): the message shows the token")
            }
            #expect(token.verifiedIDTokenClaims == nil)
        }
    }

    @Test func rotatedKeysAreFetchedOnceAndAnUnknownKidAfterOneRefetchIsRefused() async throws {
        let server = try TestOAuthServer.require()
        let controls = IDTokenControls(server: server)
        let registration = try await Self.openIDRegistration(server)
        let probe = uniqueName("rotation")
        let verifier = try Self.probingVerifier(server, registration, probe: probe)

        let before = try await Self.codeLogin(server, registration, user: uniqueName("rotation"))
        _ = try await verifier.verify(token: before.token, nonce: before.nonce)
        #expect(try await controls.jwksRequests(probe: probe) == 1)

        try await controls.rotate()
        let after = try await Self.codeLogin(server, registration, user: uniqueName("rotation"))
        let verified = try await verifier.verify(token: after.token, nonce: after.nonce)
        #expect(verified.idTokenVerification != nil)
        #expect(try await controls.jwksRequests(probe: probe) == 2, "an unknown kid fetched the key set again, once")
        let again = try await Self.codeLogin(server, registration, user: uniqueName("rotation"))
        _ = try await verifier.verify(token: again.token, nonce: again.nonce)
        #expect(try await controls.jwksRequests(probe: probe) == 2, "the rotated set is kept")

        let user = uniqueName("rotation")
        try await controls.set(user: user, fault: "unknown_kid")
        let stranger = try await Self.codeLogin(server, registration, user: user)
        let error = await #expect(throws: VaultError.self) { _ = try await verifier.verify(token: stranger.token, nonce: stranger.nonce) }
        #expect((error?.underlying as? IDTokenVerificationError)?.reason == .unknownKey, "\(String(describing: error))")
        #expect(try await controls.jwksRequests(probe: probe) == 3, "one refetch for the unknown kid, no more")
    }

    @Test func vaultLoginVerifiesTheIDTokenAndGetJSONSaysSo() async throws {
        let server = try TestOAuthServer.require()
        let controls = IDTokenControls(server: server)
        let user = uniqueName("oidc-cli")
        let key = try CredentialKey(service: uniqueName("tv-oidc"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            func login(account: String, as user: String) async throws -> (status: Int32, stderr: String) {
                let child = try HelperProcess(
                    "vault",
                    arguments: [
                        "login", key.service, account, "--issuer", server.url.absoluteString, "--client-id", TestOAuthServer.clientID,
                        "--scope", "openid profile", "--timeout", "60",
                    ],
                    environment: scratch.environment(.encryptedFile), outputPath: scratch.path("login-\(account).out"))
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
                return (try await child.wait(bound: .seconds(60)), child.errorOutput)
            }

            let ok = try await login(account: key.account, as: user)
            #expect(ok.status == 0, "\(ok.stderr)")
            #expect(ok.stderr.contains("Verified the ID token (RS256, key rsa-"), "\(ok.stderr)")
            #expect(ok.stderr.contains("and the login's nonce"), "\(ok.stderr)")
            let stored = try #require(try await vault.token(for: key))
            #expect(stored.verifiedIDTokenClaims?["sub"] == .string(user))

            let get = try await Self.vault(scratch, ["get", key.service, key.account, "--json", "--allow-expired"])
            #expect(get.status == 0, "\(get.stderr)")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(get.stdout.utf8)) as? [String: Any])
            let verification = try #require(json["id_token_verified"] as? [String: Any], "\(get.stdout)")
            #expect(verification["algorithm"] as? String == "RS256" && verification["nonce_checked"] as? Bool == true)
            #expect((json["id_token_claims"] as? [String: Any])?["sub"] as? String == user)

            // A token stored without the check (vault set) says its claims are unverified.
            let plain = try CredentialKey(service: key.service, account: "plain")
            let storedIDToken: String = try #require(stored.idToken)
            try await vault.saveToken(OAuthToken(accessToken: "plain-access", idToken: storedIDToken), for: plain)
            let unverified = try await Self.vault(scratch, ["get", plain.service, plain.account, "--json"])
            let fields = try #require(try JSONSerialization.jsonObject(with: Data(unverified.stdout.utf8)) as? [String: Any])
            #expect(fields["id_token_verified"] as? Bool == false, "\(unverified.stdout)")
            #expect((fields["id_token_claims"] as? [String: Any])?["sub"] as? String == user)

            // An ID token with another login's nonce ends the login with exit 5; nothing is saved.
            let victim = uniqueName("oidc-cli")
            try await controls.set(user: victim, fault: "wrong_nonce")
            let refused = try await login(account: "replayed", as: victim)
            #expect(refused.status == 5, "\(refused.status): \(refused.stderr)")
            #expect(refused.stderr.contains("nonce") && refused.stderr.contains("was not saved"), "\(refused.stderr)")
            #expect(try await vault.token(for: try CredentialKey(service: key.service, account: "replayed")) == nil)
        }
    }
}
#endif
