#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVault
@testable import TokenVaultTestSupport

import Glibc

/// The real Secret Service provider that Scripts/test runs on a private session bus: gnome-keyring,
/// or KeePassXC or KWallet (Scripts/providers/run, which sets `TOKENVAULT_TEST_PROVIDER`).
enum SharedKeyring {
    /// Which provider serves the shared bus: `gnome-keyring`, `keepassxc` or `kwallet`.
    static var provider: String {
        ProcessInfo.processInfo.environment["TOKENVAULT_TEST_PROVIDER"] ?? "gnome-keyring"
    }

    /// The environment that reaches it, or a failed test that says how to get one. Never a skip.
    static func environment() throws -> [String: String] {
        let environment = ProcessInfo.processInfo.environment
        try #require(
            environment["TOKENVAULT_TEST_KEYRING"] == "1",
            "These tests need the throwaway gnome-keyring that Scripts/test starts on a private D-Bus. Run them with Scripts/test (e.g. Scripts/test --filter SecretService)."
        )
        return environment
    }

    /// A store on the shared keyring. Its deadline is longer than the 10 s default: every test of
    /// the suite shares this one daemon, which rewrites its whole keyring file on each change.
    static func store(timeout: Duration = .seconds(30)) async throws -> SecretServiceStore {
        _ = try environment()
        return try await SecretServiceStore.open(options: .init(timeout: timeout, unlockPrompt: false))
    }
}

/// A D-Bus daemon of the test's own, and optionally a gnome-keyring-daemon on it, with scratch
/// XDG directories: for the states the shared keyring must not be put in (locked, frozen, gone).
///
/// By default the bus activates nothing, so "no provider" really means none, and an unlock prompt
/// fails at once (no prompter can be started). With `activation: true` the bus reads the standard
/// service directories, as a desktop session bus does: gnome-keyring and gcr-prompter are then
/// started on demand.
final class PrivateBus: @unchecked Sendable {
    let directory: URL
    private(set) var address: String
    private var bus: ChildProcess
    private(set) var keyring: ChildProcess?

    /// Starts the bus. Blocking work runs off the cooperative pool (see ``offPool(_:)``).
    static func start(activation: Bool = false) async throws -> PrivateBus {
        try await offPool { try PrivateBus(activation: activation) }
    }

    private init(activation: Bool) throws {
        // Under Scripts/test's scratch directory when there is one, so that its cleanup finds
        // and stops anything a crashed test left running.
        let base = ProcessInfo.processInfo.environment["TOKENVAULT_TEST_SCRATCH"].map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.temporaryDirectory
        directory = base.appendingPathComponent("bus-\(UUID().uuidString.prefix(8))")
        for sub in ["", "data", "runtime", "config", "home"] {
            try FileManager.default.createDirectory(
                at: directory.appendingPathComponent(sub), withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        }
        let config = directory.appendingPathComponent("bus.conf")
        try """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:path=\(directory.appendingPathComponent("runtime/bus").path)</listen>
              <auth>EXTERNAL</auth>
              \(activation ? "<standard_session_servicedirs/>" : "")
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>
            """.write(to: config, atomically: true, encoding: .utf8)

        (bus, address) = try Self.startDaemon(config: config, directory: directory)
    }

    private static func startDaemon(config: URL, directory: URL) throws -> (ChildProcess, String) {
        let bus = try ChildProcess(
            "/usr/bin/dbus-daemon", ["--config-file=\(config.path)", "--nofork", "--print-address=1"],
            environment: Self.scratchEnvironment(directory), output: true)
        var text = Data()
        while !text.contains(UInt8(ascii: "\n")) {
            let chunk = bus.output!.availableData
            guard !chunk.isEmpty else { break }
            text.append(chunk)
        }
        let address = String(decoding: text, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard address.hasPrefix("unix:") else { throw SetupFailure("dbus-daemon printed no address") }
        return (bus, address)
    }

    /// The bus's address as a systemd user session gives it, with no `guid`: a client that has it
    /// reaches a restarted bus at the same socket.
    var stableAddress: String { "unix:path=" + directory.appendingPathComponent("runtime/bus").path }

    /// Stops the keyring and the bus, and starts a new bus on the same socket (no keyring on it),
    /// as when a desktop session's bus is restarted.
    func restartBus() async throws {
        try await offPool {
            self.stopNow()
            try? FileManager.default.removeItem(atPath: self.directory.appendingPathComponent("runtime/bus").path)  // the old socket
            (self.bus, self.address) = try Self.startDaemon(config: self.directory.appendingPathComponent("bus.conf"), directory: self.directory)
        }
    }

    deinit {
        stopNow()
        try? FileManager.default.removeItem(at: directory)  // scratch cleanup
    }

    /// The bus socket sits where a systemd user session puts it: `$XDG_RUNTIME_DIR/bus`.
    var runtimeDirectory: String { directory.appendingPathComponent("runtime").path }

    /// What a client of this bus sees: the bus address, scratch XDG directories, no display.
    var environment: [String: String] {
        var environment = Self.scratchEnvironment(directory)
        environment["DBUS_SESSION_BUS_ADDRESS"] = address
        return environment
    }

    private static func scratchEnvironment(_ directory: URL) -> [String: String] {
        [
            "HOME": directory.appendingPathComponent("home").path,
            "XDG_DATA_HOME": directory.appendingPathComponent("data").path,
            "XDG_RUNTIME_DIR": directory.appendingPathComponent("runtime").path,
            "XDG_CONFIG_HOME": directory.appendingPathComponent("config").path,
            "PATH": "/usr/bin:/bin",
        ]
    }

    /// The keyring daemon's process id, once started.
    var keyringPID: pid_t? { keyring?.pid }

    /// Starts gnome-keyring-daemon on this bus. With a password, it creates and unlocks the
    /// `login` collection (the default); without one, it starts with no collection to unlock.
    func startKeyring(password: String?) async throws {
        try await offPool { try self.startKeyringNow(password: password) }
    }

    private func startKeyringNow(password: String?) throws {
        let process = try ChildProcess(
            "/usr/bin/gnome-keyring-daemon",
            ["--foreground", "--components=secrets"] + (password == nil ? [] : ["--unlock"]),
            environment: environment, input: true)
        if let password {
            process.input!.write(Data(password.utf8))
        }
        try process.input!.close()
        keyring = process
        for _ in 0..<200 {
            if try sendNow(["/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner", "string:org.freedesktop.secrets"],
                        destination: "org.freedesktop.DBus").contains("boolean true") {
                return
            }
            usleep(50_000)
        }
        throw SetupFailure("gnome-keyring-daemon did not take org.freedesktop.secrets within 10 s")
    }

    /// Locks the `login` collection through the Secret Service's own `Lock` method.
    func lockLogin() async throws {
        let reply = try await send([
            "/org/freedesktop/secrets", "org.freedesktop.Secret.Service.Lock",
            "array:objpath:/org/freedesktop/secrets/collection/login",
        ])
        guard reply.contains("/org/freedesktop/secrets/collection/login") else {
            throw SetupFailure("Lock did not lock login: \(reply)")
        }
    }

    /// Runs `dbus-send` on this bus and returns what it printed.
    @discardableResult
    func send(_ arguments: [String], destination: String = "org.freedesktop.secrets") async throws -> String {
        try await offPool { try self.sendNow(arguments, destination: destination) }
    }

    private func sendNow(_ arguments: [String], destination: String = "org.freedesktop.secrets") throws -> String {
        let process = try ChildProcess(
            "/usr/bin/dbus-send", ["--bus=\(address)", "--print-reply", "--dest=\(destination)"] + arguments,
            environment: ["PATH": "/usr/bin:/bin"], output: true)
        let data = process.readAll()
        process.wait()
        return String(decoding: data, as: UTF8.self)
    }

    /// Stops the keyring at once (SIGKILL: children of the test runner inherit its blocked
    /// SIGTERM), including one that the bus started by activation.
    func stopKeyring() async {
        await offPoolNoThrow { self.stopKeyringNow() }
    }

    private func stopKeyringNow() {
        keyring?.stop()
        // A keyring the bus activated is not our child: find it through the bus.
        if bus.isRunning, let reply = try? sendNow(
            ["/org/freedesktop/DBus", "org.freedesktop.DBus.GetConnectionUnixProcessID", "string:org.freedesktop.secrets"],
            destination: "org.freedesktop.DBus"),
            let pid = reply.split(separator: " ").last.flatMap({ Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
        {
            _ = Glibc.kill(pid, SIGKILL)
        }
    }

    func stop() async {
        await offPoolNoThrow { self.stopNow() }
    }

    private func stopNow() {
        stopKeyringNow()
        bus.stop()
    }
}

/// Runs `body` and returns how long it took.
func measure<T>(_ body: () async throws -> T) async rethrows -> (T, Duration) {
    let clock = ContinuousClock()
    let start = clock.now
    let value = try await body()
    return (value, clock.now - start)
}

/// The error `body` throws as a `VaultError`, or a recorded issue.
func vaultError(_ body: () async throws -> Void) async -> VaultError? {
    do {
        try await body()
        Issue.record("expected a VaultError, but nothing was thrown")
        return nil
    } catch let error as VaultError {
        return error
    } catch {
        Issue.record("expected a VaultError, got \(type(of: error)): \(error)")
        return nil
    }
}

/// `secret-service-check` (Sources/secret-service-check) running on a private bus: one command per
/// line in, one JSON answer per line out. The store inside uses that bus as its session bus.
final class SecretServiceCheck: @unchecked Sendable {
    struct Answer: @unchecked Sendable {
        let fields: [String: Any]
        var ok: Bool { fields["ok"] as? Bool == true }
        var code: String? { fields["code"] as? String }
        var message: String { fields["message"] as? String ?? "" }
        var elapsed: Duration { .milliseconds(fields["elapsed_ms"] as? Int ?? .max) }
        subscript(key: String) -> Any? { fields[key] }
    }

    private let process: ChildProcess
    private var buffer = Data()

    private init(environment: [String: String], wholeStacks: Bool) throws {
        var environment = environment
        if wholeStacks, let options = Products.sanitizerEnvironment["ASAN_OPTIONS"] {
            // GLib has no frame pointers, so AddressSanitizer's fast unwinder stops at g_malloc and
            // a leak inside libsecret could not be told from one of ours. The helper's few calls
            // can afford the slow unwinder, which records whole stacks.
            environment["ASAN_OPTIONS"] = options + ":fast_unwind_on_malloc=0"
        }
        process = try ChildProcess(try Self.path, [], environment: environment, input: true, output: true)
    }

    /// Starts the helper. `wholeStacks: false` keeps a sanitized helper's fast unwinder, for
    /// calls that allocate too often for the slow one (a 16 MiB secret takes minutes with it).
    static func start(environment: [String: String], wholeStacks: Bool = true) async throws -> SecretServiceCheck {
        try await offPool { try SecretServiceCheck(environment: environment, wholeStacks: wholeStacks) }
    }

    deinit {
        // End of input ends the helper; a helper stuck in a call is killed after 5 s.
        try? process.input?.close()
        for _ in 0..<100 where process.isRunning { usleep(50_000) }
        process.stop()
    }

    static var path: String {
        get throws { try Products.executable("secret-service-check") }
    }

    /// Kills the helper with SIGKILL at once: no cleanup runs in it.
    func kill() {
        process.stop()
    }

    /// Sends one command and waits for its answer, off the cooperative pool.
    @discardableResult
    func send(_ command: String) async throws -> Answer {
        try await offPool { try self.sendNow(command) }
    }

    private func sendNow(_ command: String) throws -> Answer {
        process.input!.write(Data((command + "\n").utf8))
        while !buffer.contains(UInt8(ascii: "\n")) {
            let chunk = process.output!.availableData
            guard !chunk.isEmpty else { throw SetupFailure("secret-service-check ended before answering '\(command)'") }
            buffer.append(chunk)
        }
        let end = buffer.firstIndex(of: UInt8(ascii: "\n"))!
        let line = buffer[buffer.startIndex..<end]
        buffer.removeSubrange(buffer.startIndex...end)
        guard let object = try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] else {
            throw SetupFailure("not a JSON object: \(String(decoding: line, as: UTF8.self))")
        }
        return Answer(fields: object)
    }
}

/// `secret-tool` (libsecret-tools), a real client of the shared keyring in another process.
enum SecretToolProcess {
    /// Runs secret-tool against the shared keyring, `input` on its stdin.
    ///
    /// kwalletd5 5.103 now and then drops a client's fresh session while other clients open and
    /// close theirs (secret-tool then says "Can't find session …" and may leave an item with a
    /// garbled secret). That is secret-tool's session with KWallet, not TokenVault's reading, so a
    /// run that failed that way is retried with a new secret-tool process, up to twice. So is one
    /// that kwalletd5 refused with "Client public key size is invalid": libsecret sends its
    /// Diffie-Hellman key without leading zero bytes and kwalletd5 wants 128 of them, one session
    /// in 256 (TokenVault's store draws a new key itself; secret-tool cannot). On KWallet, a
    /// `lookup` that prints nothing and exits 1 is retried too: the same kwalletd5 fault can
    /// answer a fresh session's GetSecrets with nothing for an item its search just listed
    /// (Backends.md; TokenVault's store retries that on a new session itself), and secret-tool
    /// then reports "not found" (a clean-clone CI run, right after the store had saved and read
    /// the item back). An item that is really missing still fails all three attempts.
    static func run(_ arguments: [String], input: Data? = nil) throws -> (status: Int32, output: String) {
        var result = try runOnce(arguments, input: input)
        for _ in 0..<2 where result.status != 0
            && (result.output.contains("Can't find session") || result.output.contains("Client public key size is invalid")
                || (SharedKeyring.provider == "kwallet" && arguments.first == "lookup" && result.output.isEmpty)) {
            // Said on the test's output, so that a run shows how often the provider needed it. A
            // lookup that a test expects to find nothing (after a delete) is asked three times too.
            let what = result.output.isEmpty ? "found nothing (exit \(result.status)): kwalletd5's session fault, or no such item, as after a delete" : result.output
            FileHandle.standardError.write(Data("secret-tool \(arguments.first ?? "") on \(SharedKeyring.provider), asked again: \(what)\n".utf8))
            result = try runOnce(arguments, input: input)
        }
        return result
    }

    private static func runOnce(_ arguments: [String], input: Data?) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/secret-tool")
        process.arguments = arguments
        process.environment = try SharedKeyring.environment()
        let output = Pipe()
        let stdin = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = stdin
        try process.run()
        // Bounded: a provider that waits on a dialog nobody can see (KeePassXC 2.7.4 asks before
        // `secret-tool store` replaces an item) must fail this test, not hang the whole run.
        // SIGKILL: Foundation's Process passes on the test runner's blocked signal mask, so a
        // SIGTERM would never arrive.
        let pid = process.processIdentifier
        let watchdog = DispatchWorkItem { if process.isRunning { _ = kill(pid, SIGKILL) } }
        DispatchQueue.global().asyncAfter(deadline: .now() + 30, execute: watchdog)
        defer { watchdog.cancel() }
        if let input { stdin.fileHandleForWriting.write(input) }
        try stdin.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}
#endif
