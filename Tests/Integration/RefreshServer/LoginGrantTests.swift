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

/// Getting the first token: the device grant (RFC 8628) and the code grant with PKCE (RFC 7636)
/// on a loopback redirect, against the real authlib server.
@Suite struct LoginGrantTests {
    /// A clock whose `sleep` does not wait: it records the interval asked for, and lets the test
    /// act at that point (approve, deny, expire), so every poll is an event, not a timer.
    final class PollingClock: @unchecked Sendable {
        private let lock = NSLock()
        private var sleeps: [Duration] = []
        let onSleep: @Sendable (Int) async throws -> Void

        init(onSleep: @escaping @Sendable (Int) async throws -> Void) {
            self.onSleep = onSleep
        }

        var recorded: [Duration] {
            lock.lock()
            defer { lock.unlock() }
            return sleeps
        }

        private func record(_ duration: Duration) -> Int {
            lock.lock()
            defer { lock.unlock() }
            sleeps.append(duration)
            return sleeps.count
        }

        var clock: VaultClock {
            VaultClock(now: { Date() }) { duration in
                try await self.onSleep(self.record(duration))
            }
        }
    }

    private func startDevice(_ server: TestOAuthServer, _ client: TokenEndpointClient) async throws -> DeviceAuthorization {
        let authorization = try await client.startDeviceAuthorization(
            at: server.url.appendingPathComponent("device_authorization"), registration: try server.publicClient())
        // Polls come as fast as the test clock lets them: only the scripted slow_down may answer.
        try await server.controlDevice(userCode: authorization.userCode, ["rate_limit": "off"])
        return authorization
    }

    @Test func deviceGrantPendingTwiceThenSlowDownThenApproval() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("device")
        let box = AuthorizationBox()
        let polling = PollingClock { index in
            let userCode = try #require(box.value).userCode
            switch index {
            case 3: try await server.controlDevice(userCode: userCode, ["slow_down_next": "1"])
            case 4: try await server.approveDevice(userCode: userCode, as: user)
            default: break
            }
        }
        let client = TokenEndpointClient(clock: polling.clock)
        let authorization = try await startDevice(server, client)
        box.value = authorization
        let token = try await client.pollDeviceAuthorization(authorization, registration: try server.publicClient())

        #expect(try await server.user(for: token) == user)
        // Polls 1 and 2 pending, 3 slow_down, 4 the token; the interval grows by 5 s after slow_down.
        #expect(polling.recorded == [authorization.interval, authorization.interval, authorization.interval, authorization.interval + .seconds(5)])
        #expect(try await server.devicePolls(userCode: authorization.userCode) == 4)
    }

    @Test func deviceGrantExpiry() async throws {
        let server = try TestOAuthServer.require()
        let box = AuthorizationBox()
        let polling = PollingClock { index in
            if index == 2 { try await server.controlDevice(userCode: try #require(box.value).userCode, ["expire": "1"]) }
        }
        let client = TokenEndpointClient(clock: polling.clock)
        let authorization = try await startDevice(server, client)
        box.value = authorization
        do {
            _ = try await client.pollDeviceAuthorization(authorization, registration: try server.publicClient())
            Issue.record("an expired device code gave a token")
        } catch let error as VaultError {
            #expect(error.code == .expired, "\(error)")
            #expect(error.message.contains("expired_token"))
        }
        #expect(try await server.devicePolls(userCode: authorization.userCode) == 2)
    }

    @Test func deviceGrantDenial() async throws {
        let server = try TestOAuthServer.require()
        let box = AuthorizationBox()
        let polling = PollingClock { index in
            if index == 1 { try await server.denyDevice(userCode: try #require(box.value).userCode, as: "someone") }
        }
        let client = TokenEndpointClient(clock: polling.clock)
        let authorization = try await startDevice(server, client)
        box.value = authorization
        do {
            _ = try await client.pollDeviceAuthorization(authorization, registration: try server.publicClient())
            Issue.record("a denied device code gave a token")
        } catch let error as VaultError {
            #expect(error.oauthError?.error == "access_denied", "\(error)")
        }
        #expect(try await server.devicePolls(userCode: authorization.userCode) == 1)
    }

    @Test func codeGrantWithPKCEOnALoopbackRedirect() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("browser")
        let login = try AuthorizationCodeLogin(
            authorizationEndpoint: server.url.appendingPathComponent("authorize"), registration: try server.publicClient(scope: "profile"),
            timeout: .seconds(30))
        let seen = AuthorizationBox.URLBox()
        let token = try await login.run { url in
            seen.value = url
            // The browser: a task of its own, since the redirect it follows is what run() waits for.
            Task { try await server.browse(url, as: user) }
        }
        #expect(try await server.user(for: token) == user)
        let url = try #require(seen.value)
        let query = Dictionary(
            uniqueKeysWithValues: (URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems ?? []).map { ($0.name, $0.value ?? "") })
        #expect(query["code_challenge_method"] == "S256")
        #expect(query["code_challenge"]?.count == 43)
        #expect((query["state"]?.count ?? 0) >= 22)
        let redirect = try #require(query["redirect_uri"].flatMap(URL.init(string:)))
        #expect(redirect.host == "127.0.0.1" && redirect.scheme == "http" && (redirect.port ?? 0) > 0)
        #expect(query["scope"] == "profile")
        #expect(try await server.stats(user: user).codesIssued == 1)
    }

    /// Issue 34, point 7: any local user could end a login with one request carrying a wrong
    /// `state`. Such a redirect (and one for another path, or naming another Host) is answered
    /// or dropped, and the login waits on for the real one.
    @Test func codeGrantIgnoresARedirectWithAnotherStateAndWaitsOn() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("browser-waits")
        let login = try AuthorizationCodeLogin(
            authorizationEndpoint: server.url.appendingPathComponent("authorize"), registration: try server.publicClient(),
            timeout: .seconds(30))
        let forgedStatus = AuthorizationBox.URLBox()
        let token = try await login.run { url in
            let redirect = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems?.first { $0.name == "redirect_uri" }?.value
            Task {
                // A forged redirect first: the right listener, a code, a state this login never sent.
                guard let redirect, let forged = URL(string: "\(redirect)?code=forged&state=not-the-one"),
                    let elsewhere = URL(string: redirect.replacingOccurrences(of: "/callback", with: "/other") + "?code=forged")
                else { return }
                let (_, answer) = try await URLSession.shared.data(from: forged)
                let (_, other) = try await URLSession.shared.data(from: elsewhere)
                forgedStatus.value = URL(string: "status://\((answer as? HTTPURLResponse)?.statusCode ?? 0)/\((other as? HTTPURLResponse)?.statusCode ?? 0)")
                // Then the user's browser, with the real redirect.
                try await server.browse(url, as: user)
            }
        }
        #expect(try await server.user(for: token) == user)
        #expect(forgedStatus.value?.absoluteString == "status://400/404", "\(String(describing: forgedStatus.value))")
    }

    /// Issue 34, point 7: with a display, the authorization URL (state included) is in xdg-open's
    /// argv, which every local user can read from /proc. A redirect sent from another user's
    /// process, with the right state and the attacker's own code, is dropped unanswered; the
    /// user's own browser completes the login. Needs root, to run the other user (setpriv).
    @Test(.enabled(if: getuid() == 0, "running a second user needs root"))
    func codeGrantDropsARedirectFromAnotherUser() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("browser-own")
        let login = try AuthorizationCodeLogin(
            authorizationEndpoint: server.url.appendingPathComponent("authorize"), registration: try server.publicClient(),
            timeout: .seconds(60))
        let token = try await login.run { url in
            let query = Dictionary(
                (URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems ?? []).map { ($0.name, $0.value ?? "") },
                uniquingKeysWith: { first, _ in first })
            guard let redirect = query["redirect_uri"], let state = query["state"] else { return }
            Task {
                // The other user (nobody) sends the right state with its own code.
                let script = "import sys, urllib.request\ntry:\n    urllib.request.urlopen(sys.argv[1], timeout=10)\n    print('answered')\nexcept Exception as error:\n    print('dropped', type(error).__name__)\n"
                let other = try ChildProcess.run(
                    "/usr/bin/setpriv",
                    ["--reuid=65534", "--regid=65534", "--clear-groups", "--", "/usr/bin/python3", "-c", script, "\(redirect)?code=attacker-code&state=\(state)"],
                    environment: ["PATH": "/usr/bin:/bin"])
                #expect(other.stdoutText.hasPrefix("dropped"), "another user's redirect was answered: \(other.stdoutText) \(other.stderr)")
                try await server.browse(url, as: user)
            }
        }
        #expect(try await server.user(for: token) == user, "the login took another user's code")
    }

    @Test func codeGrantDeniedByTheUser() async throws {
        let server = try TestOAuthServer.require()
        let login = try AuthorizationCodeLogin(
            authorizationEndpoint: server.url.appendingPathComponent("authorize"), registration: try server.publicClient(),
            timeout: .seconds(30))
        do {
            _ = try await login.run { url in Task { try await server.browse(url, as: "someone", deny: true) } }
            Issue.record("a denied login gave a token")
        } catch let error as VaultError {
            #expect(error.oauthError?.error == "access_denied", "\(error)")
        }
    }

    @Test func codeGrantTimesOutWithoutARedirect() async throws {
        let server = try TestOAuthServer.require()
        let login = try AuthorizationCodeLogin(
            authorizationEndpoint: server.url.appendingPathComponent("authorize"), registration: try server.publicClient(),
            timeout: .milliseconds(300))
        do {
            _ = try await login.run { _ in }
            Issue.record("no redirect, yet a token")
        } catch let error as VaultError {
            #expect(error.code == .timeout)
        }
    }
}

/// A value set once by the test and read by the clock's callback.
final class AuthorizationBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: DeviceAuthorization?
    var value: DeviceAuthorization? {
        get { lock.lock(); defer { lock.unlock() }; return stored }
        set { lock.lock(); stored = newValue; lock.unlock() }
    }

    final class URLBox: @unchecked Sendable {
        private let lock = NSLock()
        private var stored: URL?
        var value: URL? {
            get { lock.lock(); defer { lock.unlock() }; return stored }
            set { lock.lock(); stored = newValue; lock.unlock() }
        }
    }
}
#endif
