#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
@testable import TokenVaultPostgres
import Synchronization
import PostgresNIO

extension PostgresTests {
    /// Connections: TLS modes, an unreachable server, restarts, terminated backends.
    @Suite struct Connections {
        @Test(arguments: ["verify-full", "verify-ca", "require", "disable"])
        func everyAcceptedSSLModeConnects(_ mode: String) async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let store = try await postgres.open(try postgres.freshDatabase(), keySource: .keyFile(try dir.keyFile()), sslmode: mode)
            defer { store.close() }
            let status = try await store.status()
            #expect((status.tls != nil) == (mode != "disable"), "\(mode): \(status.tls ?? "no TLS")")
        }

        /// Every TCP connection of the store has TCP keepalives on, with the store's 5 s idle time
        /// (the kernel's default is two hours): a client waiting on a server that went away without
        /// a word, such as a fenced primary whose address moved to the promoted standby, hears of it
        /// in seconds instead of waiting out its bound (Scripts/fleet's failover measures that).
        /// Read from the kernel with `ss`, for this process's own sockets to the cluster.
        @Test(arguments: ["verify-full", "verify-ca", "require", "disable"])
        func everyTCPConnectionHasKeepalives(_ mode: String) async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let store = try await postgres.open(try postgres.freshDatabase(), keySource: .keyFile(try dir.keyFile()), sslmode: mode)
            defer { store.close() }
            _ = try await store.status()
            let sockets = try ChildProcess.run(
                "/usr/bin/ss", ["-tnopH", "state", "established", "dport", "= :\(postgres.port)"], environment: [:])
            #expect(sockets.status == 0, "ss: \(sockets.stderr)")
            let ours = String(decoding: sockets.stdout, as: UTF8.self).split(separator: "\n").filter { $0.contains("pid=\(getpid()),") }
            #expect(!ours.isEmpty, "\(mode): no connection of this process to port \(postgres.port)")
            for line in ours {
                // "timer:(keepalive,4.2sec,0)": the time to the next probe, at most the idle time.
                let timer = line.components(separatedBy: "timer:(keepalive,").dropFirst().first?.split(separator: ",").first.map(String.init)
                let seconds = timer.flatMap(Self.seconds)
                #expect(seconds.map { $0 <= 5 } == true, "\(mode): \(line)")
            }
        }

        /// The server keeps keepalives on every connection of the store too (startup parameters), so
        /// that a client cut off in the middle of a transaction loses its backend, and the row
        /// locks that transaction holds, in about 24 s rather than the kernel's two hours. Read
        /// with SHOW on a connection of the store's own pool.
        @Test(arguments: ["verify-full", "disable"])
        func theServerEndsASilentClientsSessionInSeconds(_ mode: String) async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let store = try await postgres.open(try postgres.freshDatabase(), keySource: .keyFile(try dir.keyFile()), sslmode: mode)
            defer { store.close() }
            let settings = try await store.bounded("read the session's keepalive settings") { connection in
                let rows = try await connection.query(
                    "SELECT current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'), current_setting('tcp_keepalives_count')",
                    logger: PostgresSQL.silent)
                var values: [String] = []
                for try await (idle, interval, count) in rows.decode((String, String, String).self) { values = [idle, interval, count] }
                return values
            }
            #expect(settings == ["18", "2", "3"], "\(mode): \(settings)")
        }

        /// `ss`'s "4.2sec", "980ms", "119min" in seconds.
        private static func seconds(_ text: String) -> Double? {
            for (unit, scale) in [("ms", 0.001), ("sec", 1.0), ("min", 60.0)] where text.hasSuffix(unit) {
                return Double(text.dropLast(unit.count)).map { $0 * scale }
            }
            return nil
        }

        // A certificate for another name: PostgresTests.HostNames (the cluster serves certificates
        // with chosen names, and psql judges each host; a connection to an address the cluster does
        // not listen on, as this suite once tried, is refused before any certificate is seen).

        @Test func sslmodeDisableIsOnlyForLoopbackAndPasswordsStayOutOfMessages() throws {
            #expect(throws: VaultError.self) { try PostgresStore.Configuration(url: "postgres://u@db.example.com/x?sslmode=disable") }
            #expect(throws: VaultError.self) { try PostgresStore.Configuration(url: "postgres://u@127.0.0.1/x?sslmode=prefer") }
            let local = try PostgresStore.Configuration(url: "postgres://u:pw-in-url@[::1]:6000/x?sslmode=disable")
            #expect(local.tlsMode == .disable)
            #expect(!"\(local)".contains("pw-in-url"))
            let socket = try PostgresStore.Configuration(url: "postgres://u@/x?host=/run/postgresql")
            #expect(socket.socketDirectory == "/run/postgresql" && socket.tlsMode == .disable)
            #expect(try PostgresStore.Configuration(url: "postgres://u@db.example.com/x").tlsMode == .verifyFull)
        }

        @Test func anUnreachableServerIsUnavailableWithinTheBound() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            // A port nobody listens on (the kernel's pick, closed again), and a black-holed address.
            for url in ["postgres://u@127.0.0.1:9/x?sslmode=disable", "postgres://u@192.0.2.1:5432/x?sslmode=require"] {
                let clock = ContinuousClock()
                let start = clock.now
                do {
                    _ = try await PostgresStore.open(
                        try PostgresStore.Configuration(url: url), keySource: .keyFile(try dir.keyFile()),
                        options: PostgresStore.Options(operationTimeout: .seconds(3), connectTimeout: .seconds(1)))
                    Issue.record("opened \(url)")
                } catch let error as VaultError {
                    #expect(error.code == .backendUnavailable, "\(url): \(error.message)")
                }
                #expect(clock.now - start < .seconds(6), "\(url) took \(clock.now - start)")
            }
            _ = postgres
        }

        @Test func aRestartBetweenCallsAndDuringCallsLosesNothingAcknowledged() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let store = try await postgres.open(try postgres.freshDatabase(), keySource: .keyFile(try dir.keyFile()))
            defer { store.close() }
            let first = try CredentialKey(service: "restart", account: "before")
            try await store.save(Data("before".utf8), for: first)

            // Between calls: every pooled connection dies; the next call reconnects.
            try postgres.control("restart", ["immediate"])
            #expect(try await store.load(first) == Data("before".utf8))

            // During calls: writers keep saving while the server restarts under them. The restart
            // starts once a first save is acknowledged, and the writers go on until it is over and
            // a few more saves have gone through. Every save that returned is there afterwards; a
            // save that failed says so with a VaultError.
            let acknowledged = Acknowledged()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<4 {
                    group.addTask {
                        var afterRestart = 0
                        for index in 0..<2000 {
                            let number = writer * 10000 + index
                            let restarted = acknowledged.restarted.withLock { $0 }
                            do {
                                try await store.save(Data("value-\(number)".utf8), for: CredentialKey(service: "restart", account: "n\(number)"))
                                acknowledged.numbers.withLock { $0.append(number) }
                            } catch let error as VaultError {
                                #expect(error.code == .backendUnavailable, "\(error.message)")
                            }
                            if restarted { afterRestart += 1 }
                            if afterRestart >= 5 { break }
                        }
                    }
                }
                group.addTask {
                    try await eventually("a first acknowledged save", bound: .seconds(30)) {
                        !acknowledged.numbers.withLock { $0.isEmpty }
                    }
                    try postgres.control("restart", ["immediate"])
                    acknowledged.restarted.withLock { $0 = true }
                }
                try await group.waitForAll()
            }
            let saved = acknowledged.numbers.withLock { $0 }
            #expect(saved.count > 0)
            for number in saved {
                #expect(try await store.load(CredentialKey(service: "restart", account: "n\(number)")) == Data("value-\(number)".utf8))
            }
        }

        @Test func aTerminatedBackendIsSurvivedByTheNextCall() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let database = try postgres.freshDatabase()
            let store = try await postgres.open(database, keySource: .keyFile(try dir.keyFile()))
            defer { store.close() }
            let key = try CredentialKey(service: "terminate", account: "a")
            try await store.save(Data("kept".utf8), for: key)
            let ended = try postgres.sql(
                database, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
            #expect(Int(ended) ?? 0 >= 1, "the store's pooled connection was ended")
            #expect(try await store.load(key) == Data("kept".utf8))
            try await store.save(Data("kept-2".utf8), for: key)
            #expect(try await store.load(key) == Data("kept-2".utf8))
        }
    }
}


/// The saves that returned, from several tasks.
final class Acknowledged: Sendable {
    let numbers = Mutex<[Int]>([])
    /// Set once the server's restart is over.
    let restarted = Mutex(false)
}
#endif
