#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

import Glibc

/// `vault run` with real children: the token reaches the command's environment and no process's
/// argv, signals reach the command, its status comes back, and a token that cannot be had starts
/// nothing. The children report on their stdout (never the token: whether it matches a file that
/// holds it) and wait on their stdin, so every step is synchronised on a line, not on time.
@Suite struct RunCommandTests {
    static let token = "tvrun_Access_7Qm2xZ9pLw4Kc8Vb"

    /// A sandbox whose file vault holds `token` for run/acct, valid for an hour, and a 0600 file
    /// holding the token for the children to compare with.
    private func sandbox() throws -> CLISandbox {
        let sandbox = try CLISandbox()
        let set = try sandbox.vault("set", "run", "acct", "--expires-in", "3600", stdin: Data("\(Self.token)\n".utf8))
        try #require(set.status == 0, "\(set)")
        let expected = sandbox.root.appendingPathComponent("expected")
        try #require(FileManager.default.createFile(atPath: expected.path, contents: Data(Self.token.utf8), attributes: [.posixPermissions: 0o600]))
        return sandbox
    }

    /// The vault settings as environment variables: they pass through to the command.
    private func settings(_ sandbox: CLISandbox) -> [String: String] {
        ["TOKEN_VAULT_BACKEND": "file", "TOKEN_VAULT_FILE": sandbox.vaultFile.path, "TOKEN_VAULT_KEY_FILE": sandbox.keyFile.path]
    }

    /// Starts `vault run <arguments>` (through `/bin/sh -c prelude` when given, which then execs it),
    /// stdin and stdout pipes, stderr in a file.
    private func start(_ sandbox: CLISandbox, _ arguments: [String], prelude: String? = nil, extra: [String: String] = [:]) throws
        -> (ChildProcess, stderr: URL)
    {
        let vault = try Products.executable("vault")
        let stderr = sandbox.root.appendingPathComponent("run-\(UUID().uuidString).err")
        let environment = sandbox.environment.merging(settings(sandbox)) { $1 }.merging(extra) { $1 }
        let child: ChildProcess
        if let prelude {
            child = try ChildProcess(
                "/bin/sh", ["-c", "\(prelude); exec \"$@\"", "sh", vault, "run"] + arguments, environment: environment, input: true,
                output: true, errorPath: stderr.path)
        } else {
            child = try ChildProcess(vault, ["run"] + arguments, environment: environment, input: true, output: true, errorPath: stderr.path)
        }
        return (child, stderr)
    }

    /// Every process whose command line holds `secret`, from /proc.
    static func processesShowing(_ secret: String) -> [String] {
        let needle = Data(secret.utf8)
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.filter { Int($0) != nil } ?? []
        return pids.filter { pid in
            FileManager.default.contents(atPath: "/proc/\(pid)/cmdline")?.range(of: needle) != nil
        }
    }

    private func readLine(_ child: ChildProcess) async throws -> String? {
        try await offPool { child.readLine() }
    }

    @Test func theTokenIsInTheCommandsEnvironmentAndInNoProcesssArguments() async throws {
        let sandbox = try sandbox()
        let expected = sandbox.root.appendingPathComponent("expected").path
        // The command: is TOKEN set, does it match, are the vault's settings there, its pid; then
        // it waits for a line on stdin and exits 7.
        let script = """
            if [ -n "${TOKEN+set}" ]; then echo set; else echo unset; fi
            if [ "$TOKEN" = "$(cat "$1")" ]; then echo match; else echo differs; fi
            echo "settings ${TOKEN_VAULT_FILE:+file} ${TOKEN_VAULT_KEY_FILE:+key} ${OTHER:-none}"
            echo "pid $$"
            read line
            exit 7
            """
        let (child, stderr) = try start(
            sandbox, ["--env", "TOKEN=run/acct", "--", "sh", "-c", script, "sh", expected], extra: ["TOKEN": "stale", "OTHER": "kept"])
        defer { child.stop() }
        #expect(try await readLine(child) == "set")
        #expect(try await readLine(child) == "match", "the command did not get the stored token in TOKEN (it had one named so already)")
        #expect(try await readLine(child) == "settings file key kept")
        let pidLine = try #require(try await readLine(child))
        let pid = try #require(Int32(pidLine.dropFirst(4)))

        // While the command runs: its arguments, vault's, and every other process's hold no token.
        #expect(Self.processesShowing(Self.token).isEmpty)
        let arguments = try #require(FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"))
        #expect(arguments.range(of: Data("sh".utf8)) != nil, "not the command's /proc entry")
        #expect(arguments.range(of: Data(Self.token.utf8)) == nil)
        #expect(FileManager.default.contents(atPath: "/proc/\(pid)/environ")?.range(of: Data("TOKEN=\(Self.token)".utf8)) != nil)
        // vault waits for its command: the command is vault's child.
        let status = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        let parent = status.split(separator: ")").last?.split(separator: " ").dropFirst(1).first
        #expect(parent.flatMap { Int32($0) } == child.pid)

        try child.input?.write(contentsOf: Data("go\n".utf8))
        let raw = child.wait()
        #expect(raw & 0x7f == 0 && (raw >> 8) & 0xff == 7, "vault did not exit with the command's status 7 (raw \(raw))")
        #expect(try String(contentsOf: stderr, encoding: .utf8).isEmpty)
    }

    @Test func theCommandGetsTheCallersDescriptorsAndIgnoredSignalsButNoneOfVaults() async throws {
        let sandbox = try sandbox()
        let given = sandbox.root.appendingPathComponent("given")
        try Data("given\n".utf8).write(to: given)
        let script = "echo \"pid $$\"; read line"
        // The caller gives descriptor 5 and ignores SIGHUP, as `nohup` does, then execs vault.
        let (child, _) = try start(
            sandbox, ["--env", "TOKEN=run/acct", "--", "sh", "-c", script], prelude: "exec 5<'\(given.path)'; trap '' HUP")
        defer { child.stop() }
        let pidLine = try #require(try await readLine(child))
        let pid = try #require(Int32(pidLine.dropFirst(4)))

        let descriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").compactMap { Int32($0) }.sorted()
        #expect(descriptors == [0, 1, 2, 5], "the command holds descriptors vault opened (the vault file, its locks): \(descriptors)")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/5") == given.path)
        // vault itself held the vault file open: the command was spared it, not vault.
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let ignored = try #require(status.split(separator: "\n").first { $0.hasPrefix("SigIgn:") }?.split(separator: "\t").last)
        let mask = try #require(UInt64(ignored, radix: 16))
        #expect(mask & (1 << (UInt64(SIGHUP) - 1)) != 0, "SIGHUP, ignored by vault's caller, is not ignored by the command")
        #expect(mask & (1 << (UInt64(SIGTERM) - 1)) == 0)

        try child.input?.write(contentsOf: Data("go\n".utf8))
        #expect(child.wait() == 0)
    }

    @Test(arguments: [("TERM", SIGTERM), ("INT", SIGINT), ("HUP", SIGHUP), ("QUIT", SIGQUIT), ("USR1", SIGUSR1), ("USR2", SIGUSR2)])
    func aSignalSentToVaultReachesTheCommand(_ name: String, _ signal: Int32) async throws {
        let sandbox = try sandbox()
        // The command traps the signal, says so, ends its sleep and exits 42.
        let script = "trap 'echo got-\(name); kill $p; exit 42' \(name); sleep 1000 & p=$!; echo ready; wait $p; echo woke-without-signal"
        let (child, stderr) = try start(sandbox, ["--env", "TOKEN=run/acct", "--", "sh", "-c", script])
        defer { child.stop() }
        #expect(try await readLine(child) == "ready")
        child.kill(signal)
        #expect(try await readLine(child) == "got-\(name)")
        let raw = child.wait()
        #expect(raw & 0x7f == 0, "vault was ended by the signal instead of passing it on (raw \(raw))")
        #expect((raw >> 8) & 0xff == 42)
        #expect(try String(contentsOf: stderr, encoding: .utf8).isEmpty)
    }

    /// ^C at a terminal reaches the whole foreground process group, the command included: vault
    /// does not send it a second time. (The command writes to stderr, the terminal.) (A signal vault forwards, SIGUSR1 here, comes after any
    /// pending SIGINT: sh runs pending traps in signal-number order.)
    @Test func theTerminalsInterruptReachesTheCommandOnce() throws {
        let sandbox = try sandbox()
        let script = """
            exec >&2
            trap 'echo got-INT' INT
            trap 'echo got-USR1; kill $p; exit 0' USR1
            sleep 1000 & p=$!
            echo "ready $PPID"
            while kill -0 $p 2>/dev/null; do wait $p; done
            """
        let session = try PseudoTerminalSession(
            sandbox, ["run", "--env", "T=run/acct", "--", "sh", "-c", script], environment: settings(sandbox), controllingTerminal: true)
        #expect(session.waitFor("ready "), "\(session.screen)")
        let vaultPID = try #require(
            session.screen.split(separator: "\n").first { $0.hasPrefix("ready ") }.flatMap { Int32($0.dropFirst(6).trimmingCharacters(in: .whitespacesAndNewlines)) })
        // Whatever happens below, the command ends: its USR1 trap stops its sleep and exits.
        defer { if session.process.isRunning { _ = kill(vaultPID, SIGUSR1) } }
        session.type([0x03])
        #expect(session.waitFor("got-INT"), "\(session.screen)")
        #expect(kill(vaultPID, SIGUSR1) == 0)
        #expect(session.waitFor("got-USR1"), "\(session.screen)")
        let (status, _) = session.finish()
        #expect(status == 0, "\(session.screen)")
        #expect(session.screen.components(separatedBy: "got-INT").count - 1 == 1, "the command got ^C twice: \(session.screen)")
    }

    @Test func aCommandEndedByASignalIsExit128PlusTheSignal() async throws {
        let sandbox = try sandbox()
        let (child, _) = try start(sandbox, ["--env", "TOKEN=run/acct", "--", "sh", "-c", "echo ready; exec sleep 1000"])
        defer { child.stop() }
        #expect(try await readLine(child) == "ready")
        child.kill(SIGTERM)
        let raw = child.wait()
        #expect(raw & 0x7f == 0, "vault itself died of the signal (raw \(raw))")
        #expect((raw >> 8) & 0xff == 128 + SIGTERM)

        let killed = try sandbox.run("vault", ["run", "--env", "T=run/acct", "--", "sh", "-c", "kill -KILL $$"], environment: settings(sandbox))
        #expect(killed.status == 128 + SIGKILL, "\(killed)")
    }

    @Test func exitStatusesOfTheCommandAndOfAMissingOrUnrunnableOne() throws {
        let sandbox = try sandbox()
        let env = settings(sandbox)
        for code in [0, 1, 2, 3, 64, 125, 255] {
            let result = try sandbox.run("vault", ["run", "--env", "T=run/acct", "--", "sh", "-c", "exit \(code)"], environment: env)
            #expect(result.status == Int32(code), "\(result)")
        }
        let missing = try sandbox.run("vault", ["run", "--env", "T=run/acct", "--", "no-such-command-tv"], environment: env)
        #expect(missing.status == 127, "\(missing)")
        #expect(missing.stderr.contains("no-such-command-tv: command not found"), "\(missing.stderr)")

        let plain = sandbox.root.appendingPathComponent("not-executable")
        try #require(FileManager.default.createFile(atPath: plain.path, contents: Data("#!/bin/sh\n".utf8), attributes: [.posixPermissions: 0o600]))
        for path in [plain.path, sandbox.root.path] {
            let refused = try sandbox.run("vault", ["run", "--env", "T=run/acct", "--", path], environment: env)
            #expect(refused.status == 126, "\(refused)")
            #expect(refused.stderr.contains("cannot be run"), "\(refused.stderr)")
        }
        // The command's own options after -- are its, even where they are vault's names.
        let options = try sandbox.run(
            "vault", ["run", "--env", "T=run/acct", "--", "sh", "-c", "echo \"$@\"", "sh", "--file", "x", "--help"], environment: env)
        #expect(options.status == 0, "\(options)")
        #expect(options.stdout == "--file x --help\n")
    }

    @Test func nothingStartsWhenATokenCannotBeHad() throws {
        let sandbox = try sandbox()
        let env = settings(sandbox)
        let marker = sandbox.root.appendingPathComponent("started")
        let command = ["--", "sh", "-c", "touch '\(marker.path)'"]

        let missing = try sandbox.run("vault", ["run", "--env", "A=run/acct", "--env", "B=nope"] + command, environment: env)
        #expect(missing.status == 2, "\(missing)")
        #expect(missing.stderr.contains("B: No token is stored for nope"), "\(missing.stderr)")
        #expect(missing.stderr.contains("was not started"))

        let stale = try sandbox.vault("set", "stale", "--expires-in", "30", stdin: Data("tvrun_Stale_9aX\n".utf8))
        try #require(stale.status == 0)
        let expired = try sandbox.run("vault", ["run", "--env", "S=stale"] + command, environment: env)
        #expect(expired.status == 3, "\(expired)")
        #expect(expired.stderr.contains("no refresh description"), "\(expired.stderr)")
        #expect(!expired.stderr.contains("tvrun_Stale"))

        let noVault = try sandbox.run(
            "vault", ["run", "--env", "A=run/acct"] + command,
            environment: env.merging(["TOKEN_VAULT_FILE": sandbox.root.appendingPathComponent("none.vault").path]) { $1 })
        #expect(noVault.status == 2, "\(noVault)")
        #expect(!FileManager.default.fileExists(atPath: sandbox.root.appendingPathComponent("none.vault").path))

        #expect(!FileManager.default.fileExists(atPath: marker.path), "the command was started")
        for output in [missing, expired, noVault] { #expect(!output.stderr.contains(Self.token)) }
    }

    @Test func badEnvOptionsAreUsageErrors() throws {
        let sandbox = try sandbox()
        let env = settings(sandbox)
        for (arguments, words) in [
            (["--env", "1X=run/acct", "--", "true"], "not an environment variable name"),
            (["--env", "A-B=run/acct", "--", "true"], "not an environment variable name"),
            (["--env", "A=run/acct", "--env", "A=run", "--", "true"], "A is given twice"),
            (["--env", "A", "--", "true"], "NAME=SERVICE"),
            (["--env", "A=", "--", "true"], "NAME=SERVICE"),
            (["--env", "TOKEN_VAULT_FILE=run", "--", "true"], "vault's own settings"),
            (["--env", "A=run/acct"], "after --"),
            (["--", "true"], "at least one --env"),
        ] {
            let result = try sandbox.run("vault", ["run"] + arguments, environment: env)
            #expect(result.status == 64, "\(arguments): \(result)")
            #expect(result.stderr.contains(words), "\(arguments): \(result.stderr)")
        }
    }
}
#endif
