#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Glibc

/// The ways a token leaves the vault for another program, run as documented against the real
/// OAuth server: `vault get --header | curl -H @-`, `vault run`, and `--rejected-token-file`.
/// Part of the serialized cross-process suite, as its many processes share the server's counters.
extension RefreshCrossProcessTests {
    /// The environment of a shell that finds the built `vault` as `vault` on its PATH.
    private func shellEnvironment(_ scratch: VaultScratch) throws -> [String: String] {
        var environment = scratch.environment(.encryptedFile)
        let directory = (try Products.executable("vault") as NSString).deletingLastPathComponent
        environment["PATH"] = "\(directory):/usr/bin:/bin"
        return environment
    }

    /// Every process whose command line holds `secret`, from /proc.
    private func processesShowing(_ secret: String) -> [String] {
        let needle = Data(secret.utf8)
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.filter { Int($0) != nil } ?? []
        return pids.filter { FileManager.default.contents(atPath: "/proc/\($0)/cmdline")?.range(of: needle) != nil }
    }

    @Test func theDocumentedCurlPatternKeepsTheTokenOutOfEveryCommandLine() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("cli-header")
        let key = try CredentialKey(service: uniqueName("tv-header"), account: CredentialKey.defaultAccount)
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let token = try await server.login(user: user)
            try await vault.saveToken(token, for: key, registration: try server.publicClient())
            let hold = UUID().uuidString
            let url = server.url.appendingPathComponent("api/held/\(hold)").absoluteString
            // The README's line, with this test's service and URL: vault get github --fresh --header | curl -H @- https://api.github.com/user
            let line = "vault get \(key.service) --fresh --header | curl -H @- \(url)"
            let shell = try ChildProcess(
                "/bin/sh", ["-c", line], environment: try shellEnvironment(scratch), output: true, errorPath: scratch.path("curl.err"))
            defer { shell.stop() }

            // The server holds curl's request: curl is running, with the header it read from vault.
            let arrived = try await server.held(hold, "arrived", method: "GET")
            #expect(arrived["arrived"] as? Bool == true, "curl's request never reached the server")
            let sent = try #require(try await vault.token(for: key)).accessToken
            #expect(processesShowing(sent).isEmpty, "a process shows the token it sent in its command line")
            #expect(processesShowing(token.accessToken).isEmpty)
            _ = try await server.held(hold, "release", method: "POST")

            let body = try await offPool { shell.readAll() }
            #expect(shell.wait() == 0, "\(String(decoding: (try? Data(contentsOf: URL(fileURLWithPath: scratch.path("curl.err")))) ?? Data(), as: UTF8.self))")
            let answer = try #require(try JSONSerialization.jsonObject(with: body) as? [String: Any])
            #expect(answer["user"] as? String == user, "the server did not accept the header vault printed")
        }
    }

    @Test func vaultRunRefreshesFirstAndRefusesARejectedGrant() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("cli-run")
        let key = try CredentialKey(service: uniqueName("tv-run"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            var token = try await server.login(user: user)
            token.expiresAt = Date().addingTimeInterval(-5)
            try await vault.saveToken(token, for: key, registration: try server.publicClient())
            // The run form the README shows for curl: printf is built into sh, so no argv holds the token.
            let script = "printf 'Authorization: Bearer %s\\n' \"$API_TOKEN\" | curl -sS -H @- \"$1\""
            let arguments = [
                "run", "--env", "API_TOKEN=\(key.service)/\(key.account)", "--", "sh", "-c", script, "sh",
                server.url.appendingPathComponent("api/me").absoluteString,
            ]
            let vaultPath = try Products.executable("vault")
            let run = try ChildProcess.run(vaultPath, arguments, environment: try shellEnvironment(scratch))
            #expect(run.status == 0, "\(run)")
            let answer = try #require(try JSONSerialization.jsonObject(with: run.stdout) as? [String: Any])
            #expect(answer["user"] as? String == user, "the command did not get a live token")
            #expect(try await server.stats(user: user).refreshRequests == 1)
            #expect(try await vault.token(for: key)?.accessToken != token.accessToken)

            // A refresh token the server rejects: exit 7, and the command never starts.
            var stale = try #require(try await vault.token(for: key))
            try await server.spendRefreshToken(of: stale)
            stale.expiresAt = Date().addingTimeInterval(-5)
            try await vault.saveToken(stale, for: key, registration: try server.publicClient())
            let marker = scratch.path("started")
            let refused = try ChildProcess.run(
                vaultPath, ["run", "--env", "T=\(key.service)/\(key.account)", "--", "sh", "-c", "touch '\(marker)'"],
                environment: try shellEnvironment(scratch))
            #expect(refused.status == 7, "\(refused)")
            #expect(refused.stderr.contains("was not started"), "\(refused.stderr)")
            #expect(!FileManager.default.fileExists(atPath: marker))
        }
    }

    @Test func processesReportingTheSameRejectedTokenMakeOneRefresh() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("cli-rejected")
        let key = try CredentialKey(service: uniqueName("tv-rejected"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            // A token that looks valid for an hour, which a resource server has refused.
            var token = try await server.login(user: user)
            token.expiresAt = Date().addingTimeInterval(3600)
            try await vault.saveToken(token, for: key, registration: try server.publicClient())
            let rejected = scratch.path("rejected")
            try #require(FileManager.default.createFile(
                atPath: rejected, contents: Data("\(token.accessToken)\n".utf8), attributes: [.posixPermissions: 0o600]))

            // Hold the key's refresh lock so that all of them meet there; let go once each has it open.
            let lockFile = try scratch.lockFile(.encryptedFile, for: key)
            let descriptor = open(lockFile, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            try #require(descriptor >= 0 && flock(descriptor, LOCK_EX) == 0)
            var released = false
            defer { if !released { close(descriptor) } }
            let count = 8
            var children: [HelperProcess] = []
            for index in 0..<count {
                // Half give the token on stdin, half in a file: both are read without argv.
                let viaStdin = index % 2 == 0
                let child = try HelperProcess(
                    "vault",
                    arguments: ["get", key.service, key.account, "--fresh", "--rejected-token-file", viaStdin ? "-" : rejected],
                    environment: scratch.environment(.encryptedFile), outputPath: scratch.path("rejected-\(index).out"))
                if viaStdin { child.process.standardInput = FileHandle(forReadingAtPath: rejected) }
                try child.start()
                children.append(child)
            }
            let pids = children.map(\.process.processIdentifier)
            try await eventually("all \(count) processes waiting on the key's lock") { descriptors(on: lockFile, among: pids).count == count }
            close(descriptor)
            released = true

            var printed: [String] = []
            for child in children {
                let status = try await child.wait(bound: .seconds(60))
                #expect(status == 0, "vault get --rejected-token-file exited \(status): \(child.errorOutput)")
                printed.append(child.output)
            }
            let stored = try #require(try await vault.token(for: key))
            #expect(stored.accessToken != token.accessToken)
            #expect(Set(printed) == ["\(stored.accessToken)\n"], "all printed the one new token")
            #expect(try await server.stats(user: user).refreshRequests == 1)
            #expect(try await server.user(for: stored) == user)

            // Reported again later, the old token is answered with the newer one: no refresh.
            let late = try HelperProcess(
                "vault", arguments: ["get", key.service, key.account, "--rejected-token-file", rejected],
                environment: scratch.environment(.encryptedFile), outputPath: scratch.path("late.out"))
            try late.start()
            #expect(try await late.wait(bound: .seconds(60)) == 0, "\(late.errorOutput)")
            #expect(late.output == "\(stored.accessToken)\n")
            #expect(try await server.stats(user: user).refreshRequests == 1)
        }
    }
}

extension TestOAuthServer {
    /// server.py's held request `id`: `arrived` (GET, answers once the request is there) or
    /// `release` (POST).
    func held(_ id: String, _ action: String, method: String) async throws -> [String: Any] {
        var request = URLRequest(url: url.appendingPathComponent("api/held/\(id)/\(action)"))
        request.httpMethod = method
        request.timeoutInterval = 150
        let (data, response) = try await URLSession.shared.data(for: request)
        try #require((response as? HTTPURLResponse)?.statusCode == 200)
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }
}
#endif
