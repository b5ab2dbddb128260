#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
// @testable only for RefreshLockDirectory: the test looks for the documented lock file.
@testable import TokenVault

/// Issue 33: `vault rekey` while `vault get --fresh` is in flight on the file vault. Before, the
/// rekey went ahead, the refresh's save met the new key (exit 4) and the rotated refresh token
/// was lost (the next refresh exited 7). Now the rekey takes the refresh lock of every entry
/// first: it waits for the refresh, which saves under the old key, and then seals its answer again.
extension RefreshCrossProcessTests {
    /// Whether process `pid` has `path` open (from /proc).
    private func hasOpen(_ path: String, pid: Int32) -> Bool {
        let directory = "/proc/\(pid)/fd"
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return false }
        return entries.contains { (try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/\($0)")) == path }
    }

    @Test func aRekeyWaitsForTheRefreshInFlightAndSealsItsAnswerAgain() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("rekey-flight")
        let key = try CredentialKey(service: uniqueName("tv-rekey"), account: "acct")
        // Not withVault: its clean-up opens the vault with the old key, which the rekey replaces.
        let scratch = try VaultScratch()
        defer { scratch.remove() }
        let vault = try await scratch.open(.encryptedFile)
        var token = try await server.login(user: user)
        token.expiresAt = Date().addingTimeInterval(-5)
        try await vault.saveToken(token, for: key, registration: try server.publicClient())

        try await server.fault(user: user, "hold")
        let get = try HelperProcess(
            "vault", arguments: ["get", key.service, key.account, "--fresh"], environment: scratch.environment(.encryptedFile),
            outputPath: scratch.path("get.out"))
        try get.start()
        defer { if get.process.isRunning { get.kill9() } }
        try await eventually("the token request held by the server") { try await server.stats(user: user).held == 1 }

        let newKey = scratch.path("new.key")
        let hex = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        #expect(FileManager.default.createFile(atPath: newKey, contents: Data(hex.utf8), attributes: [.posixPermissions: 0o600]))
        let rekey = try HelperProcess(
            "vault", arguments: ["rekey", "--new-key-file", newKey], environment: scratch.environment(.encryptedFile),
            outputPath: scratch.path("rekey.out"))
        try rekey.start()
        defer { if rekey.process.isRunning { rekey.kill9() } }
        let lockFile = try scratch.lockFile(.encryptedFile, for: key)
        let pid = rekey.process.processIdentifier
        try await eventually("the rekey waiting on the entry's refresh lock (or finishing without it)") {
            hasOpen(lockFile, pid: pid) || !rekey.process.isRunning
        }
        #expect(rekey.process.isRunning, "the rekey went ahead while a refresh was in flight: \(rekey.errorOutput)")

        try await server.release(user: user)
        let getStatus = try await get.wait(bound: .seconds(60))
        #expect(getStatus == 0, "vault get --fresh exited \(getStatus): \(get.errorOutput)")
        let rekeyStatus = try await rekey.wait(bound: .seconds(60))
        #expect(rekeyStatus == 0, "vault rekey exited \(rekeyStatus): \(rekey.errorOutput)")

        // Under the new key, the rotated refresh token; the grant lives.
        let rekeyed = try await Vault.open(VaultConfiguration(backend: .file, filePath: scratch.vaultPath, keySource: .keyFile(newKey)))
        let stored = try #require(try await rekeyed.token(for: key))
        let rotated = stored.refreshToken != token.refreshToken  // compared here: a failed #expect would print both
        #expect(rotated, "the refresh's answer was sealed again under the new key")
        #expect(fingerprint(get.output.trimmingCharacters(in: .whitespacesAndNewlines)) == fingerprint(stored.accessToken))
        let next = try await server.tryRefresh(try #require(stored.refreshToken))
        #expect(next.status == 200, "the stored refresh token was refused: \(next.error ?? "")")
        #expect(try await server.stats(user: user).reuseDetected == 0)
    }
}
#endif
