#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

#if canImport(Glibc)
import Glibc
#endif

/// A refresh that survives its refresher (issue 33): a signal, a refused field or a delete in the
/// middle of a real `vault get --fresh` against the rotating, reuse-revoking authlib server never
/// costs the grant. The server holds the refresh request (a `hold` fault) until the test lets it
/// go, so the signal lands while the request is in flight, without any sleep.
extension RefreshCrossProcessTests {
    private func launch(_ scratch: VaultScratch, _ arguments: [String], label: String) throws -> HelperProcess {
        let child = try HelperProcess(
            "vault", arguments: arguments, environment: scratch.environment(.encryptedFile), outputPath: scratch.path("\(label).out"))
        try child.start()
        return child
    }

    private func run(_ scratch: VaultScratch, _ arguments: [String], label: String) async throws -> HelperProcess {
        let child = try launch(scratch, arguments, label: label)
        _ = try await child.wait(bound: .seconds(60))
        return child
    }

    /// A logged-in user whose stored token has expired, so that `get --fresh` refreshes.
    private func expiredEntry(_ server: TestOAuthServer, user: String, key: CredentialKey, vault: Vault) async throws -> OAuthToken {
        var token = try await server.login(user: user)
        token.expiresAt = Date().addingTimeInterval(-5)
        try await vault.saveToken(token, for: key, registration: try server.publicClient())
        return token
    }

    @Test(arguments: [SIGTERM, SIGINT])
    func aSignalDuringTheRefreshWaitsForTheSave(_ signal: Int32) async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("sig")
        let key = try CredentialKey(service: uniqueName("tv-sig"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let token = try await expiredEntry(server, user: user, key: key, vault: vault)
            try await server.fault(user: user, "hold")
            let child = try launch(scratch, ["get", key.service, key.account, "--fresh"], label: "get")
            // The request has reached the server, which rotates the refresh token once released.
            try await eventually("the refresh request held by the server") { try await server.stats(user: user).held == 1 }
            kill(child.process.processIdentifier, signal)
            try await eventually("vault saying it finishes the refresh first") {
                !child.process.isRunning || child.errorOutput.contains("finishing a token refresh before exiting")
            }
            try #require(child.process.isRunning, "vault died at the signal, in the middle of the refresh: \(child.errorOutput)")
            try await server.release(user: user)
            _ = try await child.wait(bound: .seconds(60))
            // The usual status: killed by that very signal (the shell's 128 + signal), after the save.
            #expect(child.process.terminationReason == .uncaughtSignal && child.process.terminationStatus == signal)
            #expect(child.output.isEmpty)
            let stored = try #require(try await vault.token(for: key))
            #expect(stored.refreshToken != token.refreshToken, "the rotated refresh token was saved")

            let next = try await run(scratch, ["refresh", key.service, key.account], label: "next")
            #expect(next.process.terminationStatus == 0, "the grant survived: \(next.errorOutput)")
            let stats = try await server.stats(user: user)
            #expect(stats.reuseDetected == 0 && stats.familiesRevoked == 0)
            #expect(stats.refreshSucceeded == 2)
        }
    }

    @Test func aSignalOutsideARefreshEndsVaultAtOnce() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("sig-idle")
        let key = try CredentialKey(service: uniqueName("tv-sig"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            _ = try await expiredEntry(server, user: user, key: key, vault: vault)
            // Another process holds the key's refresh lock: vault waits for it, with no request out.
            let lockFile = try scratch.lockFile(.encryptedFile, for: key)
            let descriptor = open(lockFile, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            try #require(descriptor >= 0 && flock(descriptor, LOCK_EX) == 0)
            defer { close(descriptor) }
            let child = try launch(scratch, ["get", key.service, key.account, "--fresh"], label: "waiting")
            try await eventually("vault waiting on the lock") { holds(lockFile, child.process.processIdentifier) }
            kill(child.process.processIdentifier, SIGTERM)
            _ = try await child.wait(bound: .seconds(60))
            #expect(child.process.terminationReason == .uncaughtSignal && child.process.terminationStatus == SIGTERM)
            #expect(!child.errorOutput.contains("finishing a token refresh"))
            #expect(try await server.stats(user: user).refreshRequests == 0)
        }
    }

    @Test(arguments: [
        ("bad_expires_in", "expires_in"), ("bad_refresh_expiry", "refresh_token_expires_in"), ("tab_id_token", "id_token"),
    ])
    func anAnswerWithARefusedFieldKeepsTheNewRefreshToken(_ fault: String, _ field: String) async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("refused")
        let key = try CredentialKey(service: uniqueName("tv-refused"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let token = try await expiredEntry(server, user: user, key: key, vault: vault)
            try await server.fault(user: user, fault)
            let first = try await run(scratch, ["get", key.service, key.account, "--fresh"], label: "first")
            #expect(first.process.terminationStatus == 1, "\(first.errorOutput)")
            #expect(first.errorOutput.contains("refused (\(field))"), "\(first.errorOutput)")
            #expect(first.errorOutput.contains("new refresh token"), "\(first.errorOutput)")
            #expect(first.output.isEmpty)
            let stored = try #require(try await vault.token(for: key))
            #expect(stored.refreshToken != token.refreshToken, "the rotated refresh token was kept")
            #expect(stored.idToken?.contains("\t") != true)

            // The entry is usable: the next get --fresh exits 0, and so does a forced refresh.
            let second = try await run(scratch, ["get", key.service, key.account, "--fresh"], label: "second")
            #expect(second.process.terminationStatus == 0, "\(second.errorOutput)")
            let third = try await run(scratch, ["refresh", key.service, key.account], label: "third")
            #expect(third.process.terminationStatus == 0, "\(third.errorOutput)")
            let stats = try await server.stats(user: user)
            #expect(stats.reuseDetected == 0 && stats.familiesRevoked == 0)
        }
    }

    @Test func aDeleteDuringARefreshIsNotUndone() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("delete")
        let key = try CredentialKey(service: uniqueName("tv-delete"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            _ = try await expiredEntry(server, user: user, key: key, vault: vault)
            try await server.fault(user: user, "hold")
            let refresher = try launch(scratch, ["get", key.service, key.account, "--fresh"], label: "refresher")
            try await eventually("the refresh request held by the server") { try await server.stats(user: user).held == 1 }
            let lockFile = try scratch.lockFile(.encryptedFile, for: key)
            let deleter = try launch(scratch, ["delete", key.service, key.account], label: "deleter")
            try await eventually("the delete waiting on the entry's refresh lock") { holds(lockFile, deleter.process.processIdentifier) }
            try await server.release(user: user)
            #expect(try await refresher.wait(bound: .seconds(60)) == 0, "\(refresher.errorOutput)")
            #expect(try await deleter.wait(bound: .seconds(60)) == 0, "\(deleter.errorOutput)")
            #expect(try await vault.token(for: key) == nil, "the refresh wrote the deleted entry back")
        }
    }

    /// Whether process `pid` has `path` open (it waits on, or holds, that lock file).
    private func holds(_ path: String, _ pid: Int32) -> Bool {
        let directory = "/proc/\(pid)/fd"
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return false }
        return entries.contains { (try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/\($0)")) == path }
    }
}
#endif
