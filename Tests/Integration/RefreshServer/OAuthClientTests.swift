#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

/// The OAuth client's smaller promises (issue 31), against the real authlib server: a rejected
/// entry never yields its token as fresh, saving a token keeps the entry's client registration,
/// and the registration's new names.
@Suite struct OAuthClientTests {
    /// Runs the built `vault` on the scratch's file vault; stdin from `input` if given.
    static func vault(
        _ scratch: VaultScratch, _ arguments: [String], input: Data? = nil, environment extra: [String: String] = [:],
        bound: Duration = .seconds(60)
    ) async throws -> (status: Int32, stdout: String, stderr: String) {
        let label = "vault-\(UUID().uuidString.prefix(8))"
        let child = try HelperProcess(
            "vault", arguments: arguments, environment: scratch.environment(.encryptedFile).merging(extra) { $1 },
            outputPath: scratch.path("\(label).out"))
        if let input {
            let path = scratch.path("\(label).in")
            try input.write(to: URL(fileURLWithPath: path))
            child.process.standardInput = FileHandle(forReadingAtPath: path)
        }
        try child.start()
        let status = try await child.wait(bound: bound)
        return (status, child.output, child.errorOutput)
    }

    /// A token response as `vault set` reads it on stdin.
    static func response(_ token: OAuthToken) throws -> Data {
        var fields: [String: Any] = ["access_token": token.accessToken, "token_type": token.tokenType, "expires_in": 3600]
        if let refreshToken = token.refreshToken { fields["refresh_token"] = refreshToken }
        return try JSONSerialization.data(withJSONObject: fields)
    }

    /// A new user's login, stored with the public client's registration and an access token
    /// that is good for an hour; then another client spends its refresh token and a refresh by
    /// the vault is rejected, so the entry carries the server's verdict.
    static func rejectedEntry(_ server: TestOAuthServer, _ vault: Vault, key: CredentialKey, user: String) async throws -> OAuthToken {
        var token = try await server.login(user: user)
        token.expiresAt = Date().addingTimeInterval(3600)
        try await vault.saveToken(token, for: key, registration: try server.publicClient())
        try await server.spendRefreshToken(of: token)
        let error = await #expect(throws: VaultError.self) { _ = try await vault.refreshToken(for: key) }
        #expect(error?.code == .reauthenticationRequired)
        #expect(try await vault.tokenEntry(for: key)?.refreshability() == .rejected)
        return token
    }

    @Test func aRejectedEntryIsNeverFreshInTheLibrary() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("rejected-lib")
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "rejected", account: user)
        let token = try await Self.rejectedEntry(server, vault, key: key, user: user)
        let before = try await server.stats(user: user).refreshRequests

        // The access token has an hour left, and still it is not handed out as fresh.
        let error = await #expect(throws: VaultError.self) { _ = try await vault.freshToken(for: key, leeway: 1) }
        #expect(error?.code == .reauthenticationRequired)
        #expect(error?.message.contains("log in again") == true, "\(error?.message ?? "")")
        #expect(error?.oauthError?.error == "invalid_grant")
        // The closure form alike, without calling the closure.
        let closure = await #expect(throws: VaultError.self) {
            _ = try await vault.freshToken(for: key, leeway: 1) { _ in
                Issue.record("the closure ran for a rejected entry")
                return token
            }
        }
        #expect(closure?.code == .reauthenticationRequired)
        #expect(try await server.stats(user: user).refreshRequests == before, "no request for a rejected entry")
        // The plain read still gives the stored token: only "fresh" is refused.
        let stillStored = try await vault.token(for: key)?.accessToken == token.accessToken
        #expect(stillStored)
    }

    @Test func getFreshOnARejectedEntryExitsSevenAndSaysLogInAgain() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("rejected-cli")
        let key = try CredentialKey(service: uniqueName("tv-rejected"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let token = try await Self.rejectedEntry(server, vault, key: key, user: user)
            let list = try await Self.vault(scratch, ["list"])
            #expect(list.status == 0, "\(list.stderr)")
            #expect(list.stdout.contains("rejected"), "\(list.stdout)")

            let get = try await Self.vault(scratch, ["get", key.service, key.account, "--fresh"])
            #expect(get.status == 7, "vault get --fresh exited \(get.status): \(get.stderr)")
            // Booleans first: a failing expectation prints its operands, and they must not be tokens.
            let printedSomething = !get.stdout.isEmpty
            #expect(!printedSomething, "no token is printed")
            #expect(get.stderr.contains("log in again"), "\(get.stderr)")
            let refreshToken = try #require(token.refreshToken)
            let stderrHoldsAToken = get.stderr.contains(token.accessToken) || get.stderr.contains(refreshToken)
            #expect(!stderrHoldsAToken)
        }
    }

    @Test func savingATokenKeepsTheRegistrationUnlessAskedToDropIt() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("keep-lib")
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "keep", account: user)
        let registration = try server.confidentialClient()
        try await vault.saveToken(try await server.login(user: user, confidential: true), for: key, registration: registration)

        // A token got some other way (a new login the app made itself) saved without naming the client.
        let newer = try await server.login(user: user, confidential: true)
        try await vault.saveToken(newer, for: key)
        #expect(try await vault.registration(for: key) == registration)
        let replaced = try await vault.token(for: key)?.accessToken == newer.accessToken
        #expect(replaced)
        // The kept registration, secret included, still refreshes at the server.
        let refreshed = try await vault.refreshToken(for: key)
        #expect(try await server.user(for: refreshed) == user)

        // Dropping it is explicit.
        try await vault.saveToken(refreshed, for: key, registration: nil)
        #expect(try await vault.registration(for: key) == nil)
        #expect(try await vault.tokenEntry(for: key)?.registration == nil)
    }

    @Test func vaultSetWithoutAClientKeepsTheRegistration() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("keep-cli")
        let key = try CredentialKey(service: uniqueName("tv-keep"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            try await vault.saveToken(try await server.login(user: user), for: key, registration: try server.publicClient())

            let set = try await Self.vault(scratch, ["set", key.service, key.account], input: try Self.response(try await server.login(user: user)))
            #expect(set.status == 0, "\(set.stderr)")
            #expect(try await vault.registration(for: key) == (try server.publicClient()))
            let refresh = try await Self.vault(scratch, ["refresh", key.service, key.account])
            #expect(refresh.status == 0, "vault refresh after vault set exited \(refresh.status): \(refresh.stderr)")
            #expect(try await server.stats(user: user).refreshSucceeded == 1)

            let forget = try await Self.vault(
                scratch, ["set", key.service, key.account, "--forget-registration"], input: try Self.response(try await server.login(user: user)))
            #expect(forget.status == 0, "\(forget.stderr)")
            #expect(try await vault.registration(for: key) == nil)
            let refused = try await Self.vault(scratch, ["refresh", key.service, key.account])
            #expect(refused.status == 1 && refused.stderr.contains("no client registration"), "\(refused.status): \(refused.stderr)")

            let both = try await Self.vault(
                scratch, ["set", key.service, key.account, "--forget-registration", "--token-url", server.url.absoluteString, "--client-id", "c"],
                input: Data("tok\n".utf8))
            #expect(both.status == 64, "\(both.stderr)")
        }
    }

    @Test @available(*, deprecated) func theOldNamesStillWorkForOneRelease() async throws {
        let server = try TestOAuthServer.require()
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "old-names", account: uniqueName("old"))
        let old: RefreshDescription = try RefreshDescription(
            tokenEndpoint: server.url.appendingPathComponent("token"), clientID: TestOAuthServer.clientID)
        try await vault.saveToken(OAuthToken(accessToken: "at", refreshToken: "rt"), for: key, refresh: old)
        #expect(try await vault.refreshDescription(for: key) == old)
        #expect(try await vault.tokenEntry(for: key)?.refreshDescription == old)
        let login = try AuthorizationCodeLogin(authorizationEndpoint: server.url.appendingPathComponent("authorize"), description: old)
        #expect(login.description == login.registration)
        #expect("\(old)".hasPrefix("ClientRegistration("))
    }

    // MARK: One deadline for a refresh

    @Test func aSilentTokenEndpointFailsWithinTheDefaultDeadline() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("silent-lib")
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "silent", account: user)
        let token = try await server.login(user: user)
        try await vault.saveToken(token, for: key, registration: try server.publicClient())
        try await server.fault(user: user, "silent", count: 5)

        let started = ContinuousClock.now
        let error = await #expect(throws: VaultError.self) { _ = try await vault.refreshToken(for: key) }
        let elapsed = ContinuousClock.now - started
        #expect(error?.code == .networkFailure)
        #expect(error?.message.contains("20 s deadline for the whole request") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("per-request time-out") == true, "the earlier attempts' bound is named too")
        // The documented default is 20 s in all (it was 3 × 30 s); the server never answers, so
        // only the client's own deadline ends it. The upper bound leaves room for a loaded machine.
        #expect(elapsed >= .seconds(18) && elapsed < .seconds(30), "a silent endpoint failed after \(elapsed)")
        #expect(try await server.stats(user: user).faultsServed == 3, "three attempts fit in the deadline")
        let untouched = try await vault.token(for: key) == token.storedRoundTrip()
        #expect(untouched)
    }

    @Test func theCommandsDeadlineIsSettableAndNamedInTheError() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("silent-cli")
        let key = try CredentialKey(service: uniqueName("tv-silent"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            var token = try await server.login(user: user)
            token.expiresAt = Date().addingTimeInterval(-5)
            try await vault.saveToken(token, for: key, registration: try server.publicClient())
            try await server.fault(user: user, "silent", count: 10)

            var started = ContinuousClock.now
            let get = try await Self.vault(
                scratch, ["get", key.service, key.account, "--fresh"], environment: ["TOKEN_VAULT_HTTP_DEADLINE": "2"])
            var elapsed = ContinuousClock.now - started
            #expect(get.status == 6, "\(get.status): \(get.stderr)")
            let printedSomething = !get.stdout.isEmpty
            #expect(!printedSomething)
            #expect(get.stderr.contains("2 s deadline") && get.stderr.contains("TOKEN_VAULT_HTTP_DEADLINE"), "\(get.stderr)")
            #expect(elapsed < .seconds(15), "a 2 s deadline took \(elapsed)")

            started = ContinuousClock.now
            let refresh = try await Self.vault(
                scratch, ["refresh", key.service, key.account, "--http-deadline", "1.5"], environment: ["TOKEN_VAULT_HTTP_DEADLINE": "50"])
            elapsed = ContinuousClock.now - started
            #expect(refresh.status == 6, "\(refresh.status): \(refresh.stderr)")
            #expect(refresh.stderr.contains("1.5 s deadline"), "the option wins over the environment: \(refresh.stderr)")
            #expect(elapsed < .seconds(15), "a 1.5 s deadline took \(elapsed)")
            let unchanged = try await vault.token(for: key)?.accessToken == token.accessToken
            #expect(unchanged)

            let bad = try await Self.vault(scratch, ["get", key.service, key.account, "--fresh"], environment: ["TOKEN_VAULT_HTTP_DEADLINE": "soon"])
            #expect(bad.status == 1 && bad.stderr.contains("TOKEN_VAULT_HTTP_DEADLINE"), "\(bad.status): \(bad.stderr)")
            let usage = try await Self.vault(scratch, ["refresh", key.service, key.account, "--http-deadline", "0"])
            #expect(usage.status == 64, "\(usage.status): \(usage.stderr)")
        }
    }
}
#endif
