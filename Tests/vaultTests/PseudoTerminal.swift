#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

import Glibc

/// Runs `vault` with a pseudo-terminal as its stdin and stderr, as a person at a terminal would:
/// the test reads what the child shows (its prompts) from the master side and types there.
/// With `controllingTerminal`, the child runs under `setsid --ctty`, so that `/dev/tty` is this
/// terminal too (where `vault` asks for a passphrase). Stdout stays a pipe, so results can be
/// read apart from prompts.
final class PseudoTerminalSession {
    let process = Process()
    private let master: Int32
    private let stdout = Pipe()
    /// Everything the child has written to the terminal so far.
    private(set) var screen = ""

    init(
        _ sandbox: CLISandbox, _ arguments: [String], environment extra: [String: String] = [:],
        controllingTerminal: Bool = false, runningUnder wrapper: [String] = []
    ) throws {
        let pty = try PTYCalls()
        master = pty.openpt(O_RDWR | O_NOCTTY)
        guard master >= 0, pty.grantpt(master) == 0, pty.unlockpt(master) == 0, let name = pty.ptsname(master) else {
            throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "no pseudo-terminal: errno \(errno)"])
        }
        _ = fcntl(master, F_SETFD, FD_CLOEXEC)
        let path = String(cString: name)
        let slave = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard slave >= 0 else {
            throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "cannot open \(path)"])
        }
        defer { _ = close(slave) }  // the child has its own copies once it runs
        let vault = Products.directory.appendingPathComponent("vault").path
        if controllingTerminal {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setsid")
            process.arguments = ["--wait", "--ctty", vault] + arguments
        } else if let launcher = wrapper.first {
            // A program that execs vault with these arguments, such as setpriv: same process id.
            process.executableURL = URL(fileURLWithPath: launcher)
            process.arguments = wrapper.dropFirst() + [vault] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: vault)
            process.arguments = arguments
        }
        process.environment = sandbox.environment.merging(extra) { $1 }
        let terminal = FileHandle(fileDescriptor: slave, closeOnDealloc: false)
        process.standardInput = terminal
        process.standardError = terminal
        process.standardOutput = stdout
        try process.run()
    }

    deinit {
        if process.isRunning { process.terminate() }
        _ = close(master)
    }

    /// Reads the terminal until `text` has appeared, or `timeout` passes. Returns whether it did.
    @discardableResult
    func waitFor(_ text: String, timeout: TimeInterval = 30) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !screen.contains(text) {
            let left = deadline.timeIntervalSinceNow
            guard left > 0, readSome(timeout: left) else { return screen.contains(text) }
        }
        return true
    }

    /// Types `bytes` at the terminal.
    func type(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
    }

    func type(_ text: String) { type(Array(text.utf8)) }

    /// Waits for the child to exit, keeping the terminal drained; returns its status and stdout.
    func finish(timeout: TimeInterval = 60) -> (status: Int32, stdout: String) {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && deadline.timeIntervalSinceNow > 0 {
            if !readSome(timeout: 0.1) { usleep(10_000) }
        }
        if process.isRunning {
            process.terminate()
            Issue.record("vault did not finish within \(timeout) s; the terminal showed: \(screen)")
        }
        process.waitUntilExit()
        while readSome(timeout: 0) {}
        let out = stdout.fileHandleForReading.readDataToEndOfFile()
        return (process.terminationStatus, String(decoding: out, as: UTF8.self))
    }

    /// Reads what is available on the master side within `timeout`. False on nothing or end.
    private func readSome(timeout: TimeInterval) -> Bool {
        var poller = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, Int32(max(0, timeout) * 1000)) > 0, poller.revents & Int16(POLLIN) != 0 else { return false }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = read(master, &buffer, buffer.count)
        guard count > 0 else { return false }  // EIO once the child has closed the terminal
        screen += String(decoding: buffer[0..<count], as: UTF8.self)
        return true
    }
}

/// The C library's pseudo-terminal calls. Glibc declares them only under `_XOPEN_SOURCE`, which
/// Swift's Glibc module does not set, so they are looked up at run time.
private struct PTYCalls {
    let openpt: @convention(c) (Int32) -> Int32
    let grantpt: @convention(c) (Int32) -> Int32
    let unlockpt: @convention(c) (Int32) -> Int32
    let ptsname: @convention(c) (Int32) -> UnsafeMutablePointer<CChar>?

    init() throws {
        func symbol<T>(_ name: String, as type: T.Type) throws -> T {
            guard let address = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else {
                throw CocoaError(.featureUnsupported, userInfo: [NSLocalizedDescriptionKey: "no \(name) in the C library"])
            }
            return unsafeBitCast(address, to: type)
        }
        openpt = try symbol("posix_openpt", as: (@convention(c) (Int32) -> Int32).self)
        grantpt = try symbol("grantpt", as: (@convention(c) (Int32) -> Int32).self)
        unlockpt = try symbol("unlockpt", as: (@convention(c) (Int32) -> Int32).self)
        ptsname = try symbol("ptsname", as: (@convention(c) (Int32) -> UnsafeMutablePointer<CChar>?).self)
    }
}
#endif
