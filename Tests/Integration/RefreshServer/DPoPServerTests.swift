#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
@_spi(AgentWire) @testable import TokenVault
import TokenVaultDPoP
import TokenVaultURLSession

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// DPoP (RFC 9449, issue 32) against a real verifier: the test authorization server checks every
/// proof with joserfc (Tests/oauth-server/dpop.py), binds each grant to its key's thumbprint and
/// refuses a bound token sent as Bearer, with another key's proof or with a replayed proof. The
/// key is made in this process, sealed in the entry by the real file vault or gnome-keyring, and
/// signs token requests (password grant here, the device grant in the CLI test, the refresh grant)
/// and resource requests through the URLSession adapter.
@Suite(.serialized) struct DPoPServerTests {
    init() { DPoP.install() }

    /// The server's counters for `user`, with the `dpop_*` ones.
    static func stats(_ server: TestOAuthServer, user: String) async throws -> [String: Any] {
        var components = try #require(URLComponents(url: server.url.appendingPathComponent("stats"), resolvingAgainstBaseURL: false))
        components.queryItems = [URLQueryItem(name: "user", value: user)]
        let (data, _) = try await URLSession.shared.data(from: try #require(components.url))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    static func count(_ stats: [String: Any], _ name: String) -> Int { stats[name] as? Int ?? -1 }

    /// The password grant for `user` with a proof signed by `key`: a DPoP-bound token whose
    /// access token lives an hour (only the refreshes below replace it).
    static func login(_ server: TestOAuthServer, user: String, key: DPoPKey) async throws -> OAuthToken {
        try await server.resourceFault(user: user, "lifetime", seconds: 3600)
        let client = TokenEndpointClient(dpopKey: key)
        return try await client.requestToken(
            [("grant_type", "password"), ("username", user), ("password", "test-password")], registration: try server.publicClient())
    }

    /// `GET url` with the header fields given, as a copied token's user would send it.
    static func get(_ url: URL, _ fields: [(String, String)]) async throws -> (status: Int, challenge: String) {
        var request = URLRequest(url: url)
        for (name, value) in fields { request.setValue(value, forHTTPHeaderField: name) }
        let (_, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        return (http.statusCode, http.value(forHTTPHeaderField: "WWW-Authenticate") ?? "")
    }

    @Test(arguments: SharedStore.allCases)
    func loginRefreshAndResourceCallsAreBoundToTheSealedKey(_ store: SharedStore) async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("dpop-bound")
        let key = try CredentialKey(service: uniqueName("tv-dpop"), account: "acct")
        try await withVault(store, services: [key.service]) { _, vault in
            let dpopKey = try DPoPKey.generate()
            let token = try await Self.login(server, user: user, key: dpopKey)
            #expect(token.tokenType == "DPoP")
            #expect(try await Self.stats(server, user: user)["dpop_jkt"] as? String == dpopKey.thumbprint, "bound to this key")
            try await vault.saveToken(token, for: key, registration: try server.publicClient(), dpopKey: dpopKey)

            let me = server.url.appendingPathComponent("api/me")
            let authorizer = TokenAuthorizer(vault: vault, key: key)
            let (data, response) = try await URLSession.shared.data(for: URLRequest(url: me), authorizedBy: authorizer)
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
            #expect((try JSONSerialization.jsonObject(with: data) as? [String: Any])?["user"] as? String == user)

            // The refresh grant, signed with the key read back from the store.
            let refreshed = try await vault.refreshToken(for: key)
            #expect(refreshed.tokenType == "DPoP" && refreshed.accessToken != token.accessToken)
            #expect(try await vault.dpopKeyInfo(for: key)?.thumbprint == dpopKey.thumbprint, "the same key after the refresh")
            let (_, again) = try await URLSession.shared.data(for: URLRequest(url: me), authorizedBy: authorizer)
            #expect((again as? HTTPURLResponse)?.statusCode == 200)

            let stats = try await Self.stats(server, user: user)
            #expect(stats["dpop_jkt"] as? String == dpopKey.thumbprint)
            #expect(Self.count(stats, "refresh_requests") == 1)
            #expect(Self.count(stats, "dpop_token_requests") == 2, "\(stats)")
            #expect(Self.count(stats, "dpop_resource_requests") == 2, "\(stats)")
            #expect(Self.count(stats, "dpop_proofs_refused") == 0, "\(stats)")
        }
    }

    @Test func aCopiedTokenIsRefusedAsBearerWithAnotherKeyAndWithAReplayedProof() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("dpop-stolen")
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "dpop", account: user)
        let dpopKey = try DPoPKey.generate()
        let token = try await Self.login(server, user: user, key: dpopKey)
        try await vault.saveToken(token, for: key, registration: try server.publicClient(), dpopKey: dpopKey)
        let me = server.url.appendingPathComponent("api/me")

        // Copied out and replayed as Bearer.
        let bearer = try await Self.get(me, [("Authorization", "Bearer \(token.accessToken)")])
        #expect(bearer.status == 401 && bearer.challenge.contains("invalid_token"), "\(bearer)")
        // With a proof from another key (a thief's own).
        let thief = try DPoPKey.generate()
        let otherProof = try thief.proof(method: "GET", url: me, accessToken: token.accessToken)
        let other = try await Self.get(me, [("Authorization", "DPoP \(token.accessToken)"), ("DPoP", otherProof)])
        #expect(other.status == 401, "\(other)")
        // The token alone, with no proof.
        let bare = try await Self.get(me, [("Authorization", "DPoP \(token.accessToken)")])
        #expect(bare.status == 401, "\(bare)")
        // The vault's own headers work once; the same proof again is a replay.
        let headers = try await vault.authorizationHeaders(for: key, method: "GET", url: me)
        let fields = headers.fields.map { ($0.name, $0.value) }
        #expect(try await Self.get(me, fields).status == 200)
        let replay = try await Self.get(me, fields)
        #expect(replay.status == 401 && replay.challenge.contains("invalid_dpop_proof"), "\(replay)")
        // The refresh token copied out: refused without the key's proof.
        let stolenRefresh = try await server.tryRefresh(try #require(token.refreshToken))
        #expect(stolenRefresh.status == 400 && stolenRefresh.error == "invalid_dpop_proof", "\(stolenRefresh)")

        let stats = try await Self.stats(server, user: user)
        #expect(Self.count(stats, "dpop_proofs_refused") == 5, "\(stats)")
        #expect(Self.count(stats, "refresh_requests") == 0, "no refresh was granted: \(stats)")
    }

    /// The authorization code grant (PKCE, loopback redirect) with a DPoP key: the code is
    /// redeemed with a proof, after the server's nonce challenge, and the grant is bound to the
    /// key. The challenged first request spends nothing (the code is redeemed once, by the retry),
    /// the token works at the resource with the key's proofs only, and its refresh is signed by
    /// the same key read back from the vault.
    @Test func theCodeGrantRedeemsItsCodeWithAProofAndBindsTheGrant() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("dpop-code")
        try await server.resourceFault(user: user, "lifetime", seconds: 3600)
        try await server.fault(user: user, "dpop_nonce")
        // A nonce this process may have kept from an earlier test is stale from now on.
        try await server.fault(user: user, "dpop_nonce_rotate")
        let dpopKey = try DPoPKey.generate()
        let login = try AuthorizationCodeLogin(
            authorizationEndpoint: server.url.appendingPathComponent("authorize"), registration: try server.publicClient(scope: "profile"),
            timeout: .seconds(30))
        let token = try await login.run(client: TokenEndpointClient(dpopKey: dpopKey)) { url in
            // The browser: a task of its own, since the redirect it follows is what run() waits for.
            Task { try await server.browse(url, as: user) }
        }
        #expect(token.tokenType == "DPoP")
        var stats = try await Self.stats(server, user: user)
        #expect(stats["dpop_jkt"] as? String == dpopKey.thumbprint, "the code grant bound the family to this key: \(stats)")
        #expect(Self.count(stats, "dpop_nonce_challenges") == 1, "\(stats)")
        #expect(Self.count(stats, "dpop_token_requests") == 2, "the challenged request and its one retry: \(stats)")
        #expect(Self.count(stats, "tokens_issued") == 1, "\(stats)")
        #expect(Self.count(stats, "dpop_proofs_refused") == 0, "\(stats)")

        let me = server.url.appendingPathComponent("api/me")
        // The code grant's token as Bearer, copied out: refused.
        #expect(try await Self.get(me, [("Authorization", "Bearer \(token.accessToken)")]).status == 401)

        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "dpop-code", account: user)
        try await vault.saveToken(token, for: key, registration: try server.publicClient(scope: "profile"), dpopKey: dpopKey)
        let authorizer = TokenAuthorizer(vault: vault, key: key)
        let (data, response) = try await URLSession.shared.data(for: URLRequest(url: me), authorizedBy: authorizer)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect((try JSONSerialization.jsonObject(with: data) as? [String: Any])?["user"] as? String == user)
        let refreshed = try await vault.refreshToken(for: key)
        #expect(refreshed.tokenType == "DPoP" && refreshed.accessToken != token.accessToken)
        stats = try await Self.stats(server, user: user)
        #expect(stats["dpop_jkt"] as? String == dpopKey.thumbprint, "the same key after the refresh")
        #expect(Self.count(stats, "refresh_succeeded") == 1, "\(stats)")
        #expect(Self.count(stats, "dpop_proofs_refused") == 1, "only the Bearer copy: \(stats)")
    }

    @Test func nonceChallengesAreMetWithOneRetryAndTheNonceIsKept() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("dpop-nonce")
        try await server.fault(user: user, "dpop_nonce")
        // A nonce this process may have kept from an earlier test is stale from now on.
        try await server.fault(user: user, "dpop_nonce_rotate")
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "dpop", account: user)
        let dpopKey = try DPoPKey.generate()
        let token = try await Self.login(server, user: user, key: dpopKey)
        #expect(token.tokenType == "DPoP")
        var stats = try await Self.stats(server, user: user)
        #expect(Self.count(stats, "dpop_nonce_challenges") == 1, "one challenge at the token endpoint: \(stats)")
        #expect(Self.count(stats, "dpop_token_requests") == 2, "one retry: \(stats)")

        try await vault.saveToken(token, for: key, registration: try server.publicClient(), dpopKey: dpopKey)
        let authorizer = TokenAuthorizer(vault: vault, key: key)
        let me = server.url.appendingPathComponent("api/me")
        for _ in 0..<2 {
            let (_, response) = try await URLSession.shared.data(for: URLRequest(url: me), authorizedBy: authorizer)
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
        }
        // The refresh grant carries the token endpoint's kept nonce: no challenge.
        _ = try await vault.refreshToken(for: key)
        stats = try await Self.stats(server, user: user)
        #expect(Self.count(stats, "dpop_nonce_challenges") == 2, "one more, at the resource, then the nonce was kept: \(stats)")
        #expect(Self.count(stats, "dpop_resource_requests") == 3, "\(stats)")
        #expect(Self.count(stats, "refresh_requests") == 1, "\(stats)")
        #expect(Self.count(stats, "dpop_proofs_refused") == 0, "\(stats)")
    }
}

extension DPoPServerTests {
    /// `vault login --issuer … --device --dpop` (discovery lists ES256 and EdDSA: ES256 is
    /// chosen), then every command that shows an entry, hands a token over or moves the vault:
    /// none prints the private key. `vault get --header --url` gives curl both lines; `vault
    /// rekey` re-seals the key (the same thumbprint signs after it); `vault copy` to the Secret
    /// Service keeps it sealed there; `vault rotate-dpop-key` says a new grant is needed; `vault
    /// logout` forgets it.
    @Test func theVaultCommandLogsInWithDPoPAndNeverShowsTheKey() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("dpop-cli")
        let service = uniqueName("tv-dpop-cli")
        let key = try CredentialKey(service: service, account: CredentialKey.defaultAccount)
        let scratch = try VaultScratch()
        defer { scratch.remove() }
        try await server.resourceFault(user: user, "lifetime", seconds: 3600)
        var outputs: [String] = []
        func vault(_ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
            let result = try await OAuthClientTests.vault(scratch, arguments)
            outputs += [result.stdout, result.stderr]
            return result
        }

        let login = try ProviderLoginTests.start(
            scratch, server, ["login", service, "--issuer", server.url.absoluteString, "--client-id", TestOAuthServer.clientID, "--device", "--dpop"])
        defer { if login.process.isRunning { login.kill9() } }
        let line = try await ProviderLoginTests.printed(login, startingWith: "and enter the code: ")
        try await server.approveDevice(userCode: String(line.dropFirst("and enter the code: ".count)), as: user)
        #expect(try await login.wait(bound: .seconds(60)) == 0, "\(login.errorOutput)")
        outputs += [login.output, login.errorOutput]

        // The private key, as only the sealed entry holds it: what no output may show.
        let library = try await scratch.open(.encryptedFile)
        let raw = try #require(try await library.secret(for: key))
        let entry = try #require(try JSONSerialization.jsonObject(with: raw) as? [String: Any])
        let sealed = try #require(entry["dpop"] as? [String: Any])
        let privateKey = try #require(sealed["d"] as? String)
        #expect(sealed["alg"] as? String == "ES256", "ES256 chosen from dpop_signing_alg_values_supported")
        #expect(entry["token_type"] as? String == "DPoP")
        let thumbprint = try #require(sealed["jkt"] as? String)
        #expect(try await Self.stats(server, user: user)["dpop_jkt"] as? String == thumbprint)

        // The documented hand-off: both header lines for one request, read by curl from stdin.
        let me = server.url.appendingPathComponent("api/me")
        func headerCall() async throws -> Int {
            let header = try await vault(["get", service, "--fresh", "--header", "--url", me.absoluteString])
            #expect(header.status == 0, "\(header.stderr)")
            let lines = header.stdout.split(separator: "\n").map(String.init)
            #expect(lines.count == 2 && lines[0].hasPrefix("Authorization: DPoP ") && lines[1].hasPrefix("DPoP: "), "\(lines.count) lines")
            let fields = lines.compactMap { line -> (String, String)? in
                guard let colon = line.firstIndex(of: ":") else { return nil }
                return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
            }
            return try await Self.get(me, fields).status
        }
        #expect(try await headerCall() == 200)
        // Without --url, --header says what it needs, and shows nothing.
        let refused = try await vault(["get", service, "--header"])
        #expect(refused.status != 0 && refused.stdout.isEmpty && refused.stderr.contains("--url"), "\(refused.stderr)")

        for arguments in [["get", service, "--json"], ["list"], ["status"], ["refresh", service], ["get", service, "--fresh"]] {
            let result = try await vault(arguments)
            #expect(result.status == 0, "vault \(arguments.joined(separator: " ")): \(result.stderr)")
        }
        #expect(DPoPServerTests.count(try await Self.stats(server, user: user), "refresh_requests") == 1)

        // rekey re-seals the key: the same key signs afterwards.
        let newKey = scratch.path("new.key")
        let hex = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        #expect(FileManager.default.createFile(atPath: newKey, contents: Data(hex.utf8), attributes: [.posixPermissions: 0o600]))
        #expect(try await vault(["rekey", "--new-key-file", newKey]).status == 0)
        try Data(hex.utf8).write(to: URL(fileURLWithPath: scratch.keyFile))
        let rekeyed = try await scratch.open(.encryptedFile)
        #expect(try await rekeyed.dpopKeyInfo(for: key)?.thumbprint == thumbprint)
        #expect(try await headerCall() == 200)

        // copy to the Secret Service: sealed there too, the same key.
        try TestKeyring.require()
        let copy = try await vault(["copy", "--from", "file", "--to", "secret-service"])
        #expect(copy.status == 0, "\(copy.stderr)")
        let keyring = try await scratch.open(.secretService)
        #expect(try await keyring.dpopKeyInfo(for: key)?.thumbprint == thumbprint)
        try await keyring.delete(key)

        // Rotation: a new key, and the command says a new grant is needed.
        let rotate = try await vault(["rotate-dpop-key", service])
        #expect(rotate.status == 0 && rotate.stderr.contains("vault login"), "\(rotate.stderr)")
        let rotated = try #require(try await rekeyed.dpopKeyInfo(for: key)?.thumbprint)
        #expect(rotated != thumbprint)
        let afterRotation = try await vault(["get", service, "--fresh"])
        #expect(afterRotation.status == 7 && afterRotation.stdout.isEmpty, "log in again: \(afterRotation.stderr)")

        // logout forgets the key with the entry.
        let logout = try await vault(["logout", service, "--forget-anyway"])
        #expect(logout.status == 0, "\(logout.stderr)")
        #expect(try await rekeyed.tokenEntry(for: key) == nil)

        for output in outputs {
            #expect(!output.contains(privateKey), "an output shows the DPoP private key")
        }
    }
}

extension AgentTests {
    /// The agent signs DPoP proofs for its clients (the `proof` request): each answer's two fields
    /// are accepted by the real verifier, a new proof each time; the client never holds the key,
    /// and neither the answers nor the agent's log show it.
    @Test func theAgentSignsDPoPProofsForItsClientsAndKeepsTheKey() async throws {
        DPoP.install()
        let server = try TestOAuthServer.require()
        let user = uniqueName("agent-dpop")
        let key = try CredentialKey(service: uniqueName("tv-agent-dpop"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let dpopKey = try DPoPKey.generate()
            let token = try await DPoPServerTests.login(server, user: user, key: dpopKey)
            try await vault.saveToken(token, for: key, registration: try server.publicClient(), dpopKey: dpopKey)
            let privateKey = dpopKey.privateKey.withUnsafeBytes { Base64URL.encode($0) }
            let agent = try await RunningAgent(scratch)
            defer { agent.stop() }
            let client = AgentClient(socketPath: agent.socket)
            let identity = AgentProtocol.vaultIdentity(of: try scratch.configuration(.encryptedFile))
            let me = server.url.appendingPathComponent("api/me")
            var proofs: Set<String> = []
            for _ in 0..<2 {
                let answer = try client.authorization(for: key, method: "GET", url: me, vault: identity)
                let proof = try #require(answer.dpopProof)
                proofs.insert(proof)
                #expect(answer.token.tokenType == "DPoP" && answer.fields.first?.value == "DPoP \(token.accessToken)")
                #expect(try await DPoPServerTests.get(me, answer.fields.map { ($0.name, $0.value) }).status == 200)
                #expect(!proof.contains(privateKey) && !"\(answer)".contains(token.accessToken))
            }
            #expect(proofs.count == 2, "a new proof for each request")
            #expect(!agent.logText.contains(privateKey) && !agent.logText.contains(token.accessToken))
            let stats = try await DPoPServerTests.stats(server, user: user)
            #expect(DPoPServerTests.count(stats, "dpop_resource_requests") == 2 && DPoPServerTests.count(stats, "dpop_proofs_refused") == 0, "\(stats)")
        }
    }
}

extension AgentTests {
    /// `vault get --header --url` asks the running agent for its `proof` answer first, as plain
    /// `vault get` asks it for tokens: a client that has no key to the vault gets both header
    /// lines, signed by the agent, which the real verifier accepts; the same client with the
    /// agent bypassed cannot read the vault (exit 6), so the lines came from the agent. A Bearer
    /// entry gets its one Bearer line from the agent, the same line as the direct path prints.
    @Test func vaultGetHeaderWithAURLAsksTheAgentForItsProof() async throws {
        DPoP.install()
        let server = try TestOAuthServer.require()
        let user = uniqueName("agent-dpop-cli")
        let bound = try CredentialKey(service: uniqueName("tv-agent-dpop-cli"), account: "acct")
        let bearer = try CredentialKey(service: uniqueName("tv-agent-bearer-cli"), account: "acct")
        try await withVault(.encryptedFile, services: [bound.service, bearer.service]) { scratch, vault in
            let dpopKey = try DPoPKey.generate()
            let token = try await DPoPServerTests.login(server, user: user, key: dpopKey)
            try await vault.saveToken(token, for: bound, registration: try server.publicClient(), dpopKey: dpopKey)
            var plain = try await server.login(user: uniqueName("agent-bearer-cli"))
            plain.expiresAt = Date().addingTimeInterval(3600)
            try await vault.saveToken(plain, for: bearer, registration: try server.publicClient())
            let privateKey = dpopKey.privateKey.withUnsafeBytes { Base64URL.encode($0) }
            let agent = try await RunningAgent(scratch)
            defer { agent.stop() }
            let vaultPath = try Products.executable("vault")
            func cli(_ arguments: [String], _ environment: [String: String]) async throws -> ChildResult {
                try await offPool { try ChildProcess.run(vaultPath, arguments, environment: environment) }
            }
            var bypassed = agent.keylessClient
            bypassed["TOKEN_VAULT_AGENT"] = "off"
            var direct = agent.keyedClient
            direct["TOKEN_VAULT_AGENT"] = "off"

            let me = server.url.appendingPathComponent("api/me")
            var proofs: Set<String> = []
            for flags in [["--fresh"], [], ["--fresh", "--method", "get"]] {
                let result = try await cli(["get", bound.service, bound.account, "--header", "--url", me.absoluteString] + flags, agent.keylessClient)
                #expect(result.status == 0, "\(flags): \(result)")
                let lines = result.stdoutText.split(separator: "\n").map(String.init)
                #expect(lines.count == 2 && lines[0] == "Authorization: DPoP \(token.accessToken)" && lines[1].hasPrefix("DPoP: "), "\(flags): \(lines.count) lines")
                let fields = lines.compactMap { line -> (String, String)? in
                    guard let colon = line.firstIndex(of: ":") else { return nil }
                    return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
                }
                #expect(try await DPoPServerTests.get(me, fields).status == 200, "\(flags)")
                proofs.insert(lines.last ?? "")
                #expect(!result.stdoutText.contains(privateKey) && !result.stderr.contains(privateKey))
            }
            #expect(proofs.count == 3, "a new proof for each request")
            let refused = try await cli(["get", bound.service, bound.account, "--fresh", "--header", "--url", me.absoluteString], bypassed)
            #expect(refused.status == 6 && refused.stdout.isEmpty, "without the agent the keyless client cannot read the vault: \(refused)")

            // A Bearer entry through the proof request: the agent's one line is the direct path's.
            let viaAgent = try await cli(["get", bearer.service, bearer.account, "--fresh", "--header", "--url", me.absoluteString], agent.keylessClient)
            let viaVault = try await cli(["get", bearer.service, bearer.account, "--fresh", "--header", "--url", me.absoluteString], direct)
            #expect(viaAgent.status == 0 && viaVault.status == 0, "\(viaAgent) / \(viaVault)")
            #expect(viaAgent.stdoutText == "Authorization: Bearer \(plain.accessToken)\n" && viaAgent.stdoutText == viaVault.stdoutText)

            let stats = try await DPoPServerTests.stats(server, user: user)
            #expect(DPoPServerTests.count(stats, "dpop_resource_requests") == 3 && DPoPServerTests.count(stats, "dpop_proofs_refused") == 0, "\(stats)")
            #expect(DPoPServerTests.count(stats, "refresh_requests") == 0, "\(stats)")
            #expect(!agent.logText.contains(privateKey) && !agent.logText.contains(token.accessToken))
        }
    }
}

extension DPoPServerTests {
    /// `vault get --json` names a DPoP-bound entry's key by its public thumbprint (`dpop_jkt`, the
    /// `cnf.jkt` the server bound the grant to) and its algorithm (`dpop_alg`), for ES256 and EdDSA
    /// keys, and never shows the private key; a Bearer entry has both null.
    @Test func vaultGetJSONShowsTheKeysThumbprintAndAlgorithmOnly() async throws {
        let server = try TestOAuthServer.require()
        try await withVault(.encryptedFile, services: ["tv-dpop-json"]) { scratch, vault in
            var privateKeys: [String] = []
            for algorithm in DPoPAlgorithm.all {
                let user = uniqueName("dpop-json-\(algorithm.name)")
                let key = try CredentialKey(service: "tv-dpop-json", account: user)
                let dpopKey = try DPoPKey.generate(algorithm)
                privateKeys.append(dpopKey.privateKey.withUnsafeBytes { Base64URL.encode($0) })
                let token = try await Self.login(server, user: user, key: dpopKey)
                try await vault.saveToken(token, for: key, registration: try server.publicClient(), dpopKey: dpopKey)
                #expect(try await Self.stats(server, user: user)["dpop_jkt"] as? String == dpopKey.thumbprint)

                let result = try await OAuthClientTests.vault(scratch, ["get", key.service, key.account, "--json"])
                #expect(result.status == 0, "\(result.stderr)")
                let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout.count) bytes")
                #expect(json["dpop_jkt"] as? String == dpopKey.thumbprint, "\(algorithm)")
                #expect(json["dpop_alg"] as? String == algorithm.name)
                #expect(json["token_type"] as? String == "DPoP")
                for privateKey in privateKeys { #expect(!result.stdout.contains(privateKey) && !result.stderr.contains(privateKey)) }
                #expect(!result.stdout.contains("\"d\""), "no JWK private member")
            }
            let bearerKey = try CredentialKey(service: "tv-dpop-json", account: "bearer")
            try await vault.saveToken(
                OAuthToken(accessToken: "bearer-\(UUID().uuidString.prefix(8))", expiresAt: Date().addingTimeInterval(3600)), for: bearerKey)
            let bearer = try await OAuthClientTests.vault(scratch, ["get", bearerKey.service, bearerKey.account, "--json"])
            let json = try #require(try JSONSerialization.jsonObject(with: Data(bearer.stdout.utf8)) as? [String: Any], "\(bearer.stderr)")
            #expect(json["dpop_jkt"] is NSNull && json["dpop_alg"] is NSNull, "a Bearer entry: null")
        }
    }
}

extension RefreshCrossProcessTests {
    /// N processes (refresh-stress, each of 8 tasks) find a DPoP-bound entry expired: one refresh
    /// at the server, signed with the entry's own key, and every caller gets its token.
    @Test(arguments: SharedStore.allCases)
    func fourProcessesRefreshADPoPBoundEntryOnceWithItsKey(_ store: SharedStore) async throws {
        DPoP.install()
        let server = try TestOAuthServer.require()
        let user = uniqueName("dpop-flight")
        let key = try CredentialKey(service: uniqueName("tv-dpop-flight"), account: "acct")
        try await withVault(store, services: [key.service]) { scratch, vault in
            let dpopKey = try DPoPKey.generate()
            var token = try await DPoPServerTests.login(server, user: user, key: dpopKey)
            token.expiresAt = Date().addingTimeInterval(-5)
            try await vault.saveToken(token, for: key, registration: try server.publicClient(), dpopKey: dpopKey)

            let records = try await stress(
                server, scratch, store, service: key.service, accounts: ["acct"], processes: 4, storedDescription: true,
                label: "dpop")
            #expect(records.count == 32)
            #expect(records.filter { $0["ok"] != "true" }.isEmpty, "failed callers: \(records.filter { $0["ok"] != "true" })")
            #expect(records.allSatisfy { $0["type"] == "DPoP" })
            let stored = try #require(try await vault.token(for: key))
            #expect(Set(records.compactMap { $0["access"] }) == [fingerprint(stored.accessToken)], "every caller got the same new token")
            #expect(try await vault.dpopKeyInfo(for: key)?.thumbprint == dpopKey.thumbprint)
            let stats = try await DPoPServerTests.stats(server, user: user)
            #expect(DPoPServerTests.count(stats, "refresh_requests") == 1, "\(stats)")
            #expect(DPoPServerTests.count(stats, "dpop_proofs_refused") == 0, "\(stats)")
            #expect(stats["dpop_jkt"] as? String == dpopKey.thumbprint)
            let headers = try await vault.authorizationHeaders(for: key, method: "GET", url: server.url.appendingPathComponent("api/me"))
            #expect(try await DPoPServerTests.get(server.url.appendingPathComponent("api/me"), headers.fields.map { ($0.name, $0.value) }).status == 200)
        }
    }
}
#endif
