import Foundation
import Testing
import TokenVault

/// The `oauth-example` client, run as a user would run it, against the real authlib server.
@Suite struct RefreshExampleClientTests {
    @Test func theExampleSignsInWithADeviceCodeAndRefreshesThroughTheVault() async throws {
        let server = try TestOAuthServer.require()
        let scratch = try VaultScratch()
        defer { scratch.remove() }
        let user = uniqueName("device")
        let service = uniqueName("tv-example")
        let common = ["--server", server.url.absoluteString, "--service", service, "--account", "me"]

        // 1. Device authorization grant: the example shows a user code and polls; the "user"
        //    approves that code on the server's verification page.
        let login = try ChildProcess(
            "oauth-example", arguments: ["login"] + common, environment: scratch.environment(.encryptedFile),
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

        // The token is in the vault, where this process can read it too.
        let vault = try await Vault.open(scratch.configuration(.encryptedFile))
        let key = try CredentialKey(service: service, account: "me")
        var loggedIn = try #require(try await vault.token(for: key))
        #expect(loggedIn.refreshToken != nil)
        #expect(try await server.user(for: loggedIn) == user)
        var stats = try await server.stats(user: user)
        #expect(stats.deviceAuthorizations == 1)
        #expect(stats.refreshRequests == 0)

        // 2. Refresh: expire the token locally; `whoami` must refresh it through the vault.
        loggedIn.expiresAt = Date().addingTimeInterval(-1)
        try await vault.saveToken(loggedIn, for: key)
        let whoami = try ChildProcess(
            "oauth-example", arguments: ["whoami"] + common, environment: scratch.environment(.encryptedFile),
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

        // No token ever reaches the example's output.
        for output in [login.output, login.errorOutput, whoami.output, whoami.errorOutput] {
            for secret in [loggedIn.accessToken, loggedIn.refreshToken, refreshed.accessToken, refreshed.refreshToken] {
                if let secret { #expect(!output.contains(secret)) }
            }
        }
    }
}
