#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
@testable import TokenVaultPostgres

extension PostgresTests {
    /// `sslmode=verify-full` checks the URL's host against the server certificate's names as
    /// libpq does (issue 34, point 1), with libpq's own `psql` as the judge: the cluster serves
    /// certificates of the test CA with chosen names, and for each host the vault's verdict must
    /// be psql's, and both the one written here.
    @Suite struct HostNames {
        /// A certificate the cluster serves in turn: its subject CN, its subjectAltName, and the
        /// hosts it is valid for (by libpq's rules) among ``hosts``.
        struct Served: Sendable, CustomStringConvertible {
            let name: String
            let commonName: String
            let alternativeNames: String
            let validFor: Set<String>
            var description: String { "\(name) (CN \(commonName); SAN \(alternativeNames.isEmpty ? "none" : alternativeNames))" }
        }

        /// Hosts the vault can reach (they resolve to the cluster's 127.0.0.1), and names psql
        /// checks with `hostaddr=127.0.0.1` (which the vault's check sees through its function).
        static let reachable = ["localhost", "127.0.0.1"]
        static let hosts = reachable + ["127.1", "a.example.test", "A.Example.TEST", "a.b.example.test", "example.test", "db.example.test"]

        static let certificates: [Served] = [
            // The issue's case: the address, not the name. swift-nio-ssl took it for any name that
            // resolves to 127.0.0.1; libpq matches IP entries only against a host that is an address.
            Served(name: "ip-only", commonName: "TokenVault test server", alternativeNames: "IP:127.0.0.1", validFor: ["127.0.0.1", "127.1"]),
            Served(name: "dns-only", commonName: "TokenVault test server", alternativeNames: "DNS:localhost", validFor: ["localhost"]),
            // No DNS entry: libpq consults the CN for a name.
            Served(name: "ip-and-cn", commonName: "localhost", alternativeNames: "IP:127.0.0.1", validFor: ["localhost", "127.0.0.1", "127.1"]),
            // No IP entry: libpq consults the CN for an address (its documented departure from RFC 6125).
            Served(name: "dns-and-cn", commonName: "127.0.0.1", alternativeNames: "DNS:localhost", validFor: ["localhost", "127.0.0.1"]),
            Served(name: "cn-only", commonName: "localhost", alternativeNames: "", validFor: ["localhost"]),
            // A DNS entry present: the CN is never consulted for a name.
            Served(name: "cn-ignored", commonName: "localhost", alternativeNames: "DNS:db.example.test", validFor: ["db.example.test"]),
            // A wildcard stands for exactly one left-most label, in any case.
            Served(
                name: "wildcard", commonName: "TokenVault test server", alternativeNames: "DNS:*.example.test,IP:127.0.0.2",
                validFor: ["a.example.test", "A.Example.TEST", "db.example.test"]),
        ]

        @Test func verifyFullAcceptsExactlyWhatPsqlAccepts() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let keyFile = try dir.keyFile()
            let database = try postgres.freshDatabase()
            let psql = try Psql(postgres, directory: dir)
            for served in Self.certificates {
                let pem = try postgres.makeCertificate(served.name, commonName: served.commonName, alternativeNames: served.alternativeNames)
                let names = try ServerCertificateNames(der: try Self.der(pem: pem))
                try await postgres.serving(served.name) {
                    for host in Self.hosts {
                        let valid = served.validFor.contains(host)
                        let judged = try psql.verdict(host: host, database: database)
                        #expect(judged.accepted == valid, "psql, \(served), host \(host): \(judged.message)")
                        if !valid {
                            #expect(judged.message.contains("does not match host name"), "psql, \(served), host \(host): \(judged.message)")
                        }
                        let refusal = ServerNameCheck.refusal(host: host, names: names)
                        #expect((refusal == nil) == valid, "the vault's check, \(served), host \(host): \(refusal ?? "accepted")")
                        guard Self.reachable.contains(host) else { continue }
                        let configuration = try PostgresStore.Configuration(
                            url: postgres.url(database, host: host), passwordFile: postgres.passwordFile)
                        do {
                            let store = try await PostgresStore.open(configuration, keySource: .keyFile(keyFile), options: TestPostgres.testOptions)
                            store.close()
                            #expect(valid, "the vault connected to \(host) with \(served); psql: \(judged.message)")
                        } catch let error as VaultError {
                            #expect(!valid, "the vault refused \(host) with \(served): \(error.message)")
                            // Refused for the name, at once: not a refused connection retried until the deadline.
                            #expect(error.code == .backendUnavailable && error.message.contains("does not match the host name \"\(host)\""), "\(error.message)")
                        }
                    }
                }
            }
        }

        /// The issue's scenario end to end: an entry saved through the address the certificate
        /// names; then `vault get` through a name that resolves to the same server but is not in
        /// the certificate: refused with exit 6 (backend unavailable) and a message that says
        /// why, and no token on stdout; psql refuses the same URL (its exit 2).
        @Test func vaultGetRefusesANameTheCertificateDoesNotHold() async throws {
            let postgres = try TestPostgres.require()
            let sandbox = try CLISandbox()
            let dir = try TemporaryDirectory()
            let database = try postgres.freshDatabase()
            let psql = try Psql(postgres, directory: dir)
            _ = try postgres.makeCertificate("ip-only", commonName: "TokenVault test server", alternativeNames: "IP:127.0.0.1")
            try await postgres.serving("ip-only") {
                var environment = postgres.environment(database, keyFile: sandbox.keyFile.path)
                environment["TOKEN_VAULT_DATABASE_URL"] = postgres.url(database, host: "127.0.0.1")
                var result = try sandbox.run("vault", ["set", "svc", "acct"], stdin: Data("pg-host-name-token\n".utf8), environment: environment)
                #expect(result.status == 0, "\(result)")

                environment["TOKEN_VAULT_DATABASE_URL"] = postgres.url(database, host: "localhost")
                result = try sandbox.run("vault", ["get", "svc", "acct"], environment: environment)
                #expect(result.status == 6, "\(result)")
                #expect(!result.stdout.contains("pg-host-name-token") && !result.stderr.contains("pg-host-name-token"))
                #expect(
                    result.stderr.contains("the server certificate for \"127.0.0.1\" (and 1 other name) does not match the host name \"localhost\""),
                    "\(result.stderr)")
                #expect(!result.stderr.contains("did not answer in time"), "\(result.stderr)")

                let judged = try psql.verdict(host: "localhost", database: database, viaName: true)
                #expect(!judged.accepted && judged.status == 2, "psql: exit \(judged.status): \(judged.message)")
                #expect(
                    judged.message.contains("server certificate for \"127.0.0.1\" (and 1 other name) does not match host name \"localhost\""),
                    "psql: \(judged.message)")
            }
        }

        /// What openssl will not put in a certificate, checked by the function alone: libpq ends
        /// the check with a refusal at a name holding a NUL byte or an address of another length
        /// than 4 or 16 bytes; an IPv6 host is matched byte for byte; `127.1` is 127.0.0.1 (inet_aton).
        @Test func namesOpenSSLWillNotIssueAreRefusedAsLibpqRefusesThem() {
            let nul = ServerCertificateNames(alternativeNames: [.dns(Array("localhost\0.evil.test".utf8))], commonName: nil)
            #expect(ServerNameCheck.refusal(host: "localhost", names: nul)?.contains("NUL") == true)
            // The NUL ends the check even when a later name would match.
            let nulFirst = ServerCertificateNames(alternativeNames: [.dns([0x61, 0, 0x62]), .dns(Array("localhost".utf8))], commonName: nil)
            #expect(ServerNameCheck.refusal(host: "localhost", names: nulFirst) != nil)
            let oddAddress = ServerCertificateNames(alternativeNames: [.ip([127, 0, 0])], commonName: nil)
            #expect(ServerNameCheck.refusal(host: "127.0.0.1", names: oddAddress)?.contains("3 bytes") == true)
            let loopback6 = ServerCertificateNames(alternativeNames: [.ip([UInt8](repeating: 0, count: 15) + [1])], commonName: nil)
            #expect(ServerNameCheck.refusal(host: "::1", names: loopback6) == nil)
            #expect(ServerNameCheck.refusal(host: "::2", names: loopback6) != nil)
            #expect(ServerNameCheck.refusal(host: "localhost", names: loopback6) != nil)
            let none = ServerCertificateNames(alternativeNames: [], commonName: nil)
            #expect(ServerNameCheck.refusal(host: "localhost", names: none) == "the server certificate names no host")
            // What reaches the terminal from a certificate is escaped.
            let escape = ServerCertificateNames(alternativeNames: [.dns(Array("evil\u{1B}]52;c;x\u{07}".utf8))], commonName: nil)
            let message = ServerNameCheck.refusal(host: "localhost", names: escape) ?? ""
            #expect(!message.contains("\u{1B}") && message.contains("\\u{1B}"), "\(message)")
        }

        /// The DER of the one certificate in a PEM file.
        static func der(pem path: String) throws -> [UInt8] {
            let text = try String(contentsOfFile: path, encoding: .utf8)
            let body = text.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
            return [UInt8](try #require(Data(base64Encoded: body), "\(path) is not PEM"))
        }
    }
}

/// libpq's `psql`, logging in as the test user with a private password file (never argv).
struct Psql {
    let postgres: TestPostgres
    let executable: String
    let passFile: String

    init(_ postgres: TestPostgres, directory: TemporaryDirectory) throws {
        self.postgres = postgres
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        let candidates = versions.sorted { $0.compare($1, options: .numeric) == .orderedDescending }.map { "/usr/lib/postgresql/\($0)/bin/psql" }
        executable = try #require(
            (candidates + ["/usr/bin/psql"]).first { FileManager.default.isExecutableFile(atPath: $0) }, "psql is not installed")
        passFile = directory.file("pgpass")
        let password = try String(contentsOfFile: postgres.passwordFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        guard
            FileManager.default.createFile(
                atPath: passFile, contents: Data("*:*:*:\(postgres.user):\(password)\n".utf8), attributes: [.posixPermissions: 0o600])
        else { throw SetupFailure("could not write \(passFile)") }
    }

    /// Whether psql logs in to `database` with sslmode=verify-full for `host`, and what it said.
    /// With `viaName`, psql resolves `host` itself; otherwise it connects to the cluster's address
    /// and checks the certificate against `host` (libpq's `hostaddr`), so any name can be tried.
    func verdict(host: String, database: String, viaName: Bool = false) throws -> (accepted: Bool, status: Int32, message: String) {
        var parts = [
            "host=\(host)", "port=\(postgres.port)", "user=\(postgres.user)", "dbname=\(database)", "sslmode=verify-full",
            "sslrootcert=\(postgres.caFile)", "connect_timeout=10",
        ]
        if !viaName { parts.append("hostaddr=\(postgres.host)") }
        let result = try ChildProcess.run(
            executable, ["-X", "-A", "-t", "-c", "SELECT 1", parts.joined(separator: " ")],
            environment: ["PATH": "/usr/bin:/bin", "PGPASSFILE": passFile, "PGCONNECT_TIMEOUT": "10", "LC_ALL": "C"])
        let accepted = result.status == 0 && result.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines) == "1"
        return (accepted, result.status, result.stderr.trimmingCharacters(in: .whitespacesAndNewlines))
    }
}

extension TestPostgres {
    /// A server certificate from the cluster's CA (Scripts/postgres/cluster certificate); the
    /// path of a copy of it this process may read.
    func makeCertificate(_ name: String, commonName: String, alternativeNames: String) throws -> String {
        try control("certificate", [name, commonName] + (alternativeNames.isEmpty ? [] : [alternativeNames]))
        return (directory as NSString).appendingPathComponent("\(name).pem")
    }

    /// Runs `body` while the cluster presents certificate `name` to new connections, then goes
    /// back to its own, whatever `body` did.
    func serving(_ name: String, _ body: () async throws -> Void) async throws {
        try control("serve", [name])
        do {
            try await body()
        } catch {
            try control("serve", ["default"])
            throw error
        }
        try control("serve", ["default"])
    }
}
#endif
