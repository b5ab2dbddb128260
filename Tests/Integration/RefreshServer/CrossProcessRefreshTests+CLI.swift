#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
// @testable only for RefreshLockDirectory: the test holds the documented lock file itself.
@testable import TokenVault

import Glibc

/// `vault get --fresh`, `vault refresh`, `vault set --token-url` and `vault login`, run as the
/// built binary against the real authlib server. Part of the serialized cross-process suite, so
/// that its eight processes never share the test keyring with another many-process test.
extension RefreshCrossProcessTests {
    /// Runs `vault` with `arguments` and waits for it; stdin from `input` if given.
    private func run(
        _ scratch: VaultScratch, _ arguments: [String], store: SharedStore = .encryptedFile, input: Data? = nil, label: String
    ) async throws -> (status: Int32, stdout: String, stderr: String) {
        let child = try HelperProcess("vault", arguments: arguments, environment: scratch.environment(store), outputPath: scratch.path("\(label).out"))
        if let input {
            let path = scratch.path("\(label).in")
            try input.write(to: URL(fileURLWithPath: path))
            child.process.standardInput = FileHandle(forReadingAtPath: path)
        }
        try child.start()
        let status = try await child.wait(bound: .seconds(60))
        return (status, child.output, child.errorOutput)
    }

    /// The token response a login gives, as `vault set` reads it on stdin.
    private func response(_ token: OAuthToken) throws -> Data {
        var fields: [String: Any] = ["access_token": token.accessToken, "token_type": token.tokenType, "expires_in": 3600]
        if let refreshToken = token.refreshToken { fields["refresh_token"] = refreshToken }
        return try JSONSerialization.data(withJSONObject: fields)
    }

    /// The pids whose open files include `path`, from /proc.
    private func holders(of path: String, among pids: [Int32]) -> Set<Int32> {
        var found = Set<Int32>()
        for pid in pids {
            let directory = "/proc/\(pid)/fd"
            guard let entries = try? FileManager.default.contentsOfDirectory(atPath: directory) else { continue }
            for entry in entries where (try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/\(entry)")) == path {
                found.insert(pid)
            }
        }
        return found
    }

    @Test(arguments: SharedStore.allCases)
    func eightGetFreshProcessesAtOnceShareOneRefresh(_ store: SharedStore) async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("cli-fresh")
        let key = try CredentialKey(service: uniqueName("tv-cli"), account: "acct")
        try await withVault(store, services: [key.service]) { scratch, vault in
            var token = try await server.login(user: user)
            token.expiresAt = Date().addingTimeInterval(-5)
            try await vault.saveToken(token, for: key, registration: try server.publicClient())

            // Hold the key's lock so that all eight meet at it; let go once each has opened it.
            let lockFile = try scratch.lockFile(store, for: key)
            let descriptor = open(lockFile, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            try #require(descriptor >= 0 && flock(descriptor, LOCK_EX) == 0)
            var released = false
            defer { if !released { close(descriptor) } }
            var children: [HelperProcess] = []
            for index in 0..<8 {
                let child = try HelperProcess(
                    "vault", arguments: ["get", key.service, key.account, "--fresh"], environment: scratch.environment(store),
                    outputPath: scratch.path("get-\(index).out"))
                try child.start()
                children.append(child)
            }
            let pids = children.map(\.process.processIdentifier)
            try await eventually("all eight processes waiting on the key's lock") { holders(of: lockFile, among: pids).count == 8 }
            close(descriptor)
            released = true

            var printed: [String] = []
            for child in children {
                let status = try await child.wait(bound: .seconds(60))
                #expect(status == 0, "vault get --fresh exited \(status): \(child.errorOutput)")
                printed.append(child.output)
            }
            let stored = try #require(try await vault.token(for: key))
            #expect(stored.accessToken != token.accessToken)
            #expect(Set(printed) == ["\(stored.accessToken)\n"], "all eight printed the one new token")
            let stats = try await server.stats(user: user)
            #expect(stats.refreshRequests == 1)
            #expect(stats.reuseDetected == 0)
        }
    }

    @Test func theClientSecretNeverShows() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("cli-secret")
        let key = try CredentialKey(service: uniqueName("tv-cli"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let secretFile = scratch.path("client.secret")
            #expect(FileManager.default.createFile(
                atPath: secretFile, contents: Data("\(TestOAuthServer.confidentialSecret)\n".utf8), attributes: [.posixPermissions: 0o600]))
            let wrongFile = scratch.path("wrong.secret")
            let wrong = "tv-wrong-secret-0a0b0c0d"
            #expect(FileManager.default.createFile(atPath: wrongFile, contents: Data(wrong.utf8), attributes: [.posixPermissions: 0o600]))
            let token = try await server.login(user: user, confidential: true)
            let tokenURL = server.url.appendingPathComponent("token").absoluteString
            let setArguments = [
                "set", key.service, key.account, "--token-url", tokenURL, "--client-id", TestOAuthServer.confidentialClientID,
                "--client-secret-file", secretFile,
            ]
            var transcript: [(String, [String])] = []
            let set = try await run(scratch, setArguments, input: try response(token), label: "set")
            #expect(set.status == 0, "\(set.stderr)")
            transcript.append((set.stdout + set.stderr, setArguments))

            for (label, arguments) in [
                ("list", ["list"]), ("list-json", ["list", "--json"]), ("status", ["status"]),
                ("get-json", ["get", key.service, key.account, "--json"]), ("refresh", ["refresh", key.service, key.account]),
                ("get-fresh", ["get", key.service, key.account, "--fresh"]),
            ] {
                let result = try await run(scratch, arguments, label: label)
                #expect(result.status == 0, "\(label): \(result.stderr)")
                transcript.append((result.stdout + result.stderr, arguments))
            }
            // The refresh authenticated with the secret from the file: the server issued a new token.
            #expect(try await vault.token(for: key)?.accessToken != token.accessToken)
            #expect(try await vault.registration(for: key)?.clientAuthentication.method == "client_secret_basic")

            // A wrong secret: a configuration error that names invalid_client and neither secret.
            let setWrong = setArguments.map { $0 == secretFile ? wrongFile : $0 }
            let reset = try await run(scratch, setWrong, input: try response(try await server.login(user: user, confidential: true)), label: "set-wrong")
            #expect(reset.status == 0)
            let refused = try await run(scratch, ["refresh", key.service, key.account], label: "refused")
            #expect(refused.status == 1)
            #expect(refused.stderr.contains("invalid_client"), "\(refused.stderr)")
            transcript.append((refused.stdout + refused.stderr, ["refresh"]))
            transcript.append((reset.stdout + reset.stderr, setWrong))

            for (output, arguments) in transcript {
                for secret in [TestOAuthServer.confidentialSecret, wrong] {
                    #expect(!output.contains(secret), "the client secret shows in the output of vault \(arguments.first ?? "")")
                    #expect(!arguments.contains { $0.contains(secret) }, "the client secret is in argv")
                }
            }
            // Nor is it in the vault file in the clear.
            let file = try Data(contentsOf: URL(fileURLWithPath: scratch.vaultPath))
            #expect(file.range(of: Data(wrong.utf8)) == nil && file.range(of: Data(TestOAuthServer.confidentialSecret.utf8)) == nil)
        }
    }

    @Test func exitCodesForReauthenticationNetworkFailureAndPlainHTTP() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("cli-exit")
        let key = try CredentialKey(service: uniqueName("tv-cli"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            // A rejected refresh token: exit 7, and the advice to log in again.
            let token = try await server.login(user: user)
            try await vault.saveToken(token, for: key, registration: try server.publicClient())
            try await server.spendRefreshToken(of: token)
            let rejected = try await run(scratch, ["refresh", key.service, key.account], label: "rejected")
            #expect(rejected.status == 7, "\(rejected.stderr)")
            #expect(rejected.stderr.contains("log in again"))
            #expect(!rejected.stderr.contains(try #require(token.refreshToken)))

            // An endpoint that refuses connections: exit 6 with the reason, after the retries.
            let dead = try ClientRegistration(tokenEndpoint: try #require(URL(string: "http://127.0.0.1:1/token")), clientID: "c")
            var expired = token
            expired.expiresAt = Date().addingTimeInterval(-5)
            try await vault.saveToken(expired, for: key, registration: dead)
            let unreachable = try await run(scratch, ["get", key.service, key.account, "--fresh"], label: "unreachable")
            #expect(unreachable.status == 6, "\(unreachable.stderr)")
            #expect(unreachable.stderr.contains("refused") && unreachable.stderr.contains("3 time(s)"), "\(unreachable.stderr)")
            #expect(unreachable.stdout.isEmpty)

            // Without a registration, --fresh behaves as get does: expired is exit 3. (saveToken(_:for:)
            // would keep the registration; dropping it is explicit.)
            try await vault.saveToken(expired, for: key, registration: nil)
            let plain = try await run(scratch, ["get", key.service, key.account, "--fresh"], label: "plain")
            #expect(plain.status == 3, "\(plain.stderr)")

            // A plain-http token endpoint off loopback is refused, and nothing is stored.
            let before = try await vault.store.load(key)
            let insecure = try await run(
                scratch, ["set", key.service, key.account, "--token-url", "http://auth.example.com/token", "--client-id", "c"],
                input: try response(token), label: "insecure")
            #expect(insecure.status == 1, "\(insecure.stderr)")
            #expect(insecure.stderr.contains("https"))
            #expect(try await vault.store.load(key) == before)
        }
    }

    @Test func loginWithTheDeviceGrantStoresARefreshableToken() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("cli-device")
        let key = try CredentialKey(service: uniqueName("tv-cli"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let child = try HelperProcess(
                "vault",
                arguments: [
                    "login", key.service, key.account, "--token-url", server.url.appendingPathComponent("token").absoluteString,
                    "--client-id", TestOAuthServer.clientID, "--device-url",
                    server.url.appendingPathComponent("device_authorization").absoluteString,
                ],
                environment: scratch.environment(.encryptedFile), outputPath: scratch.path("login.out"))
            try child.start()
            defer { if child.process.isRunning { child.kill9() } }
            var userCode = ""
            try await eventually("vault login printing the user code") {
                guard let line = child.errorOutput.split(separator: "\n").first(where: { $0.contains("enter the code: ") }) else { return false }
                userCode = String(line.split(separator: " ").last ?? "")
                return true
            }
            #expect(child.errorOutput.contains(server.url.appendingPathComponent("device").absoluteString))
            try await server.approveDevice(userCode: userCode, as: user)
            let status = try await child.wait(bound: .seconds(60))
            #expect(status == 0, "\(child.errorOutput)")
            #expect(child.output.isEmpty, "login prints nothing on stdout")
            let stored = try #require(try await vault.token(for: key))
            #expect(try await server.user(for: stored) == user)
            #expect(try await vault.registration(for: key) == (try server.publicClient()))
            let refreshed = try await run(scratch, ["refresh", key.service, key.account], label: "refresh")
            #expect(refreshed.status == 0, "\(refreshed.stderr)")
        }
    }

    @Test func loginWithTheCodeGrantInABrowser() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("cli-code")
        let key = try CredentialKey(service: uniqueName("tv-cli"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let child = try HelperProcess(
                "vault",
                arguments: [
                    "login", key.service, key.account, "--token-url", server.url.appendingPathComponent("token").absoluteString,
                    "--client-id", TestOAuthServer.clientID, "--authorize-url",
                    server.url.appendingPathComponent("authorize").absoluteString, "--timeout", "60",
                ],
                environment: scratch.environment(.encryptedFile), outputPath: scratch.path("login.out"))
            try child.start()
            defer { if child.process.isRunning { child.kill9() } }
            var authorizationURL: URL?
            try await eventually("vault login printing the URL") {
                authorizationURL = child.errorOutput.split(separator: "\n")
                    .first { $0.hasPrefix(server.url.appendingPathComponent("authorize").absoluteString) }
                    .flatMap { URL(string: String($0)) }
                return authorizationURL != nil
            }
            #expect(!child.errorOutput.contains("xdg-open"), "no display in the tests: no browser is started")
            try await server.browse(try #require(authorizationURL), as: user)
            let status = try await child.wait(bound: .seconds(60))
            #expect(status == 0, "\(child.errorOutput)")
            let stored = try #require(try await vault.token(for: key))
            #expect(try await server.user(for: stored) == user)
        }
    }
}
#endif
