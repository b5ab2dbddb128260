import Foundation
import Testing
import TokenVault

/// Single flight across processes, proven against the real authlib server with rotating refresh
/// tokens and family revocation on reuse. Each test runs against the encrypted-file vault (lock
/// files beside it) and a plain test-only directory store (lock files in the runtime directory,
/// as the Secret Service uses).
///
/// Every test fails (never skips) without the server: run them with Scripts/test.
@Suite(.serialized) struct RefreshCrossProcessTests {
    /// Runs `processes` refresh-stress children, each with `tasks` callers per account, started at
    /// the same moment, and returns every caller's record.
    private func stress(
        _ server: TestOAuthServer, _ scratch: VaultScratch, _ store: SharedStore, service: String, accounts: [String],
        processes: Int, tasks: Int = 8, lockTimeout: Double = 10, label: String
    ) async throws -> [[String: String]] {
        let goFile = scratch.path("\(label).go")
        var children: [ChildProcess] = []
        for index in 0..<processes {
            let child = try ChildProcess(
                "refresh-stress",
                arguments: [
                    "--server", server.url.absoluteString, "--service", service,
                    "--accounts", accounts.joined(separator: ","), "--tasks", String(tasks), "--leeway", "1",
                    "--lock-timeout", String(lockTimeout),
                    "--ready-file", scratch.path("\(label)-\(index).ready"), "--go-file", goFile,
                ],
                environment: scratch.environment(store), outputPath: scratch.path("\(label)-\(index).out"))
            try child.start()
            children.append(child)
        }
        // Start every caller at once: wait until each process has opened the vault.
        try await eventually("all \(processes) processes getting ready") {
            (0..<processes).allSatisfy { FileManager.default.fileExists(atPath: scratch.path("\(label)-\($0).ready")) }
        }
        #expect(FileManager.default.createFile(atPath: goFile, contents: Data()))
        var records: [[String: String]] = []
        for child in children {
            let status = try await child.wait(bound: .seconds(120))
            #expect(status == 0, "refresh-stress exited with \(status): \(child.errorOutput)")
            records += try child.records()
        }
        return records
    }

    /// Logs a new user in and stores the token under `key`, already expired locally.
    private func seedExpiredToken(_ server: TestOAuthServer, _ vault: Vault, user: String, key: CredentialKey) async throws -> OAuthToken {
        var token = try await server.login(user: user)
        token.expiresAt = Date().addingTimeInterval(-5)
        try await vault.saveToken(token, for: key)
        return token
    }

    @Test(arguments: SharedStore.allCases)
    func fourProcessesOfEightTasksShareOneRefresh(_ store: SharedStore) async throws {
        let server = try TestOAuthServer.require()
        let scratch = try VaultScratch()
        defer { scratch.remove() }
        let vault = try await scratch.open(store)
        let user = uniqueName("stress")
        let key = try CredentialKey(service: uniqueName("tv-stress"), account: "acct")
        let seeded = try await seedExpiredToken(server, vault, user: user, key: key)

        let records = try await stress(server, scratch, store, service: key.service, accounts: ["acct"], processes: 4, label: "one")

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

    @Test(arguments: SharedStore.allCases)
    func twoKeysGetOneRefreshEach(_ store: SharedStore) async throws {
        let server = try TestOAuthServer.require()
        let scratch = try VaultScratch()
        defer { scratch.remove() }
        let vault = try await scratch.open(store)
        let service = uniqueName("tv-stress")
        let users = ["a": uniqueName("stress-a"), "b": uniqueName("stress-b")]
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

    @Test(arguments: SharedStore.allCases)
    func aRejectedRefreshAsksForANewLoginAndLeavesTheTokenAlone(_ store: SharedStore) async throws {
        let server = try TestOAuthServer.require()
        let scratch = try VaultScratch()
        defer { scratch.remove() }
        let vault = try await scratch.open(store)
        let user = uniqueName("rejected")
        let key = try CredentialKey(service: uniqueName("tv-stress"), account: "acct")
        let seeded = try await seedExpiredToken(server, vault, user: user, key: key)
        // Another client spends the refresh token, so the vault's copy is a reused one.
        try await server.spendRefreshToken(of: seeded)
        let before = try #require(try await vault.store.load(key))

        let records = try await stress(server, scratch, store, service: key.service, accounts: ["acct"], processes: 1, label: "rejected")

        #expect(records.count == 8)
        for record in records {
            #expect(record["ok"] == "false")
            #expect(record["code"] == VaultError.Code.reauthenticationRequired.description)
            #expect(record["oauth"] == "invalid_grant")
        }
        #expect(try await vault.store.load(key) == before, "the stored token is unchanged")
        let stats = try await server.stats(user: user)
        // One refresh by the other client, exactly one by the eight callers: no retry loop.
        #expect(stats.refreshRequests == 2)
        #expect(stats.refreshRejected == 1)
        #expect(stats.reuseDetected == 1, "the server saw the reuse and revoked the family")
    }

    @Test(arguments: SharedStore.allCases)
    func aProcessKilledWhileHoldingTheLockBlocksNobody(_ store: SharedStore) async throws {
        let server = try TestOAuthServer.require()
        let scratch = try VaultScratch()
        defer { scratch.remove() }
        let vault = try await scratch.open(store)
        let user = uniqueName("killed")
        let key = try CredentialKey(service: uniqueName("tv-stress"), account: "acct")
        let seeded = try await seedExpiredToken(server, vault, user: user, key: key)

        // A process takes the key's lock and hangs inside its refresh, before any request.
        let holdFile = scratch.path("holding")
        let holder = try ChildProcess(
            "refresh-stress",
            arguments: [
                "--server", server.url.absoluteString, "--service", key.service, "--accounts", "acct",
                "--tasks", "1", "--leeway", "1", "--lock-timeout", "10",
                "--ready-file", scratch.path("holder.ready"), "--go-file", scratch.path("holder.ready"),
                "--hold-file", holdFile,
            ],
            environment: scratch.environment(store), outputPath: scratch.path("holder.out"))
        try holder.start()
        try await eventually("the holder taking the lock") { FileManager.default.fileExists(atPath: holdFile) }

        // While it lives, the lock really is held: callers with a short timeout give up.
        let blocked = try await stress(
            server, scratch, store, service: key.service, accounts: ["acct"], processes: 1, lockTimeout: 1, label: "blocked")
        #expect(blocked.count == 8)
        #expect(blocked.allSatisfy { $0["code"] == VaultError.Code.timeout.description }, "\(blocked)")

        // Kill it with SIGKILL: no cleanup runs, the kernel drops the flock.
        holder.kill9()
        _ = try await holder.wait(bound: .seconds(30))

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
