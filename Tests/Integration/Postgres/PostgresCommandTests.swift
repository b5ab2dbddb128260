#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
import TokenVaultPostgres

extension PostgresTests {
    /// The `vault` command with `--backend postgres` (and TOKEN_VAULT_BACKEND=postgres): every
    /// verb, status, copy between backends, and the exit codes.
    @Suite struct Command {
        private func setUp() throws -> (TestPostgres, CLISandbox, String, [String: String]) {
            let postgres = try TestPostgres.require()
            let sandbox = try CLISandbox()
            let database = try postgres.freshDatabase()
            var environment = postgres.environment(database, keyFile: sandbox.keyFile.path)
            environment["TOKEN_VAULT_BACKEND"] = nil
            return (postgres, sandbox, database, environment)
        }

        private func vault(_ sandbox: CLISandbox, _ environment: [String: String], _ arguments: [String], stdin: String = "") throws -> CLIResult {
            try sandbox.run("vault", arguments, stdin: Data(stdin.utf8), environment: environment)
        }

        @Test func everyVerbWorksWithBackendPostgres() throws {
            let (postgres, sandbox, database, environment) = try setUp()
            let pg = ["--backend", "postgres"]
            // A read-only command on a database with no vault yet: nothing found, nothing created.
            var result = try vault(sandbox, environment, ["get", "svc", "acct"] + pg)
            #expect(result.status == 2, "\(result)")
            #expect(try postgres.sql(database, "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'tokenvault%'") == "0")

            result = try vault(sandbox, environment, ["set", "svc", "acct", "--expires-in", "3600"] + pg, stdin: "pg-cli-access-token\n")
            #expect(result.status == 0, "\(result)")
            result = try vault(sandbox, environment, ["get", "svc", "acct"] + pg)
            #expect(result.status == 0, "\(result)")
            #expect(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "pg-cli-access-token")
            // The environment names the backend just as well.
            var byEnvironment = environment
            byEnvironment["TOKEN_VAULT_BACKEND"] = "postgres"
            result = try vault(sandbox, byEnvironment, ["list"])
            #expect(result.status == 0 && result.stdout.contains("svc"), "\(result)")

            result = try vault(sandbox, environment, ["status"] + pg)
            #expect(result.status == 0, "\(result)")
            for expected in ["postgres", "PostgreSQL 1", "TLSv1.", "schema version:", "entries:"] {
                #expect(result.stdout.contains(expected), "status lacks \(expected): \(result.stdout)")
            }
            #expect(!result.stdout.contains(try String(contentsOfFile: postgres.passwordFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
            result = try vault(sandbox, environment, ["status", "--json"] + pg)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
            #expect(object["entries"] as? Int == 1)
            #expect((object["database"] as? [String: Any])?["schema_version"] as? Int == 2)
            // The refresh counts, as for the file vault: one token, stored without a refresh token.
            let refresh = try #require(object["refresh"] as? [String: Int], "status --json has no refresh counts: \(result.stdout)")
            #expect(refresh["tokens"] == 1 && refresh["self"] == 0, "\(refresh)")
            result = try vault(sandbox, environment, ["status"] + pg)
            #expect(result.stdout.contains("refresh:") && result.stdout.contains("automatic for 0 of 1 token"), "\(result.stdout)")

            // The read cache, asked for by the environment, reads the same; a bad value is a clear error.
            var cached = environment
            cached["TOKEN_VAULT_DATABASE_CACHE"] = "1"
            result = try vault(sandbox, cached, ["get", "svc", "acct"] + pg)
            #expect(result.status == 0 && result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "pg-cli-access-token", "\(result)")
            cached["TOKEN_VAULT_DATABASE_CACHE"] = "sometimes"
            result = try vault(sandbox, cached, ["get", "svc", "acct"] + pg)
            #expect(result.status == 1 && result.stderr.contains("TOKEN_VAULT_DATABASE_CACHE"), "\(result)")
            #expect(!result.stderr.contains("Fatal error"), "\(result.stderr)")

            result = try vault(sandbox, environment, ["delete", "svc", "acct"] + pg)
            #expect(result.status == 0, "\(result)")
            result = try vault(sandbox, environment, ["get", "svc", "acct"] + pg)
            #expect(result.status == 2, "\(result)")
        }

        @Test func exitCodesOfTheDatabase() throws {
            let (postgres, sandbox, database, environment) = try setUp()
            let pg = ["--backend", "postgres"]
            #expect(try vault(sandbox, environment, ["set", "svc", "--expires-in", "60"] + pg, stdin: "token\n").status == 0)
            // Wrong key: 4.
            let other = sandbox.root.appendingPathComponent("other.key")
            try CLISandbox.writeKeyFile(other)
            var result = try vault(sandbox, environment, ["get", "svc", "--key-file", other.path] + pg)
            #expect(result.status == 4, "\(result)")
            // Tampered row: 5.
            try postgres.sql(database, "UPDATE tokenvault_entries SET sealed = set_byte(sealed, 40, get_byte(sealed, 40) # 4)")
            result = try vault(sandbox, environment, ["get", "svc"] + pg)
            #expect(result.status == 5, "\(result)")
            // Unreachable: 6, quickly, no hang, no stack trace.
            var down = environment
            down["TOKEN_VAULT_DATABASE_URL"] = "postgres://tokenvault@127.0.0.1:9/x?sslmode=disable"
            result = try vault(sandbox, down, ["get", "svc"] + pg)
            #expect(result.status == 6, "\(result)")
            #expect(!result.stderr.contains("Fatal error") && result.stderr.count < 600, "\(result.stderr)")
            // No URL: 6, saying what to set.
            var none = environment
            none["TOKEN_VAULT_DATABASE_URL"] = nil
            result = try vault(sandbox, none, ["get", "svc"] + pg)
            #expect(result.status == 6 && result.stderr.contains("TOKEN_VAULT_DATABASE_URL"), "\(result)")
            // sslmode=disable off loopback: refused before connecting.
            var plain = environment
            plain["TOKEN_VAULT_DATABASE_URL"] = "postgres://tokenvault@db.example.com/x?sslmode=disable"
            result = try vault(sandbox, plain, ["get", "svc"] + pg)
            #expect(result.status == 1 && result.stderr.contains("loopback"), "\(result)")
        }

        @Test func copyMovesAFileVaultIntoTheDatabaseAndBackAllOrNothing() throws {
            let (postgres, sandbox, database, environment) = try setUp()
            let file = ["--file", sandbox.vaultFile.path, "--key-file", sandbox.keyFile.path]
            for (service, token) in [("alpha", "tok-a"), ("beta", "tok-b"), ("gamma", "tok-c")] {
                let result = try vault(sandbox, environment, ["set", service, "--expires-in", "600", "--backend", "file"] + file, stdin: token + "\n")
                #expect(result.status == 0, "\(result)")
            }
            let before = try Data(contentsOf: sandbox.vaultFile)
            var result = try vault(sandbox, environment, ["copy", "--from", "file", "--to", "postgres"] + file)
            #expect(result.status == 0, "\(result)")
            #expect(try Data(contentsOf: sandbox.vaultFile) == before, "the source is untouched")
            #expect(try postgres.sql(database, "SELECT count(*) FROM tokenvault_entries") == "3")
            result = try vault(sandbox, environment, ["get", "beta", "--backend", "postgres"] + file)
            #expect(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "tok-b", "\(result)")
            // Again: nothing to do.
            result = try vault(sandbox, environment, ["copy", "--from", "file", "--to", "postgres"] + file)
            #expect(result.status == 0 && result.stderr.contains("Copied 0"), "\(result)")

            // A different value in the destination: refused, nothing written.
            #expect(try vault(sandbox, environment, ["set", "alpha", "--expires-in", "600", "--backend", "postgres"] + file, stdin: "changed\n").status == 0)
            #expect(try vault(sandbox, environment, ["set", "delta", "--expires-in", "600", "--backend", "file"] + file, stdin: "tok-d\n").status == 0)
            result = try vault(sandbox, environment, ["copy", "--from", "file", "--to", "postgres"] + file)
            #expect(result.status == 1, "\(result)")
            #expect(try postgres.sql(database, "SELECT count(*) FROM tokenvault_entries") == "3", "all or nothing: delta was not written")

            // And back, into a new file vault with a key of its own.
            let back = sandbox.data.appendingPathComponent("back.vault")
            let backKey = sandbox.root.appendingPathComponent("back.key")
            try CLISandbox.writeKeyFile(backKey)
            result = try vault(
                sandbox, environment,
                ["copy", "--from", "postgres", "--to", "file", "--file", back.path, "--key-file", sandbox.keyFile.path, "--to-key-file", backKey.path])
            #expect(result.status == 0, "\(result)")
            result = try vault(sandbox, environment, ["list", "--backend", "file", "--file", back.path, "--key-file", backKey.path])
            #expect(["alpha", "beta", "gamma"].allSatisfy { result.stdout.contains($0) }, "\(result)")
        }
    }
}
#endif
