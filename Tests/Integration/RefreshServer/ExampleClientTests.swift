#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

/// The `oauth-example` client, run as a user would run it, against the real authlib server.
@Suite struct RefreshExampleClientTests {
    /// Where the example keeps its tokens. It opens its vault with `VaultConfiguration.fromEnvironment()`,
    /// so the backend is whatever its environment says, and `auto` when it says nothing.
    enum Setup: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// `TOKEN_VAULT_BACKEND=file` with a key file, as on a headless server.
        case fileByEnvironment
        /// No `TOKEN_VAULT_*` variable: `auto`, as a desktop user runs it. Under Scripts/test the
        /// throwaway keyring is up and unlocked, so `auto` picks the Secret Service. That is
        /// intended (DESIGN.md: auto means the Secret Service when it answers and is unlocked),
        /// and the test checks that the token really went there rather than assuming it.
        case auto

        var testDescription: String { rawValue }

        /// The store the example must end up using.
        var store: SharedStore {
            switch self {
            case .fileByEnvironment: .encryptedFile
            case .auto: .secretService
            }
        }

        func environment(_ scratch: VaultScratch) -> [String: String] {
            switch self {
            case .fileByEnvironment:
                return scratch.environment(.encryptedFile)
            case .auto:
                var environment = ProcessInfo.processInfo.environment
                for name in ["TOKEN_VAULT_BACKEND", "TOKEN_VAULT_FILE", "TOKEN_VAULT_KEY_FILE", "TOKEN_VAULT_PASSPHRASE_FILE"] {
                    environment.removeValue(forKey: name)
                }
                return environment
            }
        }
    }

    @Test(arguments: Setup.allCases)
    func theExampleSignsInWithADeviceCodeAndRefreshesThroughTheVault(_ setup: Setup) async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("device")
        let service = uniqueName("tv-example")
        let common = ["--server", server.url.absoluteString, "--service", service, "--account", "me"]
        // This process reads what the example stored through the backend it must have used, and
        // deletes it at the end: the keyring is shared by every test of the run.
        try await withVault(setup.store, services: [service]) { scratch, vault in
            // 1. Device authorization grant: the example shows a user code and polls; the "user"
            //    approves that code on the server's verification page.
            let login = try HelperProcess(
                "oauth-example", arguments: ["login"] + common, environment: setup.environment(scratch),
                outputPath: scratch.path("login.out"))
            try login.start()
            var userCode: String?
            try await eventually("the example showing a user code") {
                userCode = login.output.firstMatch(of: /enter the code ([A-Z]{4}-[A-Z]{4})/).map { String($0.1) }
                return userCode != nil || !login.process.isRunning
            }
            try await server.approveDevice(userCode: try #require(userCode, "login output: \(login.output) \(login.errorOutput)"), as: user)
            let loginStatus = try await login.wait(bound: .seconds(60))
            #expect(loginStatus == 0, "login failed: \(login.output) \(login.errorOutput)")
            #expect(login.output.contains("saved in the \(setup.store.backend) vault"), "\(login.output)")

            // The token is in the vault, where this process can read it too.
            let key = try CredentialKey(service: service, account: "me")
            var loggedIn = try #require(try await vault.token(for: key))
            #expect(loggedIn.refreshToken != nil)
            #expect(try await server.user(for: loggedIn) == user)
            var stats = try await server.stats(user: user)
            #expect(stats.deviceAuthorizations == 1)
            #expect(stats.refreshRequests == 0)
            // Stored with how to refresh it, so that any process (and `vault get --fresh`) can.
            let client = try #require(try await vault.registration(for: key))
            #expect(client.tokenEndpoint == server.url.appendingPathComponent("token"))
            #expect(client.clientID == TestOAuthServer.clientID)

            // 2. Refresh: expire the token locally; `whoami` must refresh it through the vault.
            loggedIn.expiresAt = Date().addingTimeInterval(-1)
            try await vault.saveToken(loggedIn, for: key, registration: client)
            let whoami = try HelperProcess(
                "oauth-example", arguments: ["whoami"] + common, environment: setup.environment(scratch),
                outputPath: scratch.path("whoami.out"))
            try whoami.start()
            let whoamiStatus = try await whoami.wait(bound: .seconds(60))
            #expect(whoamiStatus == 0, "whoami failed: \(whoami.output) \(whoami.errorOutput)")
            #expect(whoami.output.contains("Signed in as \(user)."))

            let refreshed = try #require(try await vault.token(for: key))
            #expect(refreshed.accessToken != loggedIn.accessToken)
            #expect(refreshed.refreshToken != loggedIn.refreshToken, "the rotated refresh token was saved")
            stats = try await server.stats(user: user)
            #expect(stats.refreshRequests == 1)
            #expect(stats.refreshSucceeded == 1)
            #expect(stats.familiesRevoked == 0)

            // 3. A 401 to a token that still looks valid: `whoami` reports it, the vault refreshes
            //    once (the stored access token is still the refused one), and the call succeeds.
            var refused = refreshed
            refused.accessToken = "refused-\(uniqueName("at"))"
            refused.expiresAt = Date().addingTimeInterval(3600)
            try await vault.saveToken(refused, for: key, registration: client)
            let again = try HelperProcess(
                "oauth-example", arguments: ["whoami"] + common, environment: setup.environment(scratch),
                outputPath: scratch.path("whoami-401.out"))
            try again.start()
            let againStatus = try await again.wait(bound: .seconds(60))
            #expect(againStatus == 0, "whoami after a 401 failed: \(again.output) \(again.errorOutput)")
            #expect(again.output.contains("Signed in as \(user)."))
            let replaced = try #require(try await vault.token(for: key))
            #expect(replaced.accessToken != refused.accessToken)
            stats = try await server.stats(user: user)
            #expect(stats.refreshRequests == 2, "one refresh for the 401")
            #expect(stats.familiesRevoked == 0)

            // No token ever reaches the example's output.
            for output in [login.output, login.errorOutput, whoami.output, whoami.errorOutput, again.output, again.errorOutput] {
                for secret in [
                    loggedIn.accessToken, loggedIn.refreshToken, refreshed.accessToken, refreshed.refreshToken, replaced.accessToken,
                    replaced.refreshToken,
                ] {
                    if let secret { #expect(!output.contains(secret)) }
                }
            }
        }
    }
}
#endif
