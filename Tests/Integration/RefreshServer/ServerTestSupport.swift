#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The authlib server that Scripts/test starts (Tests/oauth-server/server.py).
struct TestOAuthServer: Sendable {
    static let clientID = "tokenvault-example"
    static let confidentialClientID = "tokenvault-confidential"
    /// The confidential client's secret (server.py's CONFIDENTIAL_SECRET). Tests check that it
    /// never shows in output, argv or messages.
    static let confidentialSecret = "tv-confidential-secret-8d1f0c2b"

    let url: URL

    /// The running server, or a failed test that says how to get one. Never a silent skip.
    static func require() throws -> TestOAuthServer {
        let value = ProcessInfo.processInfo.environment["TOKENVAULT_TEST_OAUTH_URL"]
        let text = try #require(
            value.flatMap { $0.isEmpty ? nil : $0 },
            "TOKENVAULT_TEST_OAUTH_URL is not set: these tests need the test OAuth server. Run them with Scripts/test (e.g. Scripts/test --filter Refresh).")
        return TestOAuthServer(url: try #require(URL(string: text)))
    }

    struct Stats: Decodable, Sendable {
        var refreshRequests: Int
        var refreshSucceeded: Int
        var refreshRejected: Int
        var reuseDetected: Int
        var familiesRevoked: Int
        var tokensIssued: Int
        var deviceAuthorizations: Int
        var faultsServed: Int
        var codesIssued: Int
        /// Revocations the revocation endpoint took, and revocation requests it got (RFC 7009).
        var revocations: Int
        var revocationRequests: Int
        /// When each refresh request arrived, server time, in order.
        var refreshTimes: [Double]
        /// Spent refresh tokens accepted again within the user's reuse interval.
        var reusedWithinInterval: Int
        /// Refresh requests the server is holding now (a `hold` fault), until ``release(user:)``.
        var held: Int
        /// Requests of the resource endpoint `/api/data` with one of the user's tokens, and those it refused.
        var resourceRequests: Int
        var resourceRejected: Int

        enum CodingKeys: String, CodingKey {
            case faultsServed = "faults_served"
            case codesIssued = "codes_issued"
            case revocations
            case revocationRequests = "revocation_requests"
            case refreshTimes = "refresh_times"
            case held
            case resourceRequests = "resource_requests"
            case resourceRejected = "resource_rejected"
            case reusedWithinInterval = "reused_within_interval"
            case refreshRequests = "refresh_requests"
            case refreshSucceeded = "refresh_succeeded"
            case refreshRejected = "refresh_rejected"
            case reuseDetected = "reuse_detected"
            case familiesRevoked = "families_revoked"
            case tokensIssued = "tokens_issued"
            case deviceAuthorizations = "device_authorizations"
        }
    }

    func stats(user: String) async throws -> Stats {
        var components = try #require(URLComponents(url: url.appendingPathComponent("stats"), resolvingAgainstBaseURL: false))
        components.queryItems = [URLQueryItem(name: "user", value: user)]
        let (data, status) = try await send(URLRequest(url: try #require(components.url)))
        try #require(status == 200)
        return try JSONDecoder().decode(Stats.self, from: data)
    }

    /// The refresh description of the public client.
    func publicClient(scope: String? = nil) throws -> ClientRegistration {
        try ClientRegistration(tokenEndpoint: url.appendingPathComponent("token"), clientID: Self.clientID, scope: scope)
    }

    /// The refresh description of the confidential client, with `secret` (the right one by default).
    func confidentialClient(post: Bool = false, secret: String = TestOAuthServer.confidentialSecret) throws -> ClientRegistration {
        try ClientRegistration(
            tokenEndpoint: url.appendingPathComponent("token"), clientID: Self.confidentialClientID,
            clientAuthentication: post ? .clientSecretPost(secret) : .clientSecretBasic(secret))
    }

    /// Makes the server answer `user`'s next `count` refresh requests with a fault (server.py, /faults).
    func fault(user: String, _ kind: String, count: Int = 1, retryAfter: Int? = nil, hangSeconds: Double? = nil) async throws {
        var form = ["user": user, "kind": kind, "count": String(count)]
        if let retryAfter { form["retry_after"] = String(retryAfter) }
        if let hangSeconds { form["hang_seconds"] = String(hangSeconds) }
        let (_, status) = try await post("faults", form)
        try #require(status == 200)
    }

    /// How many times the discovery document at `path` was fetched (server.py, /discovery/stats).
    func discoveryRequests(path: String) async throws -> Int {
        var components = try #require(URLComponents(url: url.appendingPathComponent("discovery/stats"), resolvingAgainstBaseURL: false))
        components.queryItems = [URLQueryItem(name: "path", value: path)]
        let (data, status) = try await send(URLRequest(url: try #require(components.url)))
        try #require(status == 200)
        return try #require((try JSONSerialization.jsonObject(with: data) as? [String: Any])?["requests"] as? Int)
    }

    /// A tenant issuer of the server's own (server.py: /tenants/NAME), unique to the test.
    func tenantIssuer(_ prefix: String) -> URL {
        url.appendingPathComponent("tenants").appendingPathComponent(uniqueName(prefix))
    }

    /// The HTTP status and OAuth error of a refresh with `refreshToken`, sent behind the vault's back.
    func tryRefresh(_ refreshToken: String) async throws -> (status: Int, error: String?) {
        let (data, status) = try await post("token", [
            "grant_type": "refresh_token", "refresh_token": refreshToken, "client_id": Self.clientID,
        ])
        let error = (try? JSONSerialization.jsonObject(with: data) as? [String: Any])?["error"] as? String
        return (status, error)
    }

    /// Gives `user` a reuse interval: a spent refresh token presented again within `seconds` of its
    /// rotation is accepted rather than revoking the family (server.py, /faults kind=reuse_interval).
    func reuseInterval(user: String, seconds: Double) async throws {
        let (_, status) = try await post("faults", ["user": user, "kind": "reuse_interval", "seconds": String(seconds)])
        try #require(status == 200)
    }

    /// Lets go of `user`'s refresh requests that a `hold` fault is holding (server.py, /release).
    func release(user: String) async throws {
        let (_, status) = try await post("release", ["user": user])
        try #require(status == 200, "release failed with HTTP \(status)")
    }

    /// Controls a pending device code (server.py, /device/control).
    func controlDevice(userCode: String, _ form: [String: String]) async throws {
        let (_, status) = try await post("device/control", form.merging(["user_code": userCode]) { $1 })
        try #require(status == 200, "device control failed with HTTP \(status)")
    }

    /// Denies a device user code as `user` would in a browser.
    func denyDevice(userCode: String, as user: String) async throws {
        let (_, status) = try await post("device", ["user_code": userCode, "username": user, "approve": "no"])
        try #require(status == 200)
    }

    /// How many times the token endpoint was polled with the device code of `userCode`.
    func devicePolls(userCode: String) async throws -> Int {
        var components = try #require(URLComponents(url: url.appendingPathComponent("device/stats"), resolvingAgainstBaseURL: false))
        components.queryItems = [URLQueryItem(name: "user_code", value: userCode)]
        let (data, status) = try await send(URLRequest(url: try #require(components.url)))
        try #require(status == 200)
        return try #require((try JSONSerialization.jsonObject(with: data) as? [String: Any])?["polls"] as? Int)
    }

    /// Plays the user's browser: opens the authorization URL the client built, logged in as `user`
    /// (or refusing), and follows the redirect to the client's loopback listener.
    func browse(_ authorizationURL: URL, as user: String, deny: Bool = false) async throws {
        var components = try #require(URLComponents(url: authorizationURL, resolvingAgainstBaseURL: false))
        components.queryItems = (components.queryItems ?? []) + [URLQueryItem(name: "user", value: user)]
            + (deny ? [URLQueryItem(name: "deny", value: "1")] : [])
        _ = try await send(URLRequest(url: try #require(components.url)))
    }

    /// Logs `user` in with the password grant: a new token family, as after a real sign-in.
    func login(user: String, confidential: Bool = false) async throws -> OAuthToken {
        var form = ["grant_type": "password", "username": user, "password": "test-password", "client_id": Self.clientID]
        if confidential {
            form["client_id"] = Self.confidentialClientID
            form["client_secret"] = Self.confidentialSecret
        }
        let (data, status) = try await post("token", form)
        try #require(status == 200, "password login failed with HTTP \(status)")
        return try OAuthToken(tokenResponse: data)
    }

    /// Spends `token`'s refresh token behind the vault's back, as a buggy second client would.
    func spendRefreshToken(of token: OAuthToken) async throws {
        let (_, status) = try await post("token", [
            "grant_type": "refresh_token", "refresh_token": try #require(token.refreshToken), "client_id": Self.clientID,
        ])
        try #require(status == 200)
    }

    /// Refreshes `token` behind the vault's back with the confidential client, spending its refresh token.
    func refreshBehindTheVault(_ token: OAuthToken, confidential: Bool) async throws -> OAuthToken {
        var form = ["grant_type": "refresh_token", "refresh_token": try #require(token.refreshToken), "client_id": Self.clientID]
        if confidential {
            form["client_id"] = Self.confidentialClientID
            form["client_secret"] = Self.confidentialSecret
        }
        let (data, status) = try await post("token", form)
        try #require(status == 200)
        return try OAuthToken(tokenResponse: data)
    }

    /// Approves a device user code as `user` would in a browser.
    func approveDevice(userCode: String, as user: String) async throws {
        let (_, status) = try await post("device", ["user_code": userCode, "username": user, "approve": "yes"])
        try #require(status == 200, "approving the device code failed with HTTP \(status)")
    }

    /// The user the protected API sees for `token`, or nil when it refuses the token.
    func user(for token: OAuthToken) async throws -> String? {
        var request = URLRequest(url: url.appendingPathComponent("api/me"))
        request.setValue("Bearer \(token.accessToken)", forHTTPHeaderField: "Authorization")
        let (data, status) = try await send(request)
        guard status == 200 else { return nil }
        return (try JSONSerialization.jsonObject(with: data) as? [String: Any])?["user"] as? String
    }

    private func post(_ path: String, _ form: [String: String]) async throws -> (Data, Int) {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        var request = URLRequest(url: url.appendingPathComponent(path))
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(
            form.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }
                .joined(separator: "&").utf8)
        return try await send(request)
    }

    private func send(_ request: URLRequest) async throws -> (Data, Int) {
        var request = request
        request.timeoutInterval = 30
        let (data, response) = try await URLSession.shared.data(for: request)
        return (data, (response as? HTTPURLResponse)?.statusCode ?? 0)
    }
}

/// The real backends that several processes can share, which the cross-process tests run against.
/// No stand-in: a mock in place of the backend under test would prove nothing about it.
enum SharedStore: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// The encrypted file backend: lock files beside the vault file, in `tokens.vault.locks/`.
    case encryptedFile
    /// The Secret Service: the real gnome-keyring that Scripts/test starts on its private session
    /// bus. Lock files live in `$XDG_RUNTIME_DIR/token-vault/locks/`, which every process of the
    /// test shares because each inherits the test runner's environment.
    case secretService

    var testDescription: String { rawValue }

    /// The backend a vault over this store reports.
    var backend: BackendKind {
        switch self {
        case .encryptedFile: .file
        case .secretService: .secretService
        }
    }
}

/// The throwaway gnome-keyring that Scripts/test starts on its private D-Bus.
enum TestKeyring {
    /// Fails the test (never skips it) when the keyring is not there.
    static func require() throws {
        try #require(
            ProcessInfo.processInfo.environment["TOKENVAULT_TEST_KEYRING"] == "1",
            "TOKENVAULT_TEST_KEYRING is not set: these tests need the throwaway gnome-keyring that Scripts/test starts on a private D-Bus. Run them with Scripts/test (e.g. Scripts/test --filter Refresh).")
    }

    /// How the tests use it: every test of the run shares this one daemon, which rewrites its whole
    /// keyring file on each change, so calls get more than the 10 s default. No prompt can be shown.
    static let options = SecretServiceStore.Options(timeout: .seconds(30), unlockPrompt: false)
}

/// A private scratch directory with a key file and a file-backend vault configuration.
struct VaultScratch: Sendable {
    let directory: String
    let vaultPath: String
    let keyFile: String

    init() throws {
        directory = (NSTemporaryDirectory() as NSString).appendingPathComponent("tv-refresh-\(UUID().uuidString)")
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        vaultPath = (directory as NSString).appendingPathComponent("vault/tokens.vault")
        try FileManager.default.createDirectory(
            atPath: (vaultPath as NSString).deletingLastPathComponent, withIntermediateDirectories: false,
            attributes: [.posixPermissions: 0o700])
        keyFile = (directory as NSString).appendingPathComponent("vault.key")
        var key = [UInt8](repeating: 0, count: 32)
        var generator = SystemRandomNumberGenerator()
        for index in key.indices { key[index] = generator.next() }
        let hex = key.map { String(format: "%02x", $0) }.joined()
        guard FileManager.default.createFile(atPath: keyFile, contents: Data(hex.utf8), attributes: [.posixPermissions: 0o600])
        else { throw ScratchError(description: "could not write the key file") }
    }

    /// The configuration of a vault over `store`, as this process opens it.
    func configuration(_ store: SharedStore) throws -> VaultConfiguration {
        switch store {
        case .encryptedFile:
            return VaultConfiguration(backend: .file, filePath: vaultPath, keySource: .keyFile(keyFile))
        case .secretService:
            try TestKeyring.require()
            return VaultConfiguration(backend: .secretService, secretService: TestKeyring.options)
        }
    }

    /// A vault over `store`, named explicitly so that it fails rather than falls back.
    func open(_ store: SharedStore) async throws -> Vault {
        let vault = try await Vault.open(configuration(store))
        try #require(vault.selection.backend == store.backend, "\(vault.selection)")
        return vault
    }

    /// The environment of a child process (refresh-stress, oauth-example) that opens the same
    /// vault over `store`. Everything else is the test runner's own, in particular the session bus
    /// (DBUS_SESSION_BUS_ADDRESS) and XDG_RUNTIME_DIR, which place the Secret Service's lock files.
    func environment(_ store: SharedStore) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        for name in ["TOKEN_VAULT_FILE", "TOKEN_VAULT_KEY_FILE", "TOKEN_VAULT_PASSPHRASE_FILE"] {
            environment.removeValue(forKey: name)
        }
        switch store {
        case .encryptedFile:
            environment["TOKEN_VAULT_BACKEND"] = "file"
            environment["TOKEN_VAULT_FILE"] = vaultPath
            environment["TOKEN_VAULT_KEY_FILE"] = keyFile
        case .secretService:
            environment["TOKEN_VAULT_BACKEND"] = "secret-service"
        }
        return environment
    }

    func path(_ name: String) -> String {
        (directory as NSString).appendingPathComponent(name)
    }

    func remove() {
        do {
            try FileManager.default.removeItem(atPath: directory)
        } catch {
            Issue.record("could not remove the scratch directory: \(error)")
        }
    }

    struct ScratchError: Error, CustomStringConvertible { var description: String }
}

/// Runs `body` with a vault over `store` in a fresh scratch directory, then, pass or fail, deletes
/// every entry the test left under `services` and checks that none is left, and removes the
/// scratch directory. The test keyring is shared by every test of the run, and gnome-keyring
/// rewrites its whole file on each change: leftovers would slow everything after them down.
func withVault(
    _ store: SharedStore, services: [String], _ body: (VaultScratch, Vault) async throws -> Void
) async throws {
    let scratch = try VaultScratch()
    defer { scratch.remove() }
    let vault = try await scratch.open(store)
    var failure: (any Error)?
    do {
        try await body(scratch, vault)
    } catch {
        failure = error
    }
    do {
        for service in services {
            for key in try await vault.keys(service: service) {
                try await vault.delete(key)
            }
            #expect(try await vault.keys(service: service).isEmpty, "entries of \(service) are left in the \(store) store")
        }
    } catch {
        Issue.record(error, "could not clean up the \(store) store")
    }
    if let failure { throw failure }
}

/// Polls until `condition` holds, failing the test after a generous bound.
func eventually(_ what: String, bound: Duration = .seconds(60), _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now.advanced(by: bound)
    while try await !condition() {
        try #require(ContinuousClock.now < deadline, "\(what) did not happen within \(bound)")
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// The same fingerprint refresh-stress prints: FNV-1a 64 of the access token.
func fingerprint(_ text: String) -> String {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in text.utf8 {
        hash ^= UInt64(byte)
        hash = hash &* 0x0000_0100_0000_01b3
    }
    return String(hash, radix: 16)
}

/// A user name and vault service unique to one test, so tests can run in parallel on one server.
func uniqueName(_ prefix: String) -> String {
    "\(prefix)-\(UUID().uuidString.prefix(8).lowercased())"
}
#endif
