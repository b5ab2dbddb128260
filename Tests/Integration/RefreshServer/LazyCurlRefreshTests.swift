#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

/// The control of vaultTests' LazyLibraryTests: the `vault` that maps no libcurl for a file-vault
/// `get` does open it for a refresh that really happens, against the real authlib server. The
/// loader says what it mapped (LD_DEBUG=files), so the test sees the process, not `ldd`.
@Suite struct LazyCurlRefreshTests {
    private static func loaded(_ result: CLIResult) -> [String] {
        result.stderr.split(separator: "\n").compactMap { line in
            guard let range = line.range(of: "file=") else { return nil }
            return String(line[range.upperBound...].prefix { $0 != " " && $0 != "\t" && $0 != "[" })
        }
    }

    @Test func aRealRefreshLoadsLibcurlAndAFreshGetDoesNot() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("lazy-curl")
        let sandbox = try CLISandbox()
        let token = try await server.login(user: user)
        let response = try JSONSerialization.data(withJSONObject: [
            "access_token": token.accessToken, "token_type": token.tokenType, "expires_in": 3600,
            "refresh_token": try #require(token.refreshToken),
        ])
        let tokenURL = server.url.appendingPathComponent("token").absoluteString
        let set = try sandbox.run(
            "vault", ["set", "api", user, "--token-url", tokenURL, "--client-id", TestOAuthServer.clientID] + sandbox.fileVault,
            stdin: response)
        #expect(set.status == 0, "\(set.stderr)")

        let debug = ["LD_DEBUG": "files"]
        let fresh = try sandbox.run("vault", ["get", "api", user, "--fresh"] + sandbox.fileVault, environment: debug)
        #expect(fresh.status == 0, "\(fresh.stderr.suffix(400))")
        #expect(fresh.stdout.contains(token.accessToken), "a fresh token is printed as stored")
        #expect(!Self.loaded(fresh).contains { $0.contains("libcurl") }, "a fresh token needed no request, yet libcurl was mapped")
        #expect(try await server.stats(user: user).refreshRequests == 0)

        let refresh = try sandbox.run("vault", ["refresh", "api", user] + sandbox.fileVault, environment: debug)
        #expect(refresh.status == 0, "\(refresh.stderr.suffix(400))")
        #expect(Self.loaded(refresh).contains { $0.contains("libcurl.so.4") }, "libcurl was not loaded: \(Self.loaded(refresh).suffix(20))")
        #expect(try await server.stats(user: user).refreshRequests == 1)
    }
}
#endif
