#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
import TokenVaultPostgres

/// The throwaway cluster that Scripts/test starts (Scripts/postgres/cluster): a loopback port
/// with TLS (a throwaway CA), a superuser reached only through the script, and a test user whose
/// password is in a private file. Each test gets a database of its own.
struct TestPostgres: Sendable {
    let directory: String
    let host: String
    let port: Int
    let user: String
    let caFile: String
    let passwordFile: String

    /// The running cluster, or a failed test that says how to get one. Never a silent skip.
    static func require() throws -> TestPostgres {
        let environment = ProcessInfo.processInfo.environment
        let directory = try #require(
            environment["TOKENVAULT_TEST_POSTGRES_DIR"].flatMap { $0.isEmpty ? nil : $0 },
            "TOKENVAULT_TEST_POSTGRES_DIR is not set: these tests need the test PostgreSQL cluster. Run them with Scripts/test (e.g. Scripts/test --filter Postgres).")
        return TestPostgres(
            directory: directory,
            host: try #require(environment["TOKENVAULT_TEST_DATABASE_HOST"]),
            port: try #require(environment["TOKENVAULT_TEST_DATABASE_PORT"].flatMap(Int.init)),
            user: try #require(environment["TOKENVAULT_TEST_DATABASE_USER"]),
            caFile: try #require(environment["TOKENVAULT_TEST_DATABASE_CA"]),
            passwordFile: try #require(environment["TOKENVAULT_TEST_DATABASE_PASSWORD_FILE"]))
    }

    /// Runs Scripts/postgres/cluster with `arguments` after the command and the directory.
    @discardableResult
    func control(_ command: String, _ arguments: [String] = []) throws -> String {
        let result = try ChildProcess.run(
            PackageFiles.path("Scripts/postgres/cluster"), [command, directory] + arguments,
            environment: ["PATH": "/usr/bin:/bin:/usr/sbin:/sbin"])
        guard result.status == 0 else {
            throw SetupFailure("cluster \(command) failed (\(result.status)): \(result.stderr)")
        }
        return String(decoding: result.stdout, as: UTF8.self)
    }

    /// A new, empty database owned by the test user.
    func freshDatabase() throws -> String {
        let name = "tv_" + UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: "")
        try control("createdb", [name])
        return name
    }

    /// SQL run as the cluster's superuser; rows as `|`-separated lines.
    @discardableResult
    func sql(_ database: String, _ statement: String) throws -> String {
        try control("psql", [database, statement]).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func url(_ database: String, sslmode: String = "verify-full", host: String? = nil, port: Int? = nil) -> String {
        "postgres://\(user)@\(host ?? self.host):\(port ?? self.port)/\(database)?sslmode=\(sslmode)&sslrootcert=\(caFile)"
    }

    func configuration(_ database: String, sslmode: String = "verify-full") throws -> PostgresStore.Configuration {
        try PostgresStore.Configuration(url: url(database, sslmode: sslmode), passwordFile: passwordFile)
    }

    /// The environment a `vault` or helper process needs for `database` (and nothing of this process's).
    func environment(_ database: String, keyFile: String) -> [String: String] {
        [
            "PATH": "/usr/bin:/bin", "TOKEN_VAULT_BACKEND": "postgres", "TOKEN_VAULT_DATABASE_URL": url(database),
            "TOKEN_VAULT_DATABASE_PASSWORD_FILE": passwordFile, "TOKEN_VAULT_KEY_FILE": keyFile,
        ].merging(Products.sanitizerEnvironment) { $1 }
    }

    /// Quick options for tests: the cheapest Argon2id, short bounds.
    static let testOptions = PostgresStore.Options(operationTimeout: .seconds(20), kdf: .minimum)

    func open(
        _ database: String, keySource: VaultConfiguration.KeySource, sslmode: String = "verify-full",
        options: PostgresStore.Options = TestPostgres.testOptions
    ) async throws -> PostgresStore {
        try await PostgresStore.open(try configuration(database, sslmode: sslmode), keySource: keySource, options: options)
    }
}

/// All PostgreSQL tests share one cluster, and some restart it or end its backends: they run one
/// at a time (the suites below are nested in this serialized one).
@Suite(.serialized) struct PostgresTests {}
#endif
