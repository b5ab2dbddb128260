#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
import Glibc
@testable import TokenVaultTestSupport
import TokenVault
@_spi(Benchmarks) @testable import TokenVaultPostgres

extension PostgresTests {
    /// The optional read cache (Options.readCache): invalidated by LISTEN/NOTIFY, served only
    /// while its listener is known alive, against the real cluster.
    @Suite struct ReadCache {
        private func cachedOptions(heartbeat: Duration = .milliseconds(200)) -> PostgresStore.Options {
            var options = TestPostgres.testOptions
            options.readCache = true
            options.readCacheHeartbeat = heartbeat
            return options
        }

        private func waitForListener(_ store: PostgresStore, listens: Int = 1) async throws {
            let cache = try #require(store.readCache)
            try await eventually("the read cache listening (LISTEN number \(listens))", bound: .seconds(20)) {
                store.isReadCacheListening && cache.listens >= listens
            }
        }

        /// The listener's backend, found by the statement it last ran (its heartbeat is slow here).
        private func listenerBackends(_ postgres: TestPostgres, _ database: String) throws -> [String] {
            try postgres.sql(
                database,
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%tokenvault_changes%'"
            ).split(separator: "\n").map(String.init)
        }

        @Test func aWriteByAnotherProcessIsSeenByACachedGetWithinABoundedTime() async throws {
            let postgres = try TestPostgres.require()
            let sandbox = try CLISandbox()
            let database = try postgres.freshDatabase()
            let environment = postgres.environment(database, keyFile: sandbox.keyFile.path)
            let key = try CredentialKey(service: "cache", account: "acct")
            var result = try sandbox.run("vault", ["set", key.service, key.account, "--expires-in", "3600"], stdin: Data("first-token\n".utf8), environment: environment)
            #expect(result.status == 0, "\(result)")

            let store = try await postgres.open(database, keySource: .keyFile(sandbox.keyFile.path), options: cachedOptions())
            defer { store.close() }
            try await waitForListener(store)
            let vault = Vault(store: store)
            #expect(try await vault.token(for: key)?.accessToken == "first-token")
            let hitsBefore = store.readCacheHits
            #expect(try await vault.token(for: key)?.accessToken == "first-token")
            #expect(store.readCacheHits == hitsBefore + 1, "the second get is served from the cache")

            // Another process writes: its NOTIFY reaches this store's listener.
            result = try sandbox.run("vault", ["set", key.service, key.account, "--expires-in", "3600"], stdin: Data("second-token\n".utf8), environment: environment)
            #expect(result.status == 0, "\(result)")
            let clock = ContinuousClock()
            let written = clock.now
            try await eventually("the cached get seeing the other process's write", bound: .seconds(5)) {
                try await vault.token(for: key)?.accessToken == "second-token"
            }
            let seenAfter = clock.now - written
            // And it stays seen (served from the cache again, refilled from the database).
            let hitsAfter = store.readCacheHits
            #expect(try await vault.token(for: key)?.accessToken == "second-token")
            #expect(try await vault.token(for: key)?.accessToken == "second-token")
            #expect(store.readCacheHits >= hitsAfter + 1)

            // A delete by another process, likewise.
            result = try sandbox.run("vault", ["delete", key.service, key.account], environment: environment)
            #expect(result.status == 0, "\(result)")
            try await eventually("the cached get seeing the other process's delete", bound: .seconds(5)) {
                try await store.load(key) == nil
            }

            // This process's own writes are seen at once, without waiting for its NOTIFY.
            for round in 0..<20 {
                try await store.save(Data("own-\(round)".utf8), for: key)
                #expect(try await store.load(key) == Data("own-\(round)".utf8))
                #expect(try await store.load(key) == Data("own-\(round)".utf8))
            }
            try await store.delete(key)
            #expect(try await store.load(key) == nil)
            Swift.print("read cache: another process's write seen by a cached get \(seenAfter) after its commit")
        }

        /// A write from another store in this process (a second host) and a rekey: each is a
        /// NOTIFY in the writer's transaction.
        @Test func anotherStoresWritesAndARekeyInvalidate() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let keyFile = try dir.keyFile()
            let database = try postgres.freshDatabase()
            let writer = try await postgres.open(database, keySource: .keyFile(keyFile))
            defer { writer.close() }
            let reader = try await postgres.open(database, keySource: .keyFile(keyFile), options: cachedOptions())
            defer { reader.close() }
            try await waitForListener(reader)
            let keys = try (0..<5).map { try CredentialKey(service: "many", account: "a\($0)") }
            for key in keys { try await writer.save(Data("v1".utf8), for: key) }
            // The writer's NOTIFYs reach the reader's listener asynchronously: one that arrives
            // after the reader filled its cache evicts that row again (as it must). Once they are
            // all in, every key is served from the cache.
            try await eventually("every key served from the cache", bound: .seconds(5)) {
                let before = reader.readCacheHits
                for key in keys { guard try await reader.load(key) == Data("v1".utf8) else { return false } }
                return reader.readCacheHits - before == keys.count
            }
            try await writer.saveAll(keys.map { CredentialWrite(key: $0, secret: Data("v2".utf8), contentType: .binary) })
            for key in keys {
                try await eventually("\(key) seen at v2", bound: .seconds(5)) { try await reader.load(key) == Data("v2".utf8) }
            }
            // A rekey by the writer: the reader's cache forgets everything, and the reader's next
            // get goes to the database, which says the vault was rekeyed.
            try await writer.rekey(to: .keyFile(try dir.keyFile("new-key")))
            try await eventually("the reader's cache dropping every row after the rekey", bound: .seconds(5)) {
                do {
                    _ = try await reader.load(keys[0])
                    return false
                } catch let error as VaultError {
                    #expect(error.code == .authenticationFailed, "\(error.message)")
                    return true
                }
            }
        }

        /// pg_terminate_backend of the listener: the cache is emptied (a row deleted in SQL behind
        /// the store's back, which the cache went on serving, is now read from the database as
        /// gone), gets stay correct meanwhile, and the cache resumes on a new LISTEN.
        @Test func aTerminatedListenerEmptiesTheCacheAndTheCacheResumes() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let database = try postgres.freshDatabase()
            // A slow heartbeat, so that the listener's last statement stays its LISTEN.
            let store = try await postgres.open(database, keySource: .keyFile(try dir.keyFile()), options: cachedOptions(heartbeat: .seconds(30)))
            defer { store.close() }
            try await waitForListener(store)
            let key = try CredentialKey(service: "terminate", account: "listener")
            let other = try CredentialKey(service: "terminate", account: "other")
            try await store.save(Data("cached".utf8), for: key)
            try await store.save(Data("other".utf8), for: other)
            // The store's own NOTIFYs may still be arriving (each one voids a fill): poll until a hit.
            let hits = store.readCacheHits
            try await eventually("a get served from the cache", bound: .seconds(10)) {
                try await store.load(key) == Data("cached".utf8) && store.readCacheHits > hits
            }

            // The documented limitation: a row changed in SQL without NOTIFY is not seen by a
            // cache that holds it.
            let rowHash = PostgresReadCache.payload(store.current.keys.rowHash(key))
            try postgres.sql(database, "DELETE FROM tokenvault_entries WHERE row_hash = '\\x\(rowHash)'")
            #expect(try postgres.sql(database, "SELECT count(*) FROM tokenvault_entries") == "1", "the first row was deleted behind the store's back")
            #expect(try await store.load(key) == Data("cached".utf8), "the cache still serves the row deleted without NOTIFY")

            let backends = try listenerBackends(postgres, database)
            #expect(backends.count == 1, "one listener: \(backends)")
            let ended = try postgres.sql(database, "SELECT pg_terminate_backend(\(try #require(backends.first)))")
            #expect(ended == "t")
            // Once the store has seen its listener go, the cache is empty: the get reads the database.
            try await eventually("the get reading the database after the listener's end", bound: .seconds(10)) {
                try await store.load(key) == nil
            }
            #expect(try await store.load(other) == Data("other".utf8))

            // A new LISTEN on a new connection, and the cache serves again.
            try await waitForListener(store, listens: 2)
            let newBackends = try listenerBackends(postgres, database)
            #expect(newBackends.count == 1 && newBackends != backends, "a new listener: \(newBackends), was \(backends)")
            try await store.save(Data("again".utf8), for: key)
            let resumed = store.readCacheHits
            try await eventually("a get served from the cache again", bound: .seconds(10)) {
                try await store.load(key) == Data("again".utf8) && store.readCacheHits > resumed
            }
        }

        /// A listener whose connection hangs (its backend stopped with SIGSTOP, the socket still
        /// open): after three missed heartbeats the cache serves nothing, and every get reads the
        /// database; once the listener is replaced, the cache serves again.
        @Test func aHungListenerStopsTheCacheWithinThreeHeartbeats() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let database = try postgres.freshDatabase()
            let store = try await postgres.open(database, keySource: .keyFile(try dir.keyFile()), options: cachedOptions(heartbeat: .milliseconds(300)))
            defer { store.close() }
            try await waitForListener(store)
            let key = try CredentialKey(service: "hung", account: "listener")
            try await store.save(Data("v1".utf8), for: key)
            #expect(try await store.load(key) == Data("v1".utf8))
            // The listener's backend: the one that has run LISTEN on this database.
            let pid = try #require(
                Int32(try postgres.sql(database, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND (query ILIKE 'LISTEN%' OR query = 'SELECT 1') LIMIT 1")))
            #expect(kill(pid, SIGSTOP) == 0)
            defer { kill(pid, SIGCONT) }
            try await eventually("the cache stopping once the heartbeat hangs", bound: .seconds(5)) { !store.isReadCacheListening }
            let hits = store.readCacheHits
            #expect(try await store.load(key) == Data("v1".utf8))
            #expect(store.readCacheHits == hits, "nothing served while the listener is not known alive")
            kill(pid, SIGCONT)
            try await waitForListener(store, listens: 2)
        }
    }
}
#endif
