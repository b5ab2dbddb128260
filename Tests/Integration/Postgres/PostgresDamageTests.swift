#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
import TokenVaultPostgres

extension PostgresTests {
    /// What a database administrator can break (issue 34, points 2 and 9): every break is an
    /// integrity failure (exit 5) that changes nothing, never a new vault and never a trap.
    @Suite struct Damage {
        private func setUp() throws -> (TestPostgres, CLISandbox, String, [String: String]) {
            let postgres = try TestPostgres.require()
            let sandbox = try CLISandbox()
            let database = try postgres.freshDatabase()
            return (postgres, sandbox, database, postgres.environment(database, keyFile: sandbox.keyFile.path))
        }

        private func vault(_ sandbox: CLISandbox, _ environment: [String: String], _ arguments: [String], stdin: String = "") throws -> CLIResult {
            try sandbox.run("vault", arguments, stdin: Data(stdin.utf8), environment: environment)
        }

        /// Point 2: `DELETE FROM tokenvault_header` used to make the vault look empty (`get` exit 2,
        /// `list` exit 0, `status` 0 entries), and the next `set` wrote a new header with a new
        /// vault id, after which every old row failed to open.
        @Test func sealedRowsWithoutAHeaderAreDamageNeverANewVault() throws {
            let (postgres, sandbox, database, environment) = try setUp()
            #expect(try vault(sandbox, environment, ["set", "svc", "acct", "--expires-in", "3600"], stdin: "pg-old-token\n").status == 0)
            #expect(try vault(sandbox, environment, ["set", "other", "acct", "--expires-in", "3600"], stdin: "pg-other-token\n").status == 0)
            let rowsBefore = try postgres.sql(database, "SELECT row_hash, version, sealed FROM tokenvault_entries ORDER BY row_hash")
            try postgres.sql(database, "DELETE FROM tokenvault_header")

            for arguments in [["get", "svc", "acct"], ["list"], ["status"], ["delete", "svc", "acct"]] {
                let result = try vault(sandbox, environment, arguments)
                #expect(result.status == 5, "vault \(arguments.joined(separator: " ")): \(result)")
                #expect(result.stderr.contains("header"), "\(result.stderr)")
                #expect(!result.stderr.contains("Fatal error"), "\(result.stderr)")
            }
            let set = try vault(sandbox, environment, ["set", "svc", "acct", "--expires-in", "3600"], stdin: "pg-new-token\n")
            #expect(set.status == 5, "vault set made a new vault over the old rows: \(set)")
            #expect(try postgres.sql(database, "SELECT count(*) FROM tokenvault_header") == "0", "a new header row was written")
            #expect(
                try postgres.sql(database, "SELECT row_hash, version, sealed FROM tokenvault_entries ORDER BY row_hash") == rowsBefore,
                "the old rows changed")
        }

        /// An empty table with no header is still a vault not made yet: `set` creates it.
        @Test func anEmptyTableWithoutAHeaderIsStillANewVault() throws {
            let (postgres, sandbox, database, environment) = try setUp()
            #expect(try vault(sandbox, environment, ["set", "svc", "--expires-in", "3600"], stdin: "pg-token\n").status == 0)
            try postgres.sql(database, "DELETE FROM tokenvault_entries")
            try postgres.sql(database, "DELETE FROM tokenvault_header")
            #expect(try vault(sandbox, environment, ["get", "svc"]).status == 2)
            let set = try vault(sandbox, environment, ["set", "svc", "--expires-in", "3600"], stdin: "pg-token-2\n")
            #expect(set.status == 0, "\(set)")
            #expect(try vault(sandbox, environment, ["get", "svc"]).stdout == "pg-token-2\n")
        }

        /// Point 9: a row whose version is the 64-bit maximum made `vault set` trap (SIGILL, exit
        /// 132, registers on stderr). Arithmetic on database values never traps: it is damage.
        @Test func aRowVersionAtTheMaximumIsDamageNotATrap() async throws {
            let (postgres, sandbox, database, environment) = try setUp()
            #expect(try vault(sandbox, environment, ["set", "svc", "--expires-in", "3600"], stdin: "pg-token\n").status == 0)
            try postgres.sql(database, "UPDATE tokenvault_entries SET version = 9223372036854775807")
            let before = try postgres.sql(database, "SELECT version, sealed FROM tokenvault_entries")
            for (arguments, stdin) in [(["set", "svc", "--expires-in", "3600"], "pg-token-2\n"), (["rekey", "--new-key-file", sandbox.root.appendingPathComponent("new.key").path], "")] {
                if arguments[0] == "rekey" { try CLISandbox.writeKeyFile(sandbox.root.appendingPathComponent("new.key")) }
                let result = try vault(sandbox, environment, arguments, stdin: stdin)
                // Both open the row first (set keeps the entry's client registration), which no
                // longer authenticates for its version: damage, exit 5.
                #expect(result.status == 5, "vault \(arguments[0]): \(result)")
                #expect(!result.stderr.contains("Fatal error") && !result.stderr.contains("Stack dump"), "\(result.stderr)")
            }
            // A save that does not read first reaches the version arithmetic itself.
            let store = try await postgres.open(database, keySource: .keyFile(sandbox.keyFile.path))
            defer { store.close() }
            let error = await #expect(throws: VaultError.self) {
                try await store.save(Data("pg-token-3".utf8), for: CredentialKey(service: "svc"), contentType: .text)
            }
            #expect(error?.code == .integrityFailure && error?.message.contains("highest possible version") == true, "\(String(describing: error))")
            #expect(try postgres.sql(database, "SELECT version, sealed FROM tokenvault_entries") == before)
        }

        /// Point 11: a NULL vault_id reported after the whole 10 s bound that "the database did not
        /// answer in time": a value that does not decode was retried as a lost connection. It is
        /// damage, reported at once.
        @Test func aNullVaultIDIsDamageReportedAtOnce() throws {
            let (postgres, sandbox, database, environment) = try setUp()
            #expect(try vault(sandbox, environment, ["set", "svc", "--expires-in", "3600"], stdin: "pg-token\n").status == 0)
            try postgres.sql(database, "ALTER TABLE tokenvault_header ALTER COLUMN vault_id DROP NOT NULL")
            try postgres.sql(database, "UPDATE tokenvault_header SET vault_id = NULL")
            let clock = ContinuousClock()
            let start = clock.now
            let result = try vault(sandbox, environment, ["get", "svc"])
            let elapsed = clock.now - start
            #expect(result.status == 5, "\(result)")
            #expect(!result.stderr.contains("did not answer in time"), "\(result.stderr)")
            #expect(result.stderr.contains("vault_id"), "\(result.stderr)")
            #expect(elapsed < .seconds(5), "took \(elapsed)")
        }

        /// Point 11: a row made huge in SQL (8 MiB here; 200 MB cost a get about 650 MB) is damage,
        /// refused from its length: the server sends the length, never the row. Before, it was sent
        /// whole, and failed only once opened ("damaged or was tampered with").
        @Test func aRowLargerThanAnyTokenVaultWritesIsNotRead() throws {
            let (postgres, sandbox, database, environment) = try setUp()
            #expect(try vault(sandbox, environment, ["set", "svc", "acct", "--expires-in", "3600"], stdin: "pg-token\n").status == 0)
            #expect(try vault(sandbox, environment, ["set", "other", "acct", "--expires-in", "3600"], stdin: "pg-other\n").status == 0)
            let rows = try postgres.sql(database, "SELECT count(*) FROM tokenvault_entries")
            try #require(rows == "2")
            // One of the two rows grows past the bound (which is which, the hashes hide).
            try postgres.sql(
                database,
                "UPDATE tokenvault_entries SET sealed = sealed || decode(repeat('00', 8388608), 'hex') WHERE row_hash = (SELECT row_hash FROM tokenvault_entries ORDER BY row_hash DESC LIMIT 1)")
            var refused = 0
            for arguments in [["get", "svc", "acct"], ["get", "other", "acct"]] {
                let result = try vault(sandbox, environment, arguments)
                if result.status == 5 {
                    refused += 1
                    #expect(result.stderr.contains("more than any row TokenVault writes"), "\(result.stderr)")
                } else {
                    #expect(result.status == 0, "\(result)")
                }
                #expect(!result.stderr.contains("Fatal error"), "\(result.stderr)")
            }
            #expect(refused == 1, "the grown row is refused, the other read")
            let list = try vault(sandbox, environment, ["list"])
            #expect(list.status == 5 && list.stderr.contains("more than any row TokenVault writes"), "\(list)")
        }
    }

    /// Point 11: a wrong password or a certificate that does not verify reported after the whole
    /// 10 s bound that "the database did not answer in time" (the pool retries a failed connect in
    /// silence). Each is told at once, in its own words.
    @Suite struct Diagnostics {
        private func timed(_ sandbox: CLISandbox, _ environment: [String: String]) throws -> (CLIResult, Duration) {
            let clock = ContinuousClock()
            let start = clock.now
            let result = try sandbox.run("vault", ["get", "svc"], environment: environment)
            return (result, clock.now - start)
        }

        @Test func aWrongPasswordIsToldAtOnce() throws {
            let postgres = try TestPostgres.require()
            let sandbox = try CLISandbox()
            let database = try postgres.freshDatabase()
            var environment = postgres.environment(database, keyFile: sandbox.keyFile.path)
            let wrong = sandbox.root.appendingPathComponent("wrong-password")
            #expect(FileManager.default.createFile(atPath: wrong.path, contents: Data("tv-not-the-password-9c1d\n".utf8), attributes: [.posixPermissions: 0o600]))
            environment["TOKEN_VAULT_DATABASE_PASSWORD_FILE"] = wrong.path
            let (result, elapsed) = try timed(sandbox, environment)
            #expect(result.status == 6, "\(result)")
            #expect(result.stderr.contains("refused the login"), "\(result.stderr)")
            #expect(!result.stderr.contains("did not answer in time") && !result.stderr.contains("tv-not-the-password-9c1d"), "\(result.stderr)")
            #expect(elapsed < .seconds(5), "took \(elapsed)")
        }

        @Test func aCertificateThatDoesNotVerifyIsToldAtOnce() throws {
            let postgres = try TestPostgres.require()
            let sandbox = try CLISandbox()
            let database = try postgres.freshDatabase()
            var environment = postgres.environment(database, keyFile: sandbox.keyFile.path)
            // The system's CA bundle, which does not hold the test cluster's throwaway CA.
            let url = postgres.url(database).replacingOccurrences(of: postgres.caFile, with: "/etc/ssl/certs/ca-certificates.crt")
            try #require(url.contains("/etc/ssl/certs/ca-certificates.crt") && FileManager.default.fileExists(atPath: "/etc/ssl/certs/ca-certificates.crt"))
            environment["TOKEN_VAULT_DATABASE_URL"] = url
            let (result, elapsed) = try timed(sandbox, environment)
            #expect(result.status == 6, "\(result)")
            #expect(result.stderr.contains("TLS"), "\(result.stderr)")
            #expect(!result.stderr.contains("did not answer in time"), "\(result.stderr)")
            #expect(elapsed < .seconds(5), "took \(elapsed)")
        }
    }
}
#endif
