#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

import Glibc

/// `vault` is built without the PostgreSQL backend (postgres-nio, NIO, BoringSSL), so that its
/// file and Secret Service commands start without them (issue 17); a command that names the
/// postgres backend replaces the process with `vault-postgres`. The PostgreSQL suites
/// (Tests/Integration/Postgres) run every verb through that handoff against a real cluster; these
/// tests check the parts that need no database.
@Suite struct PostgresHandoffTests {
    /// The vault binary holds no PostgresNIO code: its Swift symbols, which name their module,
    /// never name PostgresNIO; vault-postgres's do (the control).
    @Test func vaultHoldsNoPostgresNIOButVaultPostgresDoes() throws {
        let marker = Data("11PostgresNIO".utf8)
        let vault = try Data(contentsOf: URL(fileURLWithPath: Products.executable("vault")), options: .alwaysMapped)
        let postgres = try Data(contentsOf: URL(fileURLWithPath: Products.executable("vault-postgres")), options: .alwaysMapped)
        #expect(postgres.range(of: marker) != nil, "the control failed: vault-postgres names no PostgresNIO symbol")
        #expect(vault.range(of: marker) == nil, "vault links PostgresNIO")
    }

    /// Each way of naming the backend reaches vault-postgres, whose own check of the database URL
    /// answers (naming TOKEN_VAULT_DATABASE_URL); a file-vault command answers itself.
    @Test func everyWayOfNamingPostgresReachesVaultPostgres() throws {
        let sandbox = try CLISandbox()
        let key = ["--key-file", sandbox.keyFile.path]
        // A source for copy to read.
        #expect(try sandbox.vault("set", "github", stdin: Data("gho_handoff1\n".utf8)).status == 0)
        let cases: [([String], [String: String])] = [
            (["list", "--backend", "postgres"] + key, [:]),
            (["--backend", "postgres", "get", "github"] + key, [:]),
            (["--backend=postgres", "status"] + key, [:]),
            (["delete", "github"] + key, ["TOKEN_VAULT_BACKEND": "postgres"]),
            (["copy", "--from", "file", "--to", "postgres", "--file", sandbox.vaultFile.path] + key, [:]),
        ]
        for (arguments, environment) in cases {
            let result = try sandbox.run("vault", arguments, environment: environment)
            #expect(result.status != 0, "\(arguments): \(result)")
            #expect(result.stderr.contains("TOKEN_VAULT_DATABASE_URL"), "\(arguments) did not reach vault-postgres: \(result)")
            #expect(!result.stderr.contains("vault-postgres"), "\(arguments): \(result)")
        }
        // A file-vault command never execs: it answers itself.
        let file = try sandbox.vault("list")
        #expect(file.status == 0 && !file.stderr.contains("TOKEN_VAULT_DATABASE_URL"), "\(file)")
    }

    /// A `vault` installed without `vault-postgres`: a postgres command fails with exit 6 and says
    /// what to install or build; other commands work.
    @Test func withoutVaultPostgresAPostgresCommandSaysWhatIsMissing() throws {
        let sandbox = try CLISandbox()
        let alone = try TemporaryDirectory()
        let copy = alone.file("vault")
        try FileManager.default.copyItem(atPath: try Products.executable("vault"), toPath: copy)
        let result = try ChildProcess.run(
            copy, ["--backend", "postgres", "list", "--key-file", sandbox.keyFile.path], environment: sandbox.environment, stdin: Data())
        #expect(result.status == 6, "exit \(result.status): \(result.stderr)")
        #expect(result.stderr.contains("vault-postgres") && result.stderr.contains("swift build --product vault-postgres"), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        let version = try ChildProcess.run(copy, ["--version"], environment: sandbox.environment, stdin: Data())
        #expect(version.status == 0, "\(version.stderr)")
    }
}
#endif
