#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Synchronization
import Testing
@testable import TokenVaultTestSupport
import TokenVault

#if canImport(Glibc)
import Glibc
#endif

/// Issue 34, point 4: plain http is allowed only where nothing leaves the machine, so a loopback
/// token endpoint is never reached through a proxy, whatever `http_proxy` says. A real listener
/// stands in the proxy's place and records every connection it gets; `vault refresh` runs against
/// the real authlib server on 127.0.0.1 (and as `localhost`).
@Suite struct LoopbackProxyTests {
    /// A TCP listener on 127.0.0.1 that counts connections and answers each with 502, as a proxy
    /// that cannot reach the target would. Before the fix, curl sent the refresh (refresh token in
    /// the body, client secret in Basic auth) here.
    final class RecordingProxy: @unchecked Sendable {
        let port: UInt16
        private let descriptor: Int32
        private let accepted = Mutex(0)
        private let done = AsyncStream<Void>.makeStream()

        init() throws {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            try #require(fd >= 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            try #require(bound == 0 && listen(fd, 16) == 0)
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            port = UInt16(bigEndian: address.sin_port)
            descriptor = fd
            let continuation = done.continuation
            Thread { [self] in
                while true {
                    let connection = accept(fd, nil, nil)
                    if connection < 0 {
                        if errno == EINTR { continue }
                        break
                    }
                    self.accepted.withLock { $0 += 1 }
                    let answer = Array("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8)
                    _ = answer.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    close(connection)
                }
                continuation.finish()
            }.start()
        }

        var connections: Int { accepted.withLock { $0 } }

        /// Stops the accept loop and waits for its thread to end.
        func stop() async {
            shutdown(descriptor, Int32(SHUT_RDWR))
            for await _ in done.stream {}
            close(descriptor)
        }
    }

    @Test(arguments: ["127.0.0.1", "localhost"])
    func aLoopbackRefreshNeverGoesThroughTheProxy(_ host: String) async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("proxy")
        let key = try CredentialKey(service: uniqueName("tv-proxy"), account: "acct")
        let proxy = try RecordingProxy()
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            var components = try #require(URLComponents(url: server.url.appendingPathComponent("token"), resolvingAgainstBaseURL: false))
            components.host = host
            let endpoint = try #require(components.url)
            let login = try await server.login(user: user, confidential: true)
            let description = try ClientRegistration(
                tokenEndpoint: endpoint, clientID: TestOAuthServer.confidentialClientID,
                clientAuthentication: .clientSecretBasic(TestOAuthServer.confidentialSecret))
            try await vault.saveToken(login, for: key, registration: description)

            var environment = scratch.environment(.encryptedFile)
            for name in ["no_proxy", "NO_PROXY"] { environment.removeValue(forKey: name) }
            for name in ["http_proxy", "https_proxy", "all_proxy", "ALL_PROXY", "HTTPS_PROXY"] {
                environment[name] = "http://127.0.0.1:\(proxy.port)"
            }
            let child = try HelperProcess(
                "vault", arguments: ["refresh", key.service, key.account], environment: environment, outputPath: scratch.path("refresh.out"))
            try child.start()
            let status = try await child.wait(bound: .seconds(120))
            #expect(proxy.connections == 0, "the loopback refresh went to the proxy \(proxy.connections) time(s)")
            #expect(status == 0, "\(child.errorOutput)")
            #expect(try await vault.token(for: key)?.accessToken != login.accessToken)
            #expect(try await server.stats(user: user).refreshSucceeded == 1)
        }
        await proxy.stop()
    }
}
#endif
