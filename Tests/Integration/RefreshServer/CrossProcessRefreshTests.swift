#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
// @testable only for RefreshLockDirectory: the tests check that the children lock the very file
// that Refreshing.md documents, not just some file they happen to share.
@testable import TokenVault

import Glibc

/// Single flight across processes, proven against the real authlib server with rotating refresh
/// tokens and family revocation on reuse. Each test runs against both real backends that processes
/// can share: the encrypted file (lock files beside it) and the Secret Service on the real
/// gnome-keyring that Scripts/test starts (lock files in `$XDG_RUNTIME_DIR/token-vault/locks/`).
/// Each test uses services of its own and deletes what it stored, pass or fail.
///
/// Every test fails (never skips) without the server or the keyring: run them with Scripts/test.
@Suite(.serialized) struct RefreshCrossProcessTests {
    /// Runs `processes` refresh-stress children, each with `tasks` callers per account, started at
    /// the same moment, and returns every caller's record.
    func stress(
        _ server: TestOAuthServer, _ scratch: VaultScratch, _ store: SharedStore, service: String, accounts: [String],
        processes: Int, tasks: Int = 8, lockTimeout: Double = 10, storedDescription: Bool = false, label: String
    ) async throws -> [[String: String]] {
        let goFile = scratch.path("\(label).go")
        // Start every caller at once: each process first opens the vault and says it is ready.
        let children = try await HelperProcess.startAll(
            "refresh-stress",
            (0..<processes).map { index in
                HelperProcess.Launch(
                    arguments: [
                        "--server", server.url.absoluteString, "--service", service,
                        "--accounts", accounts.joined(separator: ","), "--tasks", String(tasks), "--leeway", "1",
                        "--lock-timeout", String(lockTimeout),
                        "--ready-file", scratch.path("\(label)-\(index).ready"), "--go-file", goFile,
                    ] + (storedDescription ? ["--stored-description"] : []),
                    environment: scratch.environment(store), outputPath: scratch.path("\(label)-\(index).out"),
                    readyFile: scratch.path("\(label)-\(index).ready"))
            })
        #expect(FileManager.default.createFile(atPath: goFile, contents: Data()))
        var records: [[String: String]] = []
        for child in children {
            let status = try await child.wait(bound: .seconds(120))
            #expect(status == 0, "refresh-stress exited with \(status): \(child.errorOutput)")
            records += try child.records()
        }
        // Every caller used the backend under test, with the runtime directory this process sees:
        // for the Secret Service, that is what puts all of them on the same lock files.
        let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"] ?? ""
        #expect(records.allSatisfy { $0["backend"] == store.backend.rawValue }, "\(Set(records.map { $0["backend"] }))")
        #expect(records.allSatisfy { $0["runtime"] == runtime }, "\(Set(records.map { $0["runtime"] }))")
        return records
    }

    /// Logs a new user in and stores the token under `key`, already expired locally.
    private func seedExpiredToken(
        _ server: TestOAuthServer, _ vault: Vault, user: String, key: CredentialKey, refresh: ClientRegistration? = nil
    ) async throws -> OAuthToken {
        var token = try await server.login(user: user)
        token.expiresAt = Date().addingTimeInterval(-5)
        try await vault.saveToken(token, for: key, registration: refresh)
        return token
    }

    @Test(arguments: SharedStore.allCases)
    func theStoredDescriptionRefreshesOnceForFourProcessesOfEightTasks(_ store: SharedStore) async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("grant")
        let key = try CredentialKey(service: uniqueName("tv-grant"), account: "acct")
        try await withVault(store, services: [key.service]) { scratch, vault in
            let seeded = try await seedExpiredToken(server, vault, user: user, key: key, refresh: try server.publicClient())

            let records = try await stress(
                server, scratch, store, service: key.service, accounts: ["acct"], processes: 4, storedDescription: true,
                label: "grant")

            #expect(records.count == 32)
            #expect(records.filter { $0["ok"] != "true" }.isEmpty, "failed callers: \(records.filter { $0["ok"] != "true" })")
            let stored = try #require(try await vault.token(for: key))
            #expect(stored.refreshToken != seeded.refreshToken, "the server rotates refresh tokens")
            #expect(Set(records.compactMap { $0["access"] }) == [fingerprint(stored.accessToken)], "every caller got the same new token")
            #expect(try await vault.registration(for: key) == (try server.publicClient()), "the description is kept")
            let stats = try await server.stats(user: user)
            #expect(stats.refreshRequests == 1)
            #expect(stats.reuseDetected == 0)
            #expect(try await server.user(for: stored) == user)
        }
    }

    @Test(arguments: SharedStore.allCases)
    func aRejectedRefreshTokenIsPresentedOnceByFourProcesses(_ store: SharedStore) async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("verdict")
        let key = try CredentialKey(service: uniqueName("tv-grant"), account: "acct")
        try await withVault(store, services: [key.service]) { scratch, vault in
            let seeded = try await seedExpiredToken(server, vault, user: user, key: key, refresh: try server.publicClient())
            try await server.spendRefreshToken(of: seeded)

            let records = try await stress(
                server, scratch, store, service: key.service, accounts: ["acct"], processes: 4, storedDescription: true,
                label: "verdict")

            #expect(records.count == 32)
            #expect(records.allSatisfy { $0["code"] == VaultError.Code.reauthenticationRequired.description }, "\(records)")
            let after = try #require(try await vault.token(for: key))
            #expect(after.accessToken == seeded.accessToken && after.refreshToken == seeded.refreshToken, "the token itself is unchanged")
            #expect(try await vault.refreshTokenRejection(for: key)?.error == "invalid_grant", "the verdict is stored")
            let stats = try await server.stats(user: user)
            // One refresh by the other client, one rejected by the 32 callers of 4 processes.
            #expect(stats.refreshRequests == 2)
            #expect(stats.refreshRejected == 1)

            // A later process does not present it again either.
            _ = try await stress(
                server, scratch, store, service: key.service, accounts: ["acct"], processes: 1, tasks: 1,
                storedDescription: true, label: "later")
            #expect(try await server.stats(user: user).refreshRequests == 2)
        }
    }

    @Test(arguments: SharedStore.allCases)
    func fourProcessesOfEightTasksShareOneRefresh(_ store: SharedStore) async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("stress")
        let key = try CredentialKey(service: uniqueName("tv-stress"), account: "acct")
        try await withVault(store, services: [key.service]) { scratch, vault in
            let lockFile = try scratch.lockFile(store, for: key)
            #expect(!FileManager.default.fileExists(atPath: lockFile))
            let seeded = try await seedExpiredToken(server, vault, user: user, key: key)

            let records = try await stress(server, scratch, store, service: key.service, accounts: ["acct"], processes: 4, label: "one")

            // The children took the documented lock file: this process never refreshed.
            #expect(FileManager.default.fileExists(atPath: lockFile))
            #expect(records.count == 32)
            #expect(records.filter { $0["ok"] != "true" }.isEmpty, "failed callers: \(records.filter { $0["ok"] != "true" })")
            let stored = try #require(try await vault.token(for: key))
            #expect(stored.accessToken != seeded.accessToken)
            #expect(stored.refreshToken != seeded.refreshToken, "the server rotates refresh tokens")
            #expect(Set(records.compactMap { $0["access"] }) == [fingerprint(stored.accessToken)], "every caller got the same new token")
            let stats = try await server.stats(user: user)
            #expect(stats.refreshRequests == 1)
            #expect(stats.refreshSucceeded == 1)
            #expect(stats.reuseDetected == 0)
            #expect(stats.familiesRevoked == 0)
            #expect(try await server.user(for: stored) == user, "the new access token is live")
        }
    }

    @Test(arguments: SharedStore.allCases)
    func twoKeysGetOneRefreshEach(_ store: SharedStore) async throws {
        let server = try TestOAuthServer.require()
        let service = uniqueName("tv-stress")
        let users = ["a": uniqueName("stress-a"), "b": uniqueName("stress-b")]
        try await withVault(store, services: [service]) { scratch, vault in
            for (account, user) in users {
                _ = try await seedExpiredToken(server, vault, user: user, key: CredentialKey(service: service, account: account))
            }

            let records = try await stress(server, scratch, store, service: service, accounts: ["a", "b"], processes: 4, label: "two")

            #expect(records.count == 64)
            #expect(records.filter { $0["ok"] != "true" }.isEmpty, "failed callers: \(records.filter { $0["ok"] != "true" })")
            for (account, user) in users {
                let stored = try #require(try await vault.token(for: CredentialKey(service: service, account: account)))
                let fingerprints = Set(records.filter { $0["account"] == account }.compactMap { $0["access"] })
                #expect(fingerprints == [fingerprint(stored.accessToken)], "account \(account)")
                let stats = try await server.stats(user: user)
                #expect(stats.refreshRequests == 1, "account \(account)")
                #expect(stats.reuseDetected == 0)
                #expect(stats.familiesRevoked == 0)
            }
        }
    }

    @Test(arguments: SharedStore.allCases)
    func aRejectedRefreshAsksForANewLoginAndLeavesTheTokenAlone(_ store: SharedStore) async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("rejected")
        let key = try CredentialKey(service: uniqueName("tv-stress"), account: "acct")
        try await withVault(store, services: [key.service]) { scratch, vault in
            let seeded = try await seedExpiredToken(server, vault, user: user, key: key)
            // Another client spends the refresh token, so the vault's copy is a reused one.
            try await server.spendRefreshToken(of: seeded)
            let before = try #require(try await vault.token(for: key))

            let records = try await stress(server, scratch, store, service: key.service, accounts: ["acct"], processes: 4, label: "rejected")

            #expect(records.count == 32)
            for record in records {
                #expect(record["ok"] == "false")
                #expect(record["code"] == VaultError.Code.reauthenticationRequired.description)
                #expect(record["oauth"] == "invalid_grant")
            }
            #expect(try await vault.token(for: key) == before, "the stored token is unchanged")
            #expect(try await vault.refreshTokenRejection(for: key)?.error == "invalid_grant", "the verdict is stored with it")
            let stats = try await server.stats(user: user)
            // One refresh by the other client, exactly one by the 32 callers of 4 processes: the
            // first one's verdict is stored, so no other process presents the refresh token again.
            #expect(stats.refreshRequests == 2)
            #expect(stats.refreshRejected == 1)
            #expect(stats.reuseDetected == 1, "the server saw the reuse and revoked the family")
        }
    }

    @Test(arguments: SharedStore.allCases)
    func aProcessKilledWhileHoldingTheLockBlocksNobody(_ store: SharedStore) async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("killed")
        let key = try CredentialKey(service: uniqueName("tv-stress"), account: "acct")
        try await withVault(store, services: [key.service]) { scratch, vault in
            let lockFile = try scratch.lockFile(store, for: key)
            let seeded = try await seedExpiredToken(server, vault, user: user, key: key)

            // A process takes the key's lock and hangs inside its refresh, before any request.
            let holdFile = scratch.path("holding")
            let holder = try HelperProcess(
                "refresh-stress",
                arguments: [
                    "--server", server.url.absoluteString, "--service", key.service, "--accounts", "acct",
                    "--tasks", "1", "--leeway", "1", "--lock-timeout", "10",
                    "--ready-file", scratch.path("holder.ready"), "--go-file", scratch.path("holder.ready"),
                    "--hold-file", holdFile,
                ],
                environment: scratch.environment(store), outputPath: scratch.path("holder.out"))
            try holder.start()
            // Never leave it hanging if the test fails before it is killed below.
            defer { if holder.process.isRunning { holder.kill9() } }
            try await eventually("the holder taking the lock") { FileManager.default.fileExists(atPath: holdFile) }
            // The lock it holds is the documented file: this process cannot take it either.
            #expect(try isLockHeld(lockFile), "the holder's lock is not \(lockFile)")

            // While it lives, the lock really is held: callers with a short timeout give up.
            let blocked = try await stress(
                server, scratch, store, service: key.service, accounts: ["acct"], processes: 1, lockTimeout: 1, label: "blocked")
            #expect(blocked.count == 8)
            #expect(blocked.allSatisfy { $0["code"] == VaultError.Code.timeout.description }, "\(blocked)")

            // Kill it with SIGKILL: no cleanup runs, the kernel drops the flock.
            holder.kill9()
            _ = try await holder.wait(bound: .seconds(30))
            #expect(try !isLockHeld(lockFile), "the kernel dropped the dead holder's flock")

            // Everyone else now gets through within their 10 s lock timeout, with one refresh.
            let records = try await stress(server, scratch, store, service: key.service, accounts: ["acct"], processes: 4, label: "after")
            #expect(records.count == 32)
            #expect(records.filter { $0["ok"] != "true" }.isEmpty, "failed callers: \(records.filter { $0["ok"] != "true" })")
            let stored = try #require(try await vault.token(for: key))
            #expect(stored.accessToken != seeded.accessToken)
            #expect(Set(records.compactMap { $0["access"] }) == [fingerprint(stored.accessToken)])
            let stats = try await server.stats(user: user)
            #expect(stats.refreshRequests == 1)
            #expect(stats.familiesRevoked == 0)
        }
    }
}

extension VaultScratch {
    /// The lock file that every process must take to refresh `key` in `store`, where
    /// Refreshing.md says it is, checked independently of the code that computes it.
    func lockFile(_ store: SharedStore, for key: CredentialKey) throws -> String {
        let directory: RefreshLockDirectory
        switch store {
        case .encryptedFile:
            directory = try .forVaultFile(vaultPath)
            #expect(directory.path == vaultPath + ".locks")
        case .secretService:
            directory = try .forRuntime(scope: "secret-service")
            let runtime = try #require(
                ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], "Scripts/test sets a private XDG_RUNTIME_DIR")
            #expect(
                directory.path == (runtime as NSString).appendingPathComponent("token-vault/locks"),
                "the Secret Service's locks belong in the runtime directory, not the /tmp fallback")
        }
        return try directory.lockFilePath(for: key)
    }
}

/// Whether a process holds the `flock` on `path`. Tries to take it without waiting, and if that
/// works, drops it again at once by closing the descriptor.
func isLockHeld(_ path: String) throws -> Bool {
    let descriptor = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
    try #require(descriptor >= 0, "cannot open the lock file \(path): errno \(errno)")
    defer { close(descriptor) }
    if flock(descriptor, LOCK_EX | LOCK_NB) == 0 {
        return false
    }
    let error = errno
    try #require(error == EWOULDBLOCK, "flock failed with errno \(error)")
    return true
}
#endif
