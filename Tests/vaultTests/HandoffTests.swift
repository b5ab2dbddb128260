#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

import Glibc

/// `vault` is built without the PostgreSQL backend (postgres-nio, NIO, BoringSSL), so that its
/// file and Secret Service commands start without them (issue 17), and without swift-crypto and
/// jwt-kit, whose conformance records alone cost a cold `vault get` 19 % more instructions
/// (issue 32). A command that needs one of them replaces the process with `vault-full`. The
/// PostgreSQL suites (Tests/Integration/Postgres) and DPoPServerTests run every verb through that
/// handoff against a real cluster and a real DPoP verifier; these tests check the parts that need
/// neither.
@Suite struct HandoffTests {
    /// The vault binary holds no PostgresNIO, swift-crypto or jwt-kit code: its Swift symbols,
    /// which name their module, never name them; vault-full's do (the control).
    @Test func vaultHoldsNoPostgresNIOCryptoOrJWTKitButVaultFullDoes() throws {
        let vault = try Data(contentsOf: URL(fileURLWithPath: Products.executable("vault")), options: .alwaysMapped)
        let full = try Data(contentsOf: URL(fileURLWithPath: Products.executable("vault-full")), options: .alwaysMapped)
        for module in ["PostgresNIO", "Crypto", "JWTKit"] {
            // A mangled symbol names a module as its length and name, followed by a type's.
            let marker = Data("\(module.count)\(module)".utf8)
            #expect(full.range(of: marker) != nil, "the control failed: vault-full names no \(module) symbol")
            #expect(vault.range(of: marker) == nil, "vault links \(module)")
        }
    }

    /// A `vault` installed without `vault-full`: `login`, `agent` and `rotate-dpop-key`, which may
    /// sign a DPoP proof or verify an ID token, fail with exit 6 before anything is read or sent,
    /// and say what to install or build; `get`, `list` and `set` work.
    @Test func withoutVaultFullTheCommandsThatNeedItSayWhatIsMissing() throws {
        let sandbox = try CLISandbox()
        let alone = try TemporaryDirectory()
        let copy = alone.file("vault")
        try FileManager.default.copyItem(atPath: try Products.executable("vault"), toPath: copy)
        let key = ["--file", sandbox.vaultFile.path, "--key-file", sandbox.keyFile.path]
        let set = try ChildProcess.run(copy, ["set", "github"] + key, environment: sandbox.environment, stdin: Data("gho_alone1\n".utf8))
        #expect(set.status == 0, "\(set.stderr)")
        let commands: [(String, [String])] = [
            ("login", ["login", "github", "--token-url", "http://127.0.0.1:9/token", "--client-id", "c", "--device-url", "http://127.0.0.1:9/device"]),
            ("agent", ["agent"]),
            ("rotate-dpop-key", ["rotate-dpop-key", "github"]),
        ]
        for (name, arguments) in commands {
            let result = try ChildProcess.run(copy, arguments + key, environment: sandbox.environment, stdin: Data())
            #expect(result.status == 6, "\(name): exit \(result.status): \(result.stderr)")
            #expect(result.stderr.contains("`vault \(name)` is served by a separate program, vault-full"), "\(name): \(result.stderr)")
            #expect(result.stderr.contains("swift build --traits CLI --product vault-full"), "\(name): \(result.stderr)")
        }
        let get = try ChildProcess.run(copy, ["get", "github"] + key, environment: sandbox.environment, stdin: Data())
        #expect(get.status == 0 && String(decoding: get.stdout, as: UTF8.self) == "gho_alone1\n", "\(get.stderr)")
    }

    /// Each way of naming the backend reaches vault-full, whose own check of the database URL
    /// answers (naming TOKEN_VAULT_DATABASE_URL); a file-vault command answers itself.
    @Test func everyWayOfNamingPostgresReachesVaultFull() throws {
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
            #expect(result.stderr.contains("TOKEN_VAULT_DATABASE_URL"), "\(arguments) did not reach vault-full: \(result)")
            #expect(!result.stderr.contains("vault-full"), "\(arguments): \(result)")
        }
        // A file-vault command never execs: it answers itself.
        let file = try sandbox.vault("list")
        #expect(file.status == 0 && !file.stderr.contains("TOKEN_VAULT_DATABASE_URL"), "\(file)")
    }

    /// A `vault` installed without `vault-full`: a postgres command fails with exit 6 and says
    /// what to install or build; other commands work.
    @Test func withoutVaultFullAPostgresCommandSaysWhatIsMissing() throws {
        let sandbox = try CLISandbox()
        let alone = try TemporaryDirectory()
        let copy = alone.file("vault")
        try FileManager.default.copyItem(atPath: try Products.executable("vault"), toPath: copy)
        let result = try ChildProcess.run(
            copy, ["--backend", "postgres", "list", "--key-file", sandbox.keyFile.path], environment: sandbox.environment, stdin: Data())
        #expect(result.status == 6, "exit \(result.status): \(result.stderr)")
        #expect(result.stderr.contains("vault-full") && result.stderr.contains("The postgres backend is served by a separate program, vault-full") && result.stderr.contains("swift build --traits CLI --product vault-full"), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        let version = try ChildProcess.run(copy, ["--version"], environment: sandbox.environment, stdin: Data())
        #expect(version.status == 0, "\(version.stderr)")
    }
}
#endif
