#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking  // URLSession on Linux
#endif
import Testing
@testable import TokenVaultTestSupport
import TokenVault
@testable import TokenVaultGit

import Glibc

/// `vault git-credential` driven by real git (Debian's 2.39) against a smart-HTTP git server on
/// 127.0.0.1 (Tests/git-server/server.py: `git http-backend` behind a server that accepts only a
/// live bearer token of the test OAuth server as the Basic-auth password), and through
/// `git credential fill/approve/reject`.
@Suite(.serialized) struct GitCredentialServerTests {
    /// A command's outcome.
    struct Outcome: CustomStringConvertible {
        var status: Int32
        var stdout: String
        var stderr: String
        var description: String { "exit \(status)\nstdout: \(stdout)\nstderr: \(stderr)" }
    }

    /// Runs `executable` and waits for it (killing it after `bound`), stdin from `input`.
    static func run(
        _ executable: String, _ arguments: [String], environment: [String: String], directory: String? = nil,
        input: String? = nil, scratch: VaultScratch, bound: Duration = .seconds(120)
    ) async throws -> Outcome {
        let label = "cmd-\(UUID().uuidString.prefix(8))"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let out = scratch.path("\(label).out")
        let err = scratch.path("\(label).err")
        let inPath = scratch.path("\(label).in")
        for file in [out, err, inPath] {
            guard FileManager.default.createFile(atPath: file, contents: Data(), attributes: [.posixPermissions: 0o600]) else {
                throw VaultScratch.ScratchError(description: "could not create \(file)")
            }
        }
        try Data((input ?? "").utf8).write(to: URL(fileURLWithPath: inPath))
        process.standardInput = FileHandle(forReadingAtPath: inPath)
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: err))
        let (stream, continuation) = AsyncStream<Int32>.makeStream()
        try process.run()
        Thread {
            process.waitUntilExit()
            continuation.yield(process.terminationStatus)
            continuation.finish()
        }.start()
        let watchdog = Task {
            try await Task.sleep(for: bound)
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        defer { watchdog.cancel() }
        var status: Int32 = -1
        for await value in stream { status = value }
        return Outcome(
            status: status, stdout: try String(contentsOfFile: out, encoding: .utf8),
            stderr: try String(contentsOfFile: err, encoding: .utf8))
    }

    /// The git server: started on a free port, stopped by its PID.
    final class GitServer: @unchecked Sendable {
        let process = Process()
        let root: String
        let port: Int
        private let exited: AsyncStream<Int32>

        /// Tests/git-server/server.py, found from this file.
        static let script = PackageFiles.path("Tests/git-server/server.py")

        init(root: String, oauth: TestOAuthServer, scratch: VaultScratch) async throws {
            self.root = root
            let portFile = scratch.path("git-server.port")
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = [Self.script, "--root", root, "--oauth-url", oauth.url.absoluteString, "--port-file", portFile]
            let log = scratch.path("git-server.log")
            _ = FileManager.default.createFile(atPath: log, contents: Data())
            process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
            process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
            let (stream, continuation) = AsyncStream<Int32>.makeStream()
            exited = stream
            try process.run()
            let process = self.process
            Thread {
                process.waitUntilExit()
                continuation.yield(process.terminationStatus)
                continuation.finish()
            }.start()
            try await eventually("the git server writes its port", bound: .seconds(30)) {
                try #require(process.isRunning, "the git server exited: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
                return FileManager.default.fileExists(atPath: portFile)
            }
            port = try #require(Int(try String(contentsOfFile: portFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
        }

        var url: String { "http://127.0.0.1:\(port)" }

        /// How many requests the server has refused so far (its `/_stats`).
        func refused() async throws -> Int {
            let (data, _) = try await URLSession.shared.data(from: try #require(URL(string: "\(url)/_stats")))
            let stats = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            return try #require(stats["refused"] as? Int)
        }

        /// SIGTERM (the server unblocks it: a child of this multi-threaded runner starts with
        /// signals blocked), SIGKILL if it has not exited within 10 s.
        func stop() async {
            let process = self.process
            kill(process.processIdentifier, SIGTERM)
            let watchdog = Task {
                try await Task.sleep(for: .seconds(10))
                if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            }
            for await _ in exited {}
            watchdog.cancel()
        }
    }

    /// A scratch world for git: a vault, a bare repository with one commit served over HTTP, and a
    /// git configuration of its own whose credential helper is the built `vault`.
    struct GitWorld {
        let scratch: VaultScratch
        let server: GitServer
        let environment: [String: String]
        let vaultPath: String

        static func make(
            _ scratch: VaultScratch, oauth: TestOAuthServer, helperArguments: [String]
        ) async throws -> GitWorld {
            let vaultPath = try Products.executable("vault")
            let home = scratch.path("home")
            try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: false)
            var environment = scratch.environment(.encryptedFile)
            for name in ["GIT_ASKPASS", "SSH_ASKPASS", "GIT_DIR", "GIT_WORK_TREE", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS"] {
                environment.removeValue(forKey: name)
            }
            environment["HOME"] = home
            environment["GIT_CONFIG_NOSYSTEM"] = "1"
            environment["GIT_CONFIG_GLOBAL"] = (home as NSString).appendingPathComponent(".gitconfig")
            environment["GIT_TERMINAL_PROMPT"] = "0"
            environment["LC_ALL"] = "C"
            let helper = (["!'\(vaultPath)'", "git-credential"] + helperArguments).joined(separator: " ")
            let config = """
                [user]
                \tname = TokenVault Test
                \temail = test@tokenvault.invalid
                [init]
                \tdefaultBranch = main
                [credential]
                \thelper = \(helper)

                """
            try Data(config.utf8).write(to: URL(fileURLWithPath: environment["GIT_CONFIG_GLOBAL"]!))

            // The served repository, with one commit.
            let root = scratch.path("srv")
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
            let seed = scratch.path("seed")
            for arguments in [
                ["init", "--quiet", "--bare", "\(root)/repo.git"],
                ["--git-dir", "\(root)/repo.git", "config", "http.receivepack", "true"],
                ["init", "--quiet", seed],
                ["-C", seed, "commit", "--quiet", "--allow-empty", "-m", "seed commit"],
                ["-C", seed, "push", "--quiet", "\(root)/repo.git", "main"],
            ] {
                let outcome = try await GitCredentialServerTests.run("/usr/bin/git", arguments, environment: environment, scratch: scratch)
                try #require(outcome.status == 0, "git \(arguments.joined(separator: " ")): \(outcome)")
            }
            let server = try await GitServer(root: root, oauth: oauth, scratch: scratch)
            return GitWorld(scratch: scratch, server: server, environment: environment, vaultPath: vaultPath)
        }

        func git(_ arguments: [String], in directory: String? = nil, input: String? = nil) async throws -> Outcome {
            try await GitCredentialServerTests.run(
                "/usr/bin/git", arguments, environment: environment, directory: directory, input: input, scratch: scratch)
        }

        func helper(_ arguments: [String], input: String) async throws -> Outcome {
            try await GitCredentialServerTests.run(
                vaultPath, ["git-credential"] + arguments, environment: environment, input: input, scratch: scratch)
        }
    }

    /// Runs `body` in a fresh world and always stops the git server.
    private func withWorld(
        helperArguments: [String], _ body: (GitWorld, Vault, TestOAuthServer) async throws -> Void
    ) async throws {
        let oauth = try TestOAuthServer.require()
        let scratch = try VaultScratch()
        defer { scratch.remove() }
        let vault = try await scratch.open(.encryptedFile)
        let world = try await GitWorld.make(scratch, oauth: oauth, helperArguments: helperArguments)
        do {
            try await body(world, vault, oauth)
        } catch {
            await world.server.stop()
            throw error
        }
        await world.server.stop()
    }

    private func expectNoSecret(_ outcome: Outcome, _ secrets: [String?], _ what: String) {
        for case let secret? in secrets {
            #expect(!outcome.stdout.contains(secret) && !outcome.stderr.contains(secret), "\(what) showed a secret")
        }
    }

    @Test func cloneAndPushRefreshingATokenThatExpiresOnTheWay() async throws {
        let user = uniqueName("git-push")
        let service = uniqueName("tv-git")
        try await withWorld(helperArguments: ["--service", service]) { world, vault, oauth in
            let key = try CredentialKey(service: service)
            let login = try await oauth.login(user: user)
            try await vault.saveToken(login, for: key, registration: try oauth.publicClient())

            // The server's tokens live 10 s, inside the helper's 60 s leeway: get refreshes first.
            let clone = world.scratch.path("clone")
            let cloned = try await world.git(["clone", "--quiet", "\(world.server.url)/repo.git", clone])
            #expect(cloned.status == 0, "\(cloned)")
            #expect(FileManager.default.fileExists(atPath: "\(clone)/.git"))
            #expect(try await oauth.stats(user: user).refreshSucceeded == 1)
            let first = try #require(try await vault.token(for: key))
            #expect(first.accessToken != login.accessToken)
            #expect(try await vault.registration(for: key) != nil, "git's store dropped the refresh description")

            // Let that token expire at the server: the git server now refuses it.
            try await eventually("the access token expires at the server", bound: .seconds(60)) {
                try await oauth.user(for: first) == nil
            }
            let commit = try await world.git(["-C", clone, "commit", "--quiet", "--allow-empty", "-m", "pushed through the vault"])
            try #require(commit.status == 0, "\(commit)")
            let pushed = try await world.git(["-C", clone, "push", "--quiet", "origin", "main"])
            #expect(pushed.status == 0, "\(pushed)")
            #expect(try await oauth.stats(user: user).refreshSucceeded == 2)
            let second = try #require(try await vault.token(for: key))
            #expect(second.accessToken != first.accessToken)
            let log = try await world.git(["--git-dir", "\(world.server.root)/repo.git", "log", "--format=%s", "main"])
            #expect(log.stdout.contains("pushed through the vault"), "\(log)")
            for outcome in [cloned, pushed] {
                expectNoSecret(
                    outcome, [login.accessToken, login.refreshToken, first.accessToken, first.refreshToken, second.accessToken],
                    "git")
            }
        }
    }

    @Test func aRevokedRefreshTokenEndsInGitsOwnAuthenticationFailed() async throws {
        let user = uniqueName("git-revoked")
        try await withWorld(helperArguments: []) { world, vault, oauth in
            // Default mapping: the service is the git server's host and port, the account 'default'.
            let key = try CredentialKey(service: "127.0.0.1:\(world.server.port)")
            let login = try await oauth.login(user: user)
            // A second client spends the refresh token behind the vault's back: presenting it
            // again is reuse, and the server revokes the whole family, access tokens included.
            try await oauth.spendRefreshToken(of: login)
            let refreshesBefore = try await oauth.stats(user: user).refreshRequests
            var stale = login
            stale.expiresAt = Date().addingTimeInterval(-5)
            try await vault.saveToken(stale, for: key, registration: try oauth.publicClient())

            // The helper's refresh is rejected: it says why (log in again) and answers the stale
            // token, which the git server refuses, so git fails with its own "Authentication
            // failed", never a prompt (GIT_TERMINAL_PROMPT=0 would make that "terminal prompts
            // disabled"). git's reject then keeps the entry: it records that a login is needed.
            let refusedBefore = try await world.server.refused()
            let target = world.scratch.path("clone-1")
            let first = try await world.git(["clone", "--quiet", "\(world.server.url)/repo.git", target])
            #expect(first.status == 128, "\(first)")
            #expect(first.stderr.contains("log in again"), "\(first)")
            #expect(first.stderr.contains("fatal: Authentication failed for '\(world.server.url)/repo.git/'"), "\(first)")
            #expect(!first.stderr.contains("terminal prompts disabled") && !first.stderr.contains("could not read"), "\(first)")
            #expect(try await world.server.refused() > refusedBefore, "git never sent the stale token")
            #expect(!FileManager.default.fileExists(atPath: target))
            #expect(try await oauth.stats(user: user).reuseDetected == 1)
            #expect(try await oauth.stats(user: user).refreshRequests == refreshesBefore + 1)
            #expect(try await vault.refreshTokenRejection(for: key) != nil)
            #expect(try await vault.registration(for: key) != nil, "git's reject erased the entry that needs a login")

            // Again: the same clean failure, from the stored verdict, without asking the server again.
            let again = try await world.git(["clone", "--quiet", "\(world.server.url)/repo.git", target])
            #expect(again.status == 128, "\(again)")
            #expect(again.stderr.contains("log in again") && again.stderr.contains("Authentication failed for"), "\(again)")
            #expect(try await oauth.stats(user: user).refreshRequests == refreshesBefore + 1)

            // An access token the vault believes valid but the server has revoked: git sends it,
            // is refused, reports its own "Authentication failed" and erases it through the helper,
            // which keeps the entry (it holds a refresh description) and marks the token expired.
            var believed = login
            believed.expiresAt = Date().addingTimeInterval(3600)
            try await vault.saveToken(believed, for: key, registration: try oauth.publicClient())
            let second = try await world.git(["clone", "--quiet", "\(world.server.url)/repo.git", world.scratch.path("clone-2")])
            #expect(second.status != 0)
            #expect(second.stderr.contains("Authentication failed for '\(world.server.url)/repo.git/'"), "\(second)")
            #expect(try await vault.token(for: key)?.isExpired(leeway: 0) == true, "git's reject left the refused token valid")
            #expect(try await vault.registration(for: key) != nil, "git's reject erased the entry that needs a login")
            #expect(try await oauth.stats(user: user).refreshRequests == refreshesBefore + 1, "a rejected refresh token was presented again")
            for outcome in [first, again, second] {
                expectNoSecret(outcome, [login.accessToken, login.refreshToken], "git")
                #expect(!outcome.stderr.contains("Fatal error") && !outcome.stderr.contains("Stack dump"), "\(outcome)")
            }
        }
    }

    /// Issue 34, point 6: one 401 from the git server must not cost the login. An entry made as
    /// `vault login` makes it (token, refresh token, refresh description) whose access token the
    /// server no longer takes: git is refused, calls erase, and the helper keeps the entry, so the
    /// next clone refreshes and works, with no new login.
    @Test func aRefusedAccessTokenCostsNoLogin() async throws {
        let user = uniqueName("git-401")
        try await withWorld(helperArguments: []) { world, vault, oauth in
            let key = try CredentialKey(service: "127.0.0.1:\(world.server.port)")
            let login = try await oauth.login(user: user)
            var believed = login
            believed.expiresAt = Date().addingTimeInterval(3600)
            try await vault.saveToken(believed, for: key, registration: try oauth.publicClient())
            // The server's access tokens live a few seconds; the vault believes this one has an hour.
            try await eventually("the access token expires at the server", bound: .seconds(60)) {
                try await oauth.user(for: login) == nil
            }
            let refused = try await world.git(["clone", "--quiet", "\(world.server.url)/repo.git", world.scratch.path("clone-1")])
            #expect(refused.status == 128, "\(refused)")
            #expect(refused.stderr.contains("Authentication failed for '\(world.server.url)/repo.git/'"), "\(refused)")
            let kept = try #require(try await vault.token(for: key), "git's erase after one 401 deleted the entry vault login made")
            #expect(kept.refreshToken == login.refreshToken)
            #expect(kept.isExpired(leeway: 0))
            #expect(try await vault.registration(for: key) == (try oauth.publicClient()))
            #expect(try await oauth.stats(user: user).refreshRequests == 0)

            let again = try await world.git(["clone", "--quiet", "\(world.server.url)/repo.git", world.scratch.path("clone-2")])
            #expect(again.status == 0, "\(again)")
            #expect(try await oauth.stats(user: user).refreshSucceeded == 1)
            for outcome in [refused, again] {
                expectNoSecret(outcome, [login.accessToken, login.refreshToken], "git")
            }
        }
    }

    /// The everyday first use: a URL without a user name and nothing in the vault. git asks (here
    /// GIT_ASKPASS answers, as a person would at the prompt), the clone works, git stores the
    /// credential under the user name typed; the next clone of the same URL asks no one, though
    /// git again sends no user name.
    @Test func aURLWithoutAUserNameNeedsThePromptOnlyOnce() async throws {
        let user = uniqueName("git-prompted")
        try await withWorld(helperArguments: []) { world, vault, oauth in
            let login = try await oauth.login(user: user)
            let tokenFile = world.scratch.path("typed-password")
            try #require(FileManager.default.createFile(
                atPath: tokenFile, contents: Data(login.accessToken.utf8), attributes: [.posixPermissions: 0o600]))
            let askpass = world.scratch.path("askpass")
            let script = "#!/bin/sh\ncase \"$1\" in Username*) echo alice ;; *) cat '\(tokenFile)' ;; esac\n"
            try #require(FileManager.default.createFile(atPath: askpass, contents: Data(script.utf8), attributes: [.posixPermissions: 0o700]))
            var prompting = world.environment
            prompting["GIT_ASKPASS"] = askpass

            let first = try await GitCredentialServerTests.run(
                "/usr/bin/git", ["clone", "--quiet", "\(world.server.url)/repo.git", world.scratch.path("clone-1")],
                environment: prompting, scratch: world.scratch)
            #expect(first.status == 0, "\(first)")
            let key = try CredentialKey(service: "127.0.0.1:\(world.server.port)", account: "alice")
            #expect(try await vault.token(for: key)?.accessToken == login.accessToken, "git did not store what was typed")

            // No askpass now, and prompts disabled: only the helper can answer.
            let second = try await world.git(["clone", "--quiet", "\(world.server.url)/repo.git", world.scratch.path("clone-2")])
            #expect(second.status == 0, "\(second)")
            #expect(try await vault.keys() == [key], "the second clone stored a second entry")

            // A second account on the host: git without a user name gets no answer and a note
            // naming both; with the user name in the URL, the right one.
            try await vault.saveToken(OAuthToken(accessToken: "not-a-live-token"), for: CredentialKey(service: key.service, account: "bob"))
            let ambiguous = try await world.git(["clone", "--quiet", "\(world.server.url)/repo.git", world.scratch.path("clone-3")])
            #expect(ambiguous.status != 0 && ambiguous.stderr.contains("terminal prompts disabled"), "\(ambiguous)")
            #expect(ambiguous.stderr.contains("2 accounts (alice, bob)") && ambiguous.stderr.contains("--account"), "\(ambiguous)")
            let named = world.server.url.replacingOccurrences(of: "http://", with: "http://alice@")
            let third = try await world.git(["clone", "--quiet", "\(named)/repo.git", world.scratch.path("clone-4")])
            #expect(third.status == 0, "\(third)")
            for outcome in [first, second, ambiguous, third] {
                expectNoSecret(outcome, [login.accessToken, login.refreshToken], "git")
            }
        }
    }

    @Test func gitCredentialFillApproveRejectThroughTheHelper() async throws {
        try await withWorld(helperArguments: []) { world, vault, _ in
            let secret = "tv-git-\(UUID().uuidString)"
            let request = "protocol=https\nhost=Git.Example.test:8443\nusername=alice\n"
            let key = try CredentialKey(service: "git.example.test:8443", account: "alice")

            let none = try await world.git(["credential", "fill"], input: request + "\n")
            #expect(none.status != 0 && none.stderr.contains("terminal prompts disabled"), "\(none)")

            let approved = try await world.git(["credential", "approve"], input: request + "password=\(secret)\n\n")
            #expect(approved.status == 0, "\(approved)")
            #expect(try await vault.token(for: key)?.accessToken == secret)

            let filled = try await world.git(["credential", "fill"], input: request + "\n")
            #expect(filled.status == 0, "\(filled)")
            #expect(filled.stdout.contains("username=alice\npassword=\(secret)\n"), "\(filled)")

            // Plain http outside loopback gets nothing, with a note why.
            let plain = try await world.git(["credential", "fill"], input: "protocol=http\nhost=git.example.test:8443\nusername=alice\n\n")
            #expect(plain.status != 0 && !plain.stdout.contains(secret), "\(plain)")
            #expect(plain.stderr.contains("unencrypted"), "\(plain)")

            // Issue 34, point 5: no other protocol gets the token either: git imap-send would send
            // it as `LOGIN alice <token>` in clear, curl's ftp as `PASS <token>`.
            for scheme in ["imap", "smtp", "ftp"] {
                let other = try await world.git(
                    ["credential", "fill"], input: "protocol=\(scheme)\nhost=git.example.test:8443\nusername=alice\n\n")
                #expect(other.status != 0 && !other.stdout.contains(secret), "\(scheme): \(other)")
                #expect(other.stderr.contains("only https"), "\(scheme): \(other)")
                expectNoSecret(other, [secret], "git credential fill for \(scheme)")
            }
            let imapReject = try await world.git(
                ["credential", "reject"], input: "protocol=imap\nhost=git.example.test:8443\nusername=alice\npassword=\(secret)\n\n")
            #expect(imapReject.status == 0, "\(imapReject)")
            #expect(try await vault.token(for: key)?.accessToken == secret, "an imap reject erased the https entry")

            // A stale erase (another password) leaves the entry; the right one removes it.
            let stale = try await world.git(["credential", "reject"], input: request + "password=not-\(secret)\n\n")
            #expect(stale.status == 0, "\(stale)")
            #expect(try await vault.token(for: key)?.accessToken == secret)
            let rejected = try await world.git(["credential", "reject"], input: request + "password=\(secret)\n\n")
            #expect(rejected.status == 0, "\(rejected)")
            #expect(try await vault.token(for: key) == nil)

            for outcome in [none, approved, stale, rejected, plain] {
                expectNoSecret(outcome, [secret], "git credential")
            }
            #expect(!filled.stderr.contains(secret))
        }
    }

    @Test func theHelperKeepsExpiryAndRefreshTokenAndIgnoresWhatItDoesNotKnow() async throws {
        // git 2.39 does not pass password_expiry_utc or oauth_refresh_token to helpers (2.40/2.41
        // do), so the helper is driven directly, as those versions call it.
        try await withWorld(helperArguments: []) { world, vault, _ in
            let secret = "tv-git-\(UUID().uuidString)"
            let refresh = "tv-git-rt-\(UUID().uuidString)"
            let expiry = Int(Date().timeIntervalSince1970) + 3600
            let request = "capability[]=authtype\nprotocol=https\nhost=forge.example.test\n"
            let stored = try await world.helper(
                ["--service", "forge", "store"],
                input: request + "username=oauth2\npassword=\(secret)\npassword_expiry_utc=\(expiry)\noauth_refresh_token=\(refresh)\nwwwauth[]=Bearer\n\n")
            #expect(stored.status == 0 && stored.stdout.isEmpty && stored.stderr.isEmpty, "\(stored)")
            let token = try #require(try await vault.token(for: try CredentialKey(service: "forge", account: "oauth2")))
            #expect(token.accessToken == secret && token.refreshToken == refresh)
            #expect(token.expiresAt == Date(timeIntervalSince1970: TimeInterval(expiry)))

            let got = try await world.helper(["--service", "forge", "--account", "oauth2", "get"], input: request + "\n")
            #expect(got.status == 0, "\(got)")
            #expect(got.stdout == "username=oauth2\npassword=\(secret)\npassword_expiry_utc=\(expiry)\n", "\(got)")
            #expect(got.stderr.isEmpty)

            // No entry: nothing on stdout or stderr, exit 0. An operation git may add later: ignored.
            let missing = try await world.helper(["get"], input: "protocol=https\nhost=forge.example.test\nusername=nobody\n\n")
            #expect(missing.status == 0 && missing.stdout.isEmpty && missing.stderr.isEmpty, "\(missing)")
            let future = try await world.helper(["frobnicate"], input: request + "password=\(secret)\n\n")
            #expect(future.status == 0 && future.stdout.isEmpty && future.stderr.isEmpty, "\(future)")

            // Bad input: a clear error that does not quote it, never a crash.
            let bad = try await world.helper(["--service", "forge", "store"], input: "host=forge.example.test\n\(secret)\n\n")
            #expect(bad.status == 1, "\(bad)")
            #expect(bad.stderr.contains("not key=value") && !bad.stderr.contains(secret), "\(bad)")
            #expect(try await vault.token(for: try CredentialKey(service: "forge", account: "oauth2"))?.accessToken == secret)
            for outcome in [stored, missing, future] { expectNoSecret(outcome, [secret, refresh], "the helper") }
            #expect(!got.stdout.contains(refresh), "the refresh token was handed to git")
        }
    }

    /// The fenced code blocks of README.md's "On a server" section, in order: (language, body).
    static func readmeOnAServerBlocks() throws -> [(language: String, body: String)] {
        let readme = try String(contentsOfFile: PackageFiles.path("README.md"), encoding: .utf8)
        let lines = readme.components(separatedBy: "\n")
        let start = try #require(lines.firstIndex(of: "## On a server"), "README.md has no '## On a server' section")
        let end = lines[(start + 1)...].firstIndex { $0.hasPrefix("## ") } ?? lines.endIndex
        var blocks: [(language: String, body: String)] = []
        var open: (language: String, lines: [String])?
        for line in lines[start..<end] {
            if line.hasPrefix("```") {
                if let block = open {
                    blocks.append((block.language, block.lines.joined(separator: "\n") + "\n"))
                    open = nil
                } else {
                    open = (String(line.dropFirst(3)), [])
                }
            } else if open != nil {
                open?.lines.append(line)
            }
        }
        return blocks
    }

    /// README's "On a server" examples, each run as written: the git lines and the cron line with
    /// `vault` on the PATH (the cron line's example API replaced by the test server's), and the
    /// unit checked by `systemd-analyze verify`, its credential sealed and unsealed by
    /// `systemd-creds` under the name the unit gives, and `vault` run with the unit's environment
    /// and nothing else. (No unit is started: the test machine has no systemd as PID 1.) A new
    /// example in that section fails this test until it is run here too.
    @Test func theReadmeExamplesRunAsWritten() async throws {
        let blocks = try Self.readmeOnAServerBlocks()
        // The third "sh" block, "Logging in to Jira and GitHub", is run by ProviderLoginTests.
        #expect(blocks.map(\.language) == ["ini", "sh", "sh", "sh"], "README's On a server examples changed; run the new ones here")
        #expect(blocks.filter { $0.body.contains("vault login") }.count == 1)
        let unit = try #require(blocks.first { $0.language == "ini" }?.body)
        let gitLines = try #require(blocks.first { $0.body.contains("git config") }?.body)
        let cronLine = try #require(blocks.first { $0.body.contains("vault get --fresh") }?.body)

        let user = uniqueName("readme")
        try await withWorld(helperArguments: []) { world, vault, oauth in
            let products = (try Products.executable("vault") as NSString).deletingLastPathComponent
            var environment = world.environment
            environment["PATH"] = "\(products):/usr/bin:/bin"
            let configFile = try #require(environment["GIT_CONFIG_GLOBAL"])
            try Data().write(to: URL(fileURLWithPath: configFile))
            let configure = try await GitCredentialServerTests.run(
                "/bin/sh", ["-euc", gitLines], environment: environment, scratch: world.scratch)
            #expect(configure.status == 0, "\(configure)")
            let token = "tv-readme-\(UUID().uuidString)"
            try await vault.saveToken(OAuthToken(accessToken: token, expiresAt: Date().addingTimeInterval(3600)), for: CredentialKey(service: "github"))
            // The URL-specific helper (pinned to the entry 'github') answers for github.com ...
            let filled = try await GitCredentialServerTests.run(
                "/usr/bin/git", ["credential", "fill"], environment: environment, input: "protocol=https\nhost=github.com\n\n",
                scratch: world.scratch)
            #expect(filled.status == 0 && filled.stdout.contains("password=\(token)\n"), "\(filled)")
            // ... and the general one by host, for a host it has an entry for.
            let hostToken = "tv-readme-host-\(UUID().uuidString)"
            try await vault.saveToken(OAuthToken(accessToken: hostToken), for: CredentialKey(service: "git.example.test"))
            let byHost = try await GitCredentialServerTests.run(
                "/usr/bin/git", ["credential", "fill"], environment: environment, input: "protocol=https\nhost=git.example.test\n\n",
                scratch: world.scratch)
            #expect(byHost.status == 0 && byHost.stdout.contains("password=\(hostToken)\n"), "\(byHost)")

            // The cron line, against the test server's protected API.
            let login = try await oauth.login(user: user)
            try await vault.saveToken(login, for: CredentialKey(service: "api"), registration: try oauth.publicClient())
            let api = oauth.url.appendingPathComponent("api/me").absoluteString
            let example = try #require(cronLine.range(of: #"https://api\.example\.com[^ \n"']*"#, options: .regularExpression))
            let cron = try await GitCredentialServerTests.run(
                "/bin/sh", ["-euc", cronLine.replacingCharacters(in: example, with: api)],
                environment: environment, scratch: world.scratch)
            #expect(cron.status == 0 && cron.stdout.contains(user), "\(cron)")
            #expect(!cron.stdout.contains(login.accessToken) && !cron.stderr.contains(login.accessToken))

            try await checkUnit(unit, scratch: world.scratch, vaultPath: world.vaultPath)
        }
    }

    /// The README's unit: valid for systemd, and enough for `vault` with nothing else set.
    private func checkUnit(_ unit: String, scratch: VaultScratch, vaultPath: String) async throws {
        let base = ["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": scratch.path("home")]
        // systemd-analyze verify checks every key; ExecStart must name an executable that exists.
        let job = scratch.path("sync-job")
        try Data("#!/bin/sh\nexit 0\n".utf8).write(to: URL(fileURLWithPath: job))
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: job)
        let execStart = try #require(unit.range(of: #"(?m)^ExecStart=.*$"#, options: .regularExpression))
        let unitFile = scratch.path("sync.service")
        try Data(unit.replacingCharacters(in: execStart, with: "ExecStart=\(job)").utf8).write(to: URL(fileURLWithPath: unitFile))
        let verify = try await Self.run("/usr/bin/systemd-analyze", ["verify", unitFile], environment: base, scratch: scratch)
        #expect(verify.status == 0 && verify.stderr.isEmpty && verify.stdout.isEmpty, "systemd-analyze verify: \(verify)")

        // The unit's settings, as systemd would apply them.
        var settings: [String: [String]] = [:]
        for line in unit.split(separator: "\n") where !line.hasPrefix("#") && !line.hasPrefix("[") {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { settings[parts[0], default: []].append(parts[1]) }
        }
        let credential = try #require(settings["LoadCredentialEncrypted"]?.first?.split(separator: ":").first.map(String.init))
        #expect(credential == VaultConfiguration.systemdKeyCredential)
        let stateRoot = scratch.path("state")  // %S
        for directory in settings["StateDirectory"] ?? [] {
            try FileManager.default.createDirectory(
                atPath: (stateRoot as NSString).appendingPathComponent(directory), withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        }
        var environment = base
        for assignment in (settings["Environment"] ?? []).flatMap({ $0.split(separator: " ") }) {
            let parts = assignment.split(separator: "=", maxSplits: 1).map(String.init)
            try #require(parts.count == 2, "Environment=\(assignment)")
            environment[parts[0]] = parts[1].replacingOccurrences(of: "%S", with: stateRoot)
        }
        #expect(environment["TOKEN_VAULT_KEY_FILE"] == nil && environment["TOKEN_VAULT_PASSPHRASE_FILE"] == nil)

        // What LoadCredentialEncrypted= does: the key sealed once by systemd-creds encrypt under
        // the credential's name, unsealed at start into a directory of the service's own.
        let hostSecret = ["SYSTEMD_CREDENTIAL_SECRET": scratch.path("host.secret")]
        let sealed = scratch.path("token-vault.key.cred")
        let encrypt = try await Self.run(
            "/usr/bin/systemd-creds", ["encrypt", "--with-key=host", "--name=\(credential)", scratch.keyFile, sealed],
            environment: base.merging(hostSecret) { $1 }, scratch: scratch)
        try #require(encrypt.status == 0, "\(encrypt)")
        let credentials = scratch.path("credentials")
        try FileManager.default.createDirectory(atPath: credentials, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let decrypt = try await Self.run(
            "/usr/bin/systemd-creds", ["decrypt", "--name=\(credential)", sealed, (credentials as NSString).appendingPathComponent(credential)],
            environment: base.merging(hostSecret) { $1 }, scratch: scratch)
        try #require(decrypt.status == 0, "\(decrypt)")
        // systemd hands the service its credentials readable by it alone (0400).
        try FileManager.default.setAttributes(
            [.posixPermissions: 0o400], ofItemAtPath: (credentials as NSString).appendingPathComponent(credential))
        environment["CREDENTIALS_DIRECTORY"] = credentials

        let secret = "tv-readme-unit-\(UUID().uuidString)"
        let set = try await Self.run(vaultPath, ["set", "api"], environment: environment, input: "\(secret)\n", scratch: scratch)
        #expect(set.status == 0, "\(set)")
        let get = try await Self.run(vaultPath, ["get", "api"], environment: environment, scratch: scratch)
        #expect(get.status == 0 && get.stdout == "\(secret)\n", "\(get)")
        let vaultFile = try #require(environment["TOKEN_VAULT_FILE"])
        #expect(vaultFile.hasPrefix(stateRoot) && FileManager.default.fileExists(atPath: vaultFile))
        let status = try await Self.run(vaultPath, ["status"], environment: environment, scratch: scratch)
        #expect(status.status == 0 && status.stdout.contains("systemd credential \(credential)"), "\(status)")
        for outcome in [set, get, status] { #expect(!outcome.stderr.contains(secret)) }
    }
}
#endif
