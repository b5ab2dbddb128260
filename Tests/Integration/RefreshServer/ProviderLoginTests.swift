#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Issue 35: `vault login PROVIDER` against the providers' stand-ins in the test OAuth server
/// (Tests/oauth-server/providers.py), reached on 127.0.0.1 through TOKEN_VAULT_TEST_PRESET_ORIGIN;
/// a fixed, exactly registered redirect URI; the provider's error on the redirect; a port in use.
/// The browser is scripted: it opens the URL vault prints, posts the consent form and follows
/// the redirect to vault's listener.
@Suite struct ProviderLoginTests {
    /// The stand-ins' side: registering a client, approving a device code, counts.
    struct StandIn {
        let server: TestOAuthServer

        func register(_ form: [String: String]) async throws {
            let (_, status) = try await post("stand-in/clients", form)
            try #require(status == 200, "registering the stand-in client failed: HTTP \(status)")
        }

        func approveDevice(userCode: String, as user: String) async throws {
            let (_, status) = try await post("stand-in/device", ["user_code": userCode, "user": user])
            try #require(status == 200, "approving \(userCode) failed: HTTP \(status)")
        }

        func stats(_ clientID: String) async throws -> [String: Any] {
            var components = try #require(URLComponents(url: server.url.appendingPathComponent("stand-in/stats"), resolvingAgainstBaseURL: false))
            components.queryItems = [URLQueryItem(name: "client_id", value: clientID)]
            let (data, _) = try await URLSession.shared.data(from: try #require(components.url))
            return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        }

        /// The user and client the stand-ins' API sees for `accessToken`, or nil when refused.
        func whoami(_ accessToken: String) async throws -> [String: Any]? {
            var request = URLRequest(url: server.url.appendingPathComponent("stand-in/whoami"))
            request.setValue("Bearer \(accessToken)", forHTTPHeaderField: "Authorization")
            let (data, response) = try await URLSession.shared.data(for: request)
            guard (response as? HTTPURLResponse)?.statusCode == 200 else { return nil }
            return try JSONSerialization.jsonObject(with: data) as? [String: Any]
        }

        func post(_ path: String, _ form: [String: String], accept: String? = nil) async throws -> (Data, Int) {
            var request = URLRequest(url: server.url.appendingPathComponent(path))
            request.httpMethod = "POST"
            request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
            if let accept { request.setValue(accept, forHTTPHeaderField: "Accept") }
            request.httpBody = Self.form(form)
            let (data, response) = try await URLSession.shared.data(for: request)
            return (data, (response as? HTTPURLResponse)?.statusCode ?? 0)
        }

        static func form(_ fields: [String: String]) -> Data {
            var allowed = CharacterSet.alphanumerics
            allowed.insert(charactersIn: "-._~")
            return Data(
                fields.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }
                    .joined(separator: "&").utf8)
        }

        /// The scripted browser: opens `url`; on the consent page, posts its form as `user`
        /// (accepting or not) and follows the redirect. Returns the last page's status and body.
        func browse(_ url: URL, as user: String, approve: Bool = true) async throws -> (Int, String) {
            let (data, response) = try await URLSession.shared.data(from: url)
            let page = String(decoding: data, as: UTF8.self)
            let status = (response as? HTTPURLResponse)?.statusCode ?? 0
            guard status == 200, let action = Self.capture(#"<form method=post action="([^"]+)""#, in: page).first else {
                return (status, page)  // an error page, or the redirect already followed
            }
            var fields: [String: String] = [:]
            for match in Self.matches(#"<input type="hidden" name="([^"]*)" value="([^"]*)">"#, in: page) {
                fields[Self.unescape(match[0])] = Self.unescape(match[1])
            }
            fields["user"] = user
            fields["approve"] = approve ? "yes" : "no"
            var request = URLRequest(url: try #require(URL(string: action, relativeTo: url)?.absoluteURL))
            request.httpMethod = "POST"
            request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
            request.httpBody = Self.form(fields)
            let (answer, final) = try await URLSession.shared.data(for: request)
            return ((final as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: answer, as: UTF8.self))
        }

        static func matches(_ pattern: String, in text: String) -> [[String]] {
            guard let expression = try? NSRegularExpression(pattern: pattern) else { return [] }
            let range = NSRange(text.startIndex..., in: text)
            return expression.matches(in: text, range: range).map { match in
                (1..<match.numberOfRanges).compactMap { Range(match.range(at: $0), in: text).map { String(text[$0]) } }
            }
        }

        static func capture(_ pattern: String, in text: String) -> [String] { matches(pattern, in: text).first ?? [] }

        static func unescape(_ text: String) -> String {
            text.replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&#x27;", with: "'")
                .replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
                .replacingOccurrences(of: "&amp;", with: "&")
        }
    }

    /// A loopback port free at this moment.
    static func freePort() throws -> UInt16 {
        let socket = try BoundSocket(port: 0)
        defer { socket.close() }
        return socket.port
    }

    /// A socket listening on 127.0.0.1 (another program holding a port).
    final class BoundSocket: @unchecked Sendable {
        let descriptor: Int32
        let port: UInt16

        init(port: UInt16) throws {
            let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            let listening = bound == 0 && listen(fd, 1) == 0
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            descriptor = fd
            self.port = UInt16(bigEndian: address.sin_port)
            try #require(listening, "could not listen on 127.0.0.1:\(port): errno \(errno)")
        }

        func close() { _ = Glibc.close(descriptor) }
    }

    /// A private client secret file in the scratch directory.
    static func secretFile(_ scratch: VaultScratch, _ secret: String) throws -> String {
        let path = scratch.path("client.secret")
        try #require(FileManager.default.createFile(atPath: path, contents: Data("\(secret)\n".utf8), attributes: [.posixPermissions: 0o600]))
        return path
    }

    /// Starts `vault` with `arguments` on the scratch's file vault, pointed at the stand-ins.
    static func start(_ scratch: VaultScratch, _ server: TestOAuthServer, _ arguments: [String]) throws -> HelperProcess {
        var environment = scratch.environment(.encryptedFile)
        environment["TOKEN_VAULT_TEST_PRESET_ORIGIN"] = server.url.absoluteString
        let child = try HelperProcess(
            "vault", arguments: arguments, environment: environment, outputPath: scratch.path("vault-\(UUID().uuidString.prefix(8)).out"))
        try child.start()
        return child
    }

    /// Runs `vault` to its end, pointed at the stand-ins.
    static func run(_ scratch: VaultScratch, _ server: TestOAuthServer, _ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await OAuthClientTests.vault(
            scratch, arguments, environment: ["TOKEN_VAULT_TEST_PRESET_ORIGIN": server.url.absoluteString])
    }

    /// The line of vault's stderr that starts with `prefix`, once it is printed.
    static func printed(_ child: HelperProcess, startingWith prefix: String) async throws -> String {
        var line: String?
        try await eventually("vault printing a line starting with \(prefix)") {
            line = child.errorOutput.split(separator: "\n").first { $0.hasPrefix(prefix) }.map(String.init)
            return line != nil || !child.process.isRunning
        }
        return try #require(line, "vault ended without printing it: \(child.errorOutput)")
    }

    /// `vault login atlassian` with the client registered for one exact callback URI: audience,
    /// prompt and offline_access are sent, the token exchange sends the secret from its file, and
    /// refreshes rotate the refresh token. The secret never shows.
    @Test func atlassianPresetWithAnExactRedirectAndRotatingRefreshTokens() async throws {
        let server = try TestOAuthServer.require()
        let standIn = StandIn(server: server)
        let clientID = uniqueName("atlassian-app")
        let secret = "atl-secret-\(UUID().uuidString)"
        let port = try Self.freePort()
        let redirect = "http://127.0.0.1:\(port)/callback"
        try await standIn.register(["provider": "atlassian", "client_id": clientID, "client_secret": secret, "redirect_uri": redirect])
        let service = uniqueName("jira")
        let user = uniqueName("jira-user")
        try await withVault(.encryptedFile, services: [service]) { scratch, vault in
            let secretPath = try Self.secretFile(scratch, secret)
            let child = try Self.start(scratch, server, [
                "login", service, "--provider", "atlassian", "--client-id", clientID, "--client-secret-file", secretPath,
                "--redirect-uri", redirect, "--timeout", "60",
            ])
            defer { if child.process.isRunning { child.kill9() } }
            let url = try #require(URL(string: try await Self.printed(child, startingWith: server.url.absoluteString + "/auth.atlassian.com/authorize")))
            let (status, page) = try await standIn.browse(url, as: user)
            #expect(status == 200 && page.contains("The login is complete"), "\(status): \(page)")
            #expect(try await child.wait(bound: .seconds(60)) == 0, "\(child.errorOutput)")
            #expect(child.errorOutput.contains("it must be registered for the client exactly"), "\(child.errorOutput)")

            let stats = try await standIn.stats(clientID)
            let sent = try #require(stats["last_authorization"] as? [String: String])
            #expect(sent["audience"] == "api.atlassian.com" && sent["prompt"] == "consent", "\(sent)")
            #expect(sent["scope"]?.split(separator: " ").contains("offline_access") == true, "\(sent)")
            #expect(sent["code_challenge_method"] == "S256")

            let key = try CredentialKey(service: service, account: CredentialKey.defaultAccount)
            let first = try #require(try await vault.token(for: key))
            #expect(try await standIn.whoami(first.accessToken)?["user"] as? String == user)
            #expect(first.refreshToken != nil, "offline_access gives a refresh token")
            #expect(try await vault.registration(for: key)?.clientAuthentication.method == "client_secret_post")
            for _ in 0..<2 {
                let refresh = try await Self.run(scratch, server, ["refresh", service])
                #expect(refresh.status == 0, "\(refresh.stderr)")
            }
            let after = try #require(try await vault.token(for: key))
            #expect(after.refreshToken != first.refreshToken, "the refresh token rotated")
            #expect((try await standIn.stats(clientID))["refreshes"] as? Int == 2)
            // The first refresh token was spent by the rotation: the stand-in refuses it.
            let (_, reuse) = try await standIn.post(
                "auth.atlassian.com/oauth/token",
                ["grant_type": "refresh_token", "refresh_token": try #require(first.refreshToken), "client_id": clientID, "client_secret": secret])
            #expect(reuse == 403)
            #expect(!child.errorOutput.contains(secret) && !child.output.contains(secret))
            #expect(!child.process.arguments!.joined(separator: " ").contains(secret))
        }
    }

    /// A client registered for one port: vault listening on another gets the provider's error
    /// page, no redirect; the time-out then names the likely cause (exit 6). And a provider that
    /// redirects with error= is reported as its error at once (exit 1), escaped.
    @Test func aRedirectURIThatIsNotTheRegisteredOneAndAnErrorOnTheRedirect() async throws {
        let server = try TestOAuthServer.require()
        let standIn = StandIn(server: server)
        let clientID = uniqueName("atlassian-strict")
        let registered = try Self.freePort()
        var other = try Self.freePort()
        while other == registered { other = try Self.freePort() }
        try await standIn.register([
            "provider": "atlassian", "client_id": clientID, "client_secret": "s", "redirect_uri": "http://127.0.0.1:\(registered)/callback",
        ])
        let service = uniqueName("jira-strict")
        try await withVault(.encryptedFile, services: [service]) { scratch, vault in
            let secretPath = try Self.secretFile(scratch, "s")
            let child = try Self.start(scratch, server, [
                "login", service, "--provider", "atlassian", "--client-id", clientID, "--client-secret-file", secretPath,
                "--redirect-port", String(other), "--timeout", "2",
            ])
            defer { if child.process.isRunning { child.kill9() } }
            let url = try #require(URL(string: try await Self.printed(child, startingWith: server.url.absoluteString)))
            let (status, page) = try await standIn.browse(url, as: "someone")
            #expect(status == 400 && page.contains("Redirect URI Error"), "the stand-in refuses another port: \(status)")
            #expect(try await child.wait(bound: .seconds(60)) == 6, "\(child.errorOutput)")
            #expect(child.errorOutput.contains("must match exactly"), "\(child.errorOutput)")
            #expect(child.errorOutput.contains("http://127.0.0.1:\(other)/callback"), "\(child.errorOutput)")
            #expect((try await standIn.stats(clientID))["refused_redirects"] as? Int == 1)

            // The right port, with the audience overridden to a wrong one: the stand-in redirects
            // with error=invalid_request, and vault reports it as such, not as a time-out.
            let wrong = try Self.start(scratch, server, [
                "login", service, "--provider", "atlassian", "--client-id", clientID, "--client-secret-file", secretPath,
                "--redirect-port", String(registered), "--auth-param", "audience=elsewhere", "--timeout", "60",
            ])
            defer { if wrong.process.isRunning { wrong.kill9() } }
            let wrongURL = try #require(URL(string: try await Self.printed(wrong, startingWith: server.url.absoluteString)))
            _ = try await standIn.browse(wrongURL, as: "someone")
            #expect(try await wrong.wait(bound: .seconds(60)) == 1, "\(wrong.errorOutput)")
            #expect(wrong.errorOutput.contains("invalid_request: audience is required: api.atlassian.com"), "\(wrong.errorOutput)")
            #expect(!wrong.errorOutput.contains("No redirect came back"), "\(wrong.errorOutput)")
            #expect(try await vault.token(for: try CredentialKey(service: service, account: CredentialKey.defaultAccount)) == nil)
        }
    }

    /// The redirect URI's port held by another program: exit 8 before anything is sent.
    @Test func aRedirectPortInUseExitsEight() async throws {
        let server = try TestOAuthServer.require()
        let holder = try BoundSocket(port: 0)
        defer { holder.close() }
        let service = uniqueName("port-taken")
        try await withVault(.encryptedFile, services: [service]) { scratch, _ in
            let result = try await Self.run(scratch, server, [
                "login", service, "--authorize-url", server.url.appendingPathComponent("authorize").absoluteString,
                "--token-url", server.url.appendingPathComponent("token").absoluteString, "--client-id", TestOAuthServer.clientID,
                "--redirect-uri", "http://127.0.0.1:\(holder.port)/cb",
            ])
            #expect(result.status == 8, "\(result.status): \(result.stderr)")
            #expect(result.stderr.contains("port \(holder.port)") && result.stderr.contains("in use"), "\(result.stderr)")
            #expect(!result.stderr.contains("To log in, open"), "nothing was shown to open")
        }
    }

    /// `vault login github` with a GitHub App: the device grant, one slow_down (the next poll
    /// comes 5 s later), JSON asked for (no form-encoded answer reached vault), an expiring token
    /// with a refresh token that rotates; --auth-param reaches the device authorization request.
    @Test func githubAppPresetDeviceFlowWithSlowDownAndRotation() async throws {
        let server = try TestOAuthServer.require()
        let standIn = StandIn(server: server)
        let clientID = "Iv1.\(uniqueName("app"))"
        let secret = "gh-secret-\(UUID().uuidString)"
        try await standIn.register(["provider": "github", "client_id": clientID, "client_secret": secret, "github_app": "1", "slow_down": "1"])
        let service = uniqueName("github")
        let user = uniqueName("octocat")
        try await withVault(.encryptedFile, services: [service]) { scratch, vault in
            let secretPath = try Self.secretFile(scratch, secret)
            let child = try Self.start(scratch, server, [
                "login", service, "--provider", "github", "--client-id", clientID, "--client-secret-file", secretPath,
                "--auth-param", "login=\(user)",
            ])
            defer { if child.process.isRunning { child.kill9() } }
            let line = try await Self.printed(child, startingWith: "and enter the code: ")
            try await standIn.approveDevice(userCode: String(line.dropFirst("and enter the code: ".count)), as: user)
            #expect(try await child.wait(bound: .seconds(60)) == 0, "\(child.errorOutput)")
            let stats = try await standIn.stats(clientID)
            #expect(stats["slow_downs"] as? Int == 1)
            #expect(stats["form_answers"] as? Int == 0 && (stats["json_answers"] as? Int ?? 0) >= 3, "\(stats)")
            #expect((stats["last_device_authorization"] as? [String: String])?["login"] == user)
            let key = try CredentialKey(service: service, account: CredentialKey.defaultAccount)
            let token = try #require(try await vault.token(for: key))
            #expect(try await standIn.whoami(token.accessToken)?["user"] as? String == user)
            let expiresIn = try #require(token.expiresAt).timeIntervalSinceNow
            #expect(expiresIn > 28000 && expiresIn <= 28801, "a GitHub App's user token lasts 8 hours")
            let refresh = try await Self.run(scratch, server, ["refresh", service])
            #expect(refresh.status == 0, "\(refresh.stderr)")
            #expect(try await vault.token(for: key)?.refreshToken != token.refreshToken, "rotated")
            #expect(!child.errorOutput.contains(secret) && !refresh.stderr.contains(secret))
        }
    }

    /// An OAuth App's token never expires and has no refresh token; the stand-in answers
    /// form-encoded to a client that does not ask for JSON, and TokenVault reads that answer too.
    @Test func githubOAuthAppTokenAndTheFormEncodedAnswer() async throws {
        let server = try TestOAuthServer.require()
        let standIn = StandIn(server: server)
        let clientID = uniqueName("oauth-app")
        try await standIn.register(["provider": "github", "client_id": clientID])
        let service = uniqueName("github-oauth")
        let user = uniqueName("hubot")
        try await withVault(.encryptedFile, services: [service]) { scratch, vault in
            let child = try Self.start(scratch, server, ["login", service, "--provider", "github", "--client-id", clientID, "--scope", "repo"])
            defer { if child.process.isRunning { child.kill9() } }
            let line = try await Self.printed(child, startingWith: "and enter the code: ")
            try await standIn.approveDevice(userCode: String(line.dropFirst("and enter the code: ".count)), as: user)
            #expect(try await child.wait(bound: .seconds(60)) == 0, "\(child.errorOutput)")
            let get = try await Self.run(scratch, server, ["get", service, "--json"])
            #expect(get.status == 0, "\(get.stderr)")
            let object = try #require(try JSONSerialization.jsonObject(with: Data(get.stdout.utf8)) as? [String: Any])
            #expect(object["expires_at"] is NSNull && object["refresh_token"] is NSNull && object["expired"] as? Bool == false)
            #expect(object["scope"] as? String == "repo")
            _ = vault
        }
        // Without Accept: application/json, GitHub answers form-encoded, and the token parses.
        let (started, _) = try await standIn.post("github.com/login/device/code", ["client_id": clientID])
        let fields = Dictionary(uniqueKeysWithValues: String(decoding: started, as: UTF8.self).split(separator: "&").map {
            let pair = $0.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? "" }
            return (pair[0], pair.count > 1 ? pair[1] : "")
        })
        try await standIn.approveDevice(userCode: try #require(fields["user_code"]), as: user)
        let (body, status) = try await standIn.post("github.com/login/oauth/access_token", [
            "client_id": clientID, "grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": try #require(fields["device_code"]),
        ])
        #expect(status == 200 && String(decoding: body, as: UTF8.self).hasPrefix("access_token="))
        let token = try OAuthToken(tokenResponse: body)
        #expect(try await standIn.whoami(token.accessToken)?["user"] as? String == user)
        #expect(token.expiresAt == nil && token.refreshToken == nil, "an OAuth App token never expires")
    }
    /// README's "Logging in to Jira and GitHub" (On a server) and the DocC catalog's same section,
    /// each command run as written, against the stand-ins: HOME holds the secret file the
    /// commands name, and the stand-ins know the clients the commands name.
    @Test func theReadmeLoginCommandsRunAsWritten() async throws {
        let server = try TestOAuthServer.require()
        let standIn = StandIn(server: server)
        let block = try #require(try GitCredentialServerTests.readmeOnAServerBlocks().first { $0.body.contains("vault login") }?.body)
        let docc = try String(contentsOfFile: PackageFiles.path("Sources/TokenVault/Docs.docc/OnAServer.md"), encoding: .utf8)
        #expect(docc.contains("### Logging in to Jira and GitHub\n") && docc.contains("```sh\n" + block + "```"), "the DocC section shows other commands")
        let commands = block.split(separator: "\n").map(String.init).filter { $0.hasPrefix("vault login") }
        #expect(commands.count == 3, "\(commands)")
        let secret = "jira-secret-\(UUID().uuidString)"
        try await standIn.register([
            "provider": "atlassian", "client_id": "tokenvault-jira", "client_secret": secret, "redirect_uri": "http://127.0.0.1:8976/callback",
        ])
        try await standIn.register(["provider": "github", "client_id": "Iv1.tokenvault", "github_app": "1"])
        let services = ["atlassian", "github"]
        try await withVault(.encryptedFile, services: services) { scratch, vault in
            let home = scratch.path("home")
            try FileManager.default.createDirectory(atPath: home + "/.config", withIntermediateDirectories: true)
            try #require(
                FileManager.default.createFile(
                    atPath: home + "/.config/jira.secret", contents: Data("\(secret)\n".utf8), attributes: [.posixPermissions: 0o600]))
            for command in commands {
                let words = command.split(separator: " ").dropFirst().map { $0.hasPrefix("~/") ? home + $0.dropFirst(1) : String($0) }
                var environment = scratch.environment(.encryptedFile)
                environment["TOKEN_VAULT_TEST_PRESET_ORIGIN"] = server.url.absoluteString
                environment["HOME"] = home
                let child = try HelperProcess("vault", arguments: words, environment: environment, outputPath: scratch.path("readme-\(UUID().uuidString.prefix(8)).out"))
                try child.start()
                defer { if child.process.isRunning { child.kill9() } }
                if command.contains("--dry-run") {
                    #expect(try await child.wait(bound: .seconds(60)) == 0, "\(command): \(child.errorOutput)")
                    for shown in ["audience=api.atlassian.com", "prompt=consent", "offline_access", "http://127.0.0.1:8976/callback", "client_secret=(the client secret from"] {
                        #expect(child.output.contains(shown), "\(command) does not show \(shown): \(child.output)")
                    }
                    #expect(!child.output.contains(secret) && !child.errorOutput.contains(secret))
                    #expect(try await vault.token(for: try CredentialKey(service: "atlassian")) == nil, "a dry run logs nothing in")
                } else if command.contains("atlassian") {
                    let url = try #require(URL(string: try await Self.printed(child, startingWith: server.url.absoluteString)))
                    _ = try await standIn.browse(url, as: "readme-jira")
                    #expect(try await child.wait(bound: .seconds(60)) == 0, "\(command): \(child.errorOutput)")
                    let token = try #require(try await vault.token(for: try CredentialKey(service: "atlassian")))
                    #expect(try await standIn.whoami(token.accessToken)?["user"] as? String == "readme-jira")
                    #expect(!child.errorOutput.contains(secret))
                } else {
                    let line = try await Self.printed(child, startingWith: "and enter the code: ")
                    try await standIn.approveDevice(userCode: String(line.dropFirst("and enter the code: ".count)), as: "readme-octocat")
                    #expect(try await child.wait(bound: .seconds(60)) == 0, "\(command): \(child.errorOutput)")
                    let token = try #require(try await vault.token(for: try CredentialKey(service: "github")))
                    #expect(try await standIn.whoami(token.accessToken)?["user"] as? String == "readme-octocat")
                }
            }
        }
    }
    /// Google (code with PKCE on any loopback port; a refresh token only with access_type=offline,
    /// which the preset sends), Microsoft Entra ID (the device grant under the tenant's path; a
    /// refresh token only with offline_access, which the preset adds) and GitLab (code with PKCE on
    /// the exact redirect, under --instance), each against its stand-in, refreshed once.
    @Test func googleMicrosoftAndGitLabPresets() async throws {
        let server = try TestOAuthServer.require()
        let standIn = StandIn(server: server)
        let google = uniqueName("google-app")
        let microsoft = uniqueName("entra-app")
        let gitlab = uniqueName("gitlab-app")
        let port = try Self.freePort()
        try await standIn.register(["provider": "google", "client_id": google, "client_secret": "g-secret"])
        try await standIn.register(["provider": "microsoft", "client_id": microsoft])
        try await standIn.register(["provider": "gitlab", "client_id": gitlab, "redirect_uri": "http://127.0.0.1:\(port)/callback"])
        let services = [uniqueName("mail"), uniqueName("graph"), uniqueName("forge")]
        try await withVault(.encryptedFile, services: services) { scratch, vault in
            let secretPath = try Self.secretFile(scratch, "g-secret")
            let runs: [(service: String, clientID: String, arguments: [String])] = [
                (services[0], google, ["--provider", "google", "--client-id", google, "--client-secret-file", secretPath]),
                (services[1], microsoft, ["--provider", "microsoft", "--tenant", "contoso.onmicrosoft.com", "--client-id", microsoft]),
                (services[2], gitlab, ["--provider", "gitlab", "--instance", "https://gitlab.com", "--client-id", gitlab, "--redirect-port", String(port)]),
            ]
            for run in runs {
                let child = try Self.start(scratch, server, ["login", run.service] + run.arguments + ["--timeout", "60"])
                defer { if child.process.isRunning { child.kill9() } }
                if run.clientID == microsoft {
                    let line = try await Self.printed(child, startingWith: "and enter the code: ")
                    try await standIn.approveDevice(userCode: String(line.dropFirst("and enter the code: ".count)), as: "user-\(run.service)")
                } else {
                    let url = try #require(URL(string: try await Self.printed(child, startingWith: server.url.absoluteString)))
                    let (status, page) = try await standIn.browse(url, as: "user-\(run.service)")
                    #expect(status == 200 && page.contains("The login is complete"), "\(run.service): \(status) \(page)")
                }
                #expect(try await child.wait(bound: .seconds(60)) == 0, "\(run.arguments): \(child.errorOutput)")
                let key = try CredentialKey(service: run.service, account: CredentialKey.defaultAccount)
                let token = try #require(try await vault.token(for: key))
                #expect(try await standIn.whoami(token.accessToken)?["user"] as? String == "user-\(run.service)")
                #expect(token.refreshToken != nil, "\(run.arguments): the preset's parameters give a refresh token")
                let refreshed = try await Self.run(scratch, server, ["refresh", run.service])
                #expect(refreshed.status == 0, "\(refreshed.stderr)")
            }
            let sent = try #require((try await standIn.stats(google))["last_authorization"] as? [String: String])
            #expect(sent["access_type"] == "offline" && sent["prompt"] == "consent", "\(sent)")
            let device = try #require((try await standIn.stats(microsoft))["last_device_authorization"] as? [String: String])
            #expect(device["scope"] == "openid profile offline_access", "\(device)")
        }
    }
}
#endif
