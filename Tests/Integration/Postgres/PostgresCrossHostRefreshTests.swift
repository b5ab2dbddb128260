#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
import TokenVaultPostgres

import Glibc

extension PostgresTests {
    /// One refresh across hosts, against the real authlib server (rotating refresh tokens, family
    /// revocation on reuse). A "host" is a group of refresh-stress processes with a runtime
    /// directory, a temporary directory and a home of its own: they share nothing with the other
    /// hosts but the database, so no flock can help and only the advisory lock can.
    @Suite struct CrossHostRefresh {
        struct Host {
            let directory: TemporaryDirectory
            let environment: [String: String]
        }

        private func makeHost(_ postgres: TestPostgres, database: String, keyFile: String) throws -> Host {
            let directory = try TemporaryDirectory()
            for sub in ["runtime", "tmp", "home"] {
                try FileManager.default.createDirectory(atPath: directory.file(sub), withIntermediateDirectories: true)
            }
            // A copy of the key per host, as each host would have its own.
            let key = directory.file("key")
            try FileManager.default.copyItem(atPath: keyFile, toPath: key)
            var environment = postgres.environment(database, keyFile: key)
            environment["XDG_RUNTIME_DIR"] = directory.file("runtime")
            environment["TMPDIR"] = directory.file("tmp")
            environment["HOME"] = directory.file("home")
            environment["XDG_DATA_HOME"] = directory.file("home")
            return Host(directory: directory, environment: environment)
        }

        /// Process `index` of `host`: a refresh-stress child that says it is ready once it has
        /// opened the vault, then waits for `goFile`.
        private func launch(
            _ host: Host, index: Int, server: TestOAuthServer, service: String, tasks: Int, lockTimeout: Double, goFile: String,
            holdFile: String? = nil
        ) -> HelperProcess.Launch {
            HelperProcess.Launch(
                arguments: [
                    "--server", server.url.absoluteString, "--service", service, "--accounts", "acct", "--tasks", String(tasks),
                    "--leeway", "1", "--lock-timeout", String(lockTimeout),
                    "--ready-file", host.directory.file("\(index).ready"), "--go-file", goFile,
                ] + (holdFile.map { ["--hold-file", $0] } ?? []),
                environment: host.environment, outputPath: host.directory.file("\(index).out"), readyFile: host.directory.file("\(index).ready"))
        }

        /// `processes` processes on each of `hosts` new hosts, started and ready (waiting for `goFile`).
        private func startHosts(
            _ hosts: Int, processes: Int, postgres: TestPostgres, database: String, keyFile: String, server: TestOAuthServer,
            service: String, tasks: Int, goFile: String
        ) async throws -> (hosts: [Host], children: [HelperProcess]) {
            let made = try (0..<hosts).map { _ in try makeHost(postgres, database: database, keyFile: keyFile) }
            let launches = made.flatMap { host in
                (0..<processes).map { index in
                    launch(host, index: index, server: server, service: service, tasks: tasks, lockTimeout: 20, goFile: goFile)
                }
            }
            return (made, try await HelperProcess.startAll("refresh-stress", launches))
        }

        /// The holder: one process that takes the lock inside its refresh, creates `holdFile`
        /// and hangs there. Returns once it holds the lock.
        private func startHolder(
            postgres: TestPostgres, database: String, keyFile: String, server: TestOAuthServer, service: String, keep: TemporaryDirectory
        ) async throws -> (process: HelperProcess, host: Host) {
            let host = try makeHost(postgres, database: database, keyFile: keyFile)
            let holdFile = keep.file("held")
            let go = keep.file("holder-go")
            let holder = try await HelperProcess.startAll(
                "refresh-stress",
                [launch(host, index: 0, server: server, service: service, tasks: 1, lockTimeout: 20, goFile: go, holdFile: holdFile)])[0]
            #expect(FileManager.default.createFile(atPath: go, contents: Data()))
            try await eventually("the holder taking the lock") { FileManager.default.fileExists(atPath: holdFile) }
            return (holder, host)
        }

        private func seed(_ postgres: TestPostgres, _ server: TestOAuthServer, user: String) async throws
            -> (database: String, keyFile: String, key: CredentialKey, seeded: OAuthToken, keep: TemporaryDirectory)
        {
            let keep = try TemporaryDirectory()
            let keyFile = try keep.keyFile()
            let database = try postgres.freshDatabase()
            let store = try await postgres.open(database, keySource: .keyFile(keyFile))
            defer { store.close() }
            let key = try CredentialKey(service: uniqueName("tv-hosts"), account: "acct")
            var token = try await server.login(user: user)
            token.expiresAt = Date().addingTimeInterval(-5)
            try await Vault(store: store).saveToken(token, for: key)
            return (database, keyFile, key, token, keep)
        }

        @Test func threeHostsOfThreeProcessesOfFourTasksShareOneRefresh() async throws {
            let postgres = try TestPostgres.require()
            let server = try TestOAuthServer.require()
            let user = uniqueName("hosts")
            let (database, keyFile, key, seeded, keep) = try await seed(postgres, server, user: user)
            let goFile = keep.file("go")
            let (hosts, children) = try await startHosts(
                3, processes: 3, postgres: postgres, database: database, keyFile: keyFile, server: server, service: key.service, tasks: 4,
                goFile: goFile)
            #expect(FileManager.default.createFile(atPath: goFile, contents: Data()))
            var records: [[String: String]] = []
            for child in children {
                let status = try await child.wait(bound: .seconds(120))
                #expect(status == 0, "refresh-stress exited with \(status): \(child.errorOutput)")
                records += try child.records()
            }
            #expect(records.count == 36)
            #expect(records.allSatisfy { $0["backend"] == "postgres" })
            #expect(Set(records.compactMap { $0["runtime"] }).count == 3, "three hosts, three runtime directories")
            #expect(records.filter { $0["ok"] != "true" }.isEmpty, "failed callers: \(records.filter { $0["ok"] != "true" })")

            let store = try await postgres.open(database, keySource: .keyFile(keyFile))
            defer { store.close() }
            let stored = try #require(try await Vault(store: store).token(for: key))
            #expect(stored.refreshToken != seeded.refreshToken, "the server rotates refresh tokens")
            #expect(Set(records.compactMap { $0["access"] }) == [fingerprint(stored.accessToken)], "every caller got the same new token")
            let stats = try await server.stats(user: user)
            #expect(stats.refreshRequests == 1)
            #expect(stats.reuseDetected == 0)
            #expect(stats.familiesRevoked == 0)
            withExtendedLifetime(hosts) {}  // their directories outlive the processes
        }

        /// The holder stops inside its refresh (lock held, nothing sent); then it is killed with
        /// SIGKILL, or its backend is ended with pg_terminate_backend. The other hosts get the
        /// lock within the bound and refresh exactly once.
        @Test(arguments: ["kill -9", "pg_terminate_backend"])
        func aDeadLockHolderHoldsNobodyUp(_ how: String) async throws {
            let postgres = try TestPostgres.require()
            let server = try TestOAuthServer.require()
            let user = uniqueName("holder")
            let (database, keyFile, key, seeded, keep) = try await seed(postgres, server, user: user)
            let (holder, holderHost) = try await startHolder(
                postgres: postgres, database: database, keyFile: keyFile, server: server, service: key.service, keep: keep)
            defer {
                holder.kill9()
                withExtendedLifetime(holderHost) {}
            }
            let locks = try postgres.sql(database, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted")
            #expect(locks == "1", "the holder holds one advisory lock")

            let goFile = keep.file("go")
            let (hosts, waiters) = try await startHosts(
                2, processes: 2, postgres: postgres, database: database, keyFile: keyFile, server: server, service: key.service, tasks: 3,
                goFile: goFile)
            #expect(FileManager.default.createFile(atPath: goFile, contents: Data()))
            // Everyone waits on the lock: one backend per waiting process.
            try await eventually("the waiters queueing on the lock") {
                try postgres.sql(database, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") == "4"
            }
            #expect(try await server.stats(user: user).refreshRequests == 0, "nobody refreshed while the holder held the lock")

            let clock = ContinuousClock()
            let released = clock.now
            if how == "kill -9" {
                holder.kill9()
            } else {
                let ended = try postgres.sql(
                    database,
                    "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted")
                #expect(ended == "t")
            }
            var records: [[String: String]] = []
            for waiter in waiters {
                let status = try await waiter.wait(bound: .seconds(60))
                #expect(status == 0, "refresh-stress exited with \(status): \(waiter.errorOutput)")
                records += try waiter.records()
            }
            let elapsed = clock.now - released
            #expect(elapsed < .seconds(15), "the waiters finished \(elapsed) after the holder's end (lock wait bound 20 s)")
            #expect(records.count == 12)
            #expect(records.filter { $0["ok"] != "true" }.isEmpty, "failed callers: \(records.filter { $0["ok"] != "true" })")
            let store = try await postgres.open(database, keySource: .keyFile(keyFile))
            defer { store.close() }
            let stored = try #require(try await Vault(store: store).token(for: key))
            #expect(stored.refreshToken != seeded.refreshToken)
            #expect(Set(records.compactMap { $0["access"] }) == [fingerprint(stored.accessToken)])
            let stats = try await server.stats(user: user)
            #expect(stats.refreshRequests == 1, "the holder sent nothing; one waiter refreshed")
            #expect(stats.reuseDetected == 0)
            withExtendedLifetime((hosts, holder)) {}
        }

        /// The wait itself is bounded: a holder that never lets go makes the others fail with
        /// `timeout` after the lock timeout, not hang.
        @Test func theWaitIsBounded() async throws {
            let postgres = try TestPostgres.require()
            let server = try TestOAuthServer.require()
            let user = uniqueName("bounded")
            let (database, keyFile, key, _, keep) = try await seed(postgres, server, user: user)
            let (holder, holderHost) = try await startHolder(
                postgres: postgres, database: database, keyFile: keyFile, server: server, service: key.service, keep: keep)
            defer {
                holder.kill9()
                withExtendedLifetime(holderHost) {}
            }

            let store = try await postgres.open(database, keySource: .keyFile(keyFile))
            defer { store.close() }
            let clock = ContinuousClock()
            let start = clock.now
            do {
                _ = try await Vault(store: store).freshToken(for: key, leeway: 1, timeout: .seconds(2)) { _ in
                    Issue.record("refreshed while another host held the lock")
                    throw CancellationError()
                }
                Issue.record("no timeout")
            } catch let error as VaultError {
                #expect(error.code == .timeout, "\(error.message)")
            }
            let elapsed = clock.now - start
            #expect(elapsed >= .seconds(2) && elapsed < .seconds(6), "\(elapsed)")
        }
    }
}
#endif
