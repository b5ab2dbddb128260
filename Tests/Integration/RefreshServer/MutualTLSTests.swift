#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
import TokenVaultTesting

/// The built-in transport with a CA bundle and a client certificate (issue 31, point 1): the test
/// OAuth server behind Python's ssl with CERT_REQUIRED, certificates made by openssl here. A
/// refresh with the right files works; a missing client certificate, a server certificate the
/// CA bundle does not vouch for, and bad files are each a clear error.
@Suite(.timeLimit(.minutes(2))) struct MutualTLSTests {
    /// A throwaway CA, a server certificate for 127.0.0.1 and a client certificate, all from it.
    struct Certificates {
        let directory: TemporaryDirectory
        func path(_ name: String) -> String { directory.file(name) }

        init() throws {
            directory = try TemporaryDirectory()
            let d = directory.path
            try Self.openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                              "-keyout", "\(d)/ca.key", "-out", "\(d)/ca.pem", "-days", "2", "-subj", "/CN=TokenVault test CA"])
            try Data("subjectAltName=IP:127.0.0.1\n".utf8).write(to: URL(fileURLWithPath: "\(d)/san.ext"))
            for (name, subject, extensions) in [("server", "/CN=127.0.0.1", true), ("client", "/CN=tokenvault-example", false)] {
                try Self.openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                  "-keyout", "\(d)/\(name).key", "-out", "\(d)/\(name).csr", "-subj", subject])
                try Self.openssl(["x509", "-req", "-in", "\(d)/\(name).csr", "-CA", "\(d)/ca.pem", "-CAkey", "\(d)/ca.key",
                                  "-CAcreateserial", "-out", "\(d)/\(name).pem", "-days", "2"]
                                 + (extensions ? ["-extfile", "\(d)/san.ext"] : []))
                #expect(chmod("\(d)/\(name).key", 0o600) == 0)
            }
        }

        static func openssl(_ arguments: [String]) throws {
            let result = try ChildProcess.run("/usr/bin/openssl", arguments, environment: ProcessInfo.processInfo.environment)
            try #require(result.status == 0, "openssl \(arguments.first ?? ""): \(result.stderr)")
        }
    }

    /// server.py over https, requiring a client certificate from the CA; stopped by the caller.
    static func startServer(_ certificates: Certificates) async throws -> (ChildProcess, URL) {
        let python = try #require(
            ProcessInfo.processInfo.environment["TOKENVAULT_TEST_OAUTH_PYTHON"].flatMap { $0.isEmpty ? nil : $0 },
            "TOKENVAULT_TEST_OAUTH_PYTHON is not set: run these tests with Scripts/test (e.g. Scripts/test --filter MutualTLS).")
        let server = try ChildProcess(
            python,
            [PackageFiles.path("Tests/oauth-server/server.py"), "--print-port", "--expires-in", "3600",
             "--tls-cert", certificates.path("server.pem"), "--tls-key", certificates.path("server.key"),
             "--client-ca", certificates.path("ca.pem")],
            environment: ProcessInfo.processInfo.environment, output: true)
        // The server prints its port once it listens: read it (off the cooperative pool), no sleep.
        let line = try await offPool { server.readLine() }
        guard let port = line.flatMap({ Int($0) }) else {
            server.stop()
            throw ScratchFailure("the https test server did not start (printed \(line ?? "nothing"))")
        }
        return (server, try #require(URL(string: "https://127.0.0.1:\(port)")))
    }

    struct ScratchFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    @Test func aRefreshOverMutualTLSWorksAndEachMissingPieceIsAClearError() async throws {
        let certificates = try Certificates()
        let (server, url) = try await Self.startServer(certificates)
        defer { server.stop() }
        let registration = try ClientRegistration(tokenEndpoint: url.appendingPathComponent("token"), clientID: "tokenvault-example")
        let tls = try TransportTLS(
            caBundle: certificates.path("ca.pem"), clientCertificate: certificates.path("client.pem"),
            clientKey: certificates.path("client.key"))
        let client = TokenEndpointClient(initialBackoff: .milliseconds(10), tls: tls)
        let user = uniqueName("mtls")

        // A login (the password grant) and a refresh, both over mutual TLS, through the vault.
        let login = try await client.requestToken(
            [("grant_type", "password"), ("username", user), ("password", "test-password")], registration: registration)
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "mtls", account: user)
        try await vault.saveToken(login, for: key, registration: registration)
        let refreshed = try await vault.refreshToken(for: key, client: client)
        #expect(refreshed.accessToken != login.accessToken)

        // No client certificate: the server ends the handshake; said so, not retried as a lost connection.
        let noCertificate = TokenEndpointClient(initialBackoff: .milliseconds(10), tls: try TransportTLS(caBundle: certificates.path("ca.pem")))
        let refused = await #expect(throws: VaultError.self) { try await vault.refreshToken(for: key, client: noCertificate) }
        #expect(refused?.code == .networkFailure)
        #expect((refused?.underlying as? TokenTransportError)?.code == .tlsFailure, "\(String(describing: refused?.underlying))")
        #expect(refused?.message.contains("client certificate") == true, "\(refused?.message ?? "")")

        // The system's CAs do not vouch for the throwaway server certificate.
        let systemCAs = TokenEndpointClient(initialBackoff: .milliseconds(10), tls: try TransportTLS(
            clientCertificate: certificates.path("client.pem"), clientKey: certificates.path("client.key")))
        let untrusted = await #expect(throws: VaultError.self) { try await vault.refreshToken(for: key, client: systemCAs) }
        #expect((untrusted?.underlying as? TokenTransportError)?.code == .tlsFailure)
        #expect(untrusted?.message.contains("not trusted") == true, "\(untrusted?.message ?? "")")

        // Nothing above spent the refresh token: the right files still refresh.
        #expect(try await vault.refreshToken(for: key, client: client).accessToken != refreshed.accessToken)
        for error in [refused, untrusted].compactMap({ $0 }) {
            #expect(!error.message.contains(refreshed.accessToken) && !error.message.contains(refreshed.refreshToken ?? "-"))
        }
    }

    @Test func badTLSFilesAreRefusedWhereTheyAreGiven() async throws {
        let certificates = try Certificates()
        let keyAlone = #expect(throws: VaultError.self) { try TransportTLS(clientKey: certificates.path("client.key")) }
        #expect(keyAlone?.code == .invalidInput)
        let missing = #expect(throws: VaultError.self) { try TransportTLS(caBundle: certificates.path("nothing.pem")) }
        #expect(missing?.code == .invalidInput && missing?.message.contains("cannot be read") == true)
        #expect(chmod(certificates.path("client.key"), 0o644) == 0)
        let readable = #expect(throws: VaultError.self) {
            try TransportTLS(clientCertificate: certificates.path("client.pem"), clientKey: certificates.path("client.key"))
        }
        #expect(readable?.code == .insecurePermissions)
        // An app's own transport configures TLS itself: both at once is refused, before any request.
        let fake = FakeTokenEndpoint()
        let both = TokenEndpointClient(transport: fake, tls: try TransportTLS(caBundle: certificates.path("ca.pem")))
        let conflict = await #expect(throws: VaultError.self) {
            try await both.refresh(OAuthToken(accessToken: "at", refreshToken: "rt"), using: try fake.registration())
        }
        #expect(conflict?.code == .configurationError)
        #expect(await fake.requestCount == 0)
    }
}
#endif
