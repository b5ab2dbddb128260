// The one way the tests start a child process: posix_spawn with the signal state and the
// descriptors a login session would give it (see ChildProcess), and a run-to-the-end that reads
// stdout and stderr at once.
import Foundation

import Glibc

/// A child process started with `posix_spawn` and a clean signal state.
///
/// Foundation's `Process` passes on the signal mask of the thread that starts it, and the test
/// runner's threads block nearly every signal. A `dbus-daemon` started that way never sees
/// `SIGCHLD`, so it waits its full activation timeout for a prompter that has long exited, and
/// `SIGTERM` cannot stop anything. Daemons for the tests are therefore started here, with an
/// empty mask and default dispositions, as a login session would start them.
final class ChildProcess: @unchecked Sendable {
    let pid: pid_t
    /// The write end of the child's stdin, if it was asked for.
    let input: FileHandle?
    /// The read end of the child's stdout, if it was asked for.
    let output: FileHandle?
    private var status: Int32?

    /// Serialises our spawns, so that no child inherits another child's pipe in the moment
    /// between `pipe` and `FD_CLOEXEC`: a reader would then wait for the wrong process to exit.
    private static let spawnLock = NSLock()

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which the Swift Glibc
    /// module does not export; looked up with the C calling convention.
    private static let closeFrom: @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32 = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else {
            fatalError("glibc 2.34 or later is needed for posix_spawn_file_actions_addclosefrom_np")
        }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32).self)
    }()

    private static func closeOnExecPipe(_ fds: inout [Int32]) -> Bool {
        guard pipe(&fds) == 0 else { return false }
        return fcntl(fds[0], F_SETFD, FD_CLOEXEC) == 0 && fcntl(fds[1], F_SETFD, FD_CLOEXEC) == 0
    }

    /// The read end of the child's stderr, if it was asked for (`errorPath: nil`).
    let errorOutput: FileHandle?

    /// A child that exits before it reads all of its stdin makes the write fail with EPIPE (which
    /// the loop below handles) rather than end the test process with SIGPIPE. Children start
    /// with every signal at its default (POSIX_SPAWN_SETSIGDEF), so they are not affected.
    private static let pipeWritesFailInsteadOfSignalling: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

    /// Starts `path`. stdin is a pipe (`input`), the file at `inputPath`, or /dev/null; stdout a
    /// pipe (`output`) or /dev/null; stderr the file at `errorPath`, or a pipe when it is nil.
    init(_ path: String, _ arguments: [String], environment: [String: String], input wantsInput: Bool = false,
         inputPath: String? = nil, output wantsOutput: Bool = false, errorPath: String? = "/dev/null") throws {
        Self.spawnLock.lock()
        defer { Self.spawnLock.unlock() }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var stdinPipe: [Int32] = [-1, -1]
        var stdoutPipe: [Int32] = [-1, -1]
        var stderrPipe: [Int32] = [-1, -1]
        if wantsInput {
            guard Self.closeOnExecPipe(&stdinPipe) else { throw SetupFailure("pipe failed") }
            posix_spawn_file_actions_adddup2(&actions, stdinPipe[0], 0)
            posix_spawn_file_actions_addclose(&actions, stdinPipe[1])
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, inputPath ?? "/dev/null", O_RDONLY, 0)
        }
        if wantsOutput {
            guard Self.closeOnExecPipe(&stdoutPipe) else { throw SetupFailure("pipe failed") }
            posix_spawn_file_actions_adddup2(&actions, stdoutPipe[1], 1)
            posix_spawn_file_actions_addclose(&actions, stdoutPipe[0])
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        }
        if let errorPath {
            posix_spawn_file_actions_addopen(&actions, 2, errorPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        } else {
            guard Self.closeOnExecPipe(&stderrPipe) else { throw SetupFailure("pipe failed") }
            posix_spawn_file_actions_adddup2(&actions, stderrPipe[1], 2)
            posix_spawn_file_actions_addclose(&actions, stderrPipe[0])
        }
        // Nothing else of the test runner's: a daemon holding another test's pipe open would keep
        // that test waiting for an end of file that never comes.
        guard Self.closeFrom(&actions, 3) == 0 else { throw SetupFailure("posix_spawn_file_actions_addclosefrom_np failed") }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.merging(Products.sanitizerEnvironment) { own, _ in own }.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let result = posix_spawn(&child, path, &actions, &attributes, argv, envp)
        if wantsInput { close(stdinPipe[0]) }
        if wantsOutput { close(stdoutPipe[1]) }
        if errorPath == nil { close(stderrPipe[1]) }
        guard result == 0 else {
            for fd in [stdinPipe[1], stdoutPipe[0], stderrPipe[0]] where fd >= 0 { close(fd) }
            throw SetupFailure("posix_spawn \(path) failed: \(String(cString: strerror(result)))")
        }
        pid = child
        input = wantsInput ? FileHandle(fileDescriptor: stdinPipe[1], closeOnDealloc: true) : nil
        output = wantsOutput ? FileHandle(fileDescriptor: stdoutPipe[0], closeOnDealloc: true) : nil
        errorOutput = errorPath == nil ? FileHandle(fileDescriptor: stderrPipe[0], closeOnDealloc: true) : nil
    }

    var isRunning: Bool {
        guard status == nil else { return false }
        var raw: Int32 = 0
        if waitpid(pid, &raw, WNOHANG) == pid {
            status = raw
            return false
        }
        return true
    }

    /// Waits for the child to end and returns its raw wait status.
    @discardableResult
    func wait() -> Int32 {
        if let status { return status }
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) == -1 && errno == EINTR {}
        status = raw
        return raw
    }

    func kill(_ signal: Int32) {
        guard isRunning else { return }
        _ = Glibc.kill(pid, signal)
    }

    /// Ends the child at once and reaps it.
    func stop() {
        kill(SIGCONT)
        kill(SIGKILL)
        wait()
    }

    private var lineBuffer = Data()

    /// The next line the child writes to `output` (blocking; run it off the cooperative pool), or
    /// nil when `output` ends first.
    func readLine() -> String? {
        while true {
            if let newline = lineBuffer.firstIndex(of: 0x0A) {
                let line = String(decoding: lineBuffer[lineBuffer.startIndex..<newline], as: UTF8.self)
                lineBuffer.removeSubrange(lineBuffer.startIndex...newline)
                return line
            }
            guard let chunk = output?.availableData, !chunk.isEmpty else { return nil }
            lineBuffer.append(chunk)
        }
    }

    /// Reads until `output` ends.
    func readAll() -> Data {
        output?.readDataToEndOfFile() ?? Data()
    }

    /// Runs `path` to its end: `stdin` written to it (or the file at `stdinPath` as its stdin),
    /// stdout and stderr captured. Both pipes are read at once (poll), so a child that fills one
    /// while the other is still open never blocks: no pipe waits for a reader.
    static func run(
        _ path: String, _ arguments: [String], environment: [String: String], stdin: Data = Data(),
        stdinPath: String? = nil
    ) throws -> ChildResult {
        let clock = ContinuousClock()
        let start = clock.now
        let child = try ChildProcess(
            path, arguments, environment: environment, input: stdinPath == nil, inputPath: stdinPath, output: true,
            errorPath: nil)
        let (out, err) = try child.drain(writing: stdinPath == nil ? [UInt8](stdin) : [])
        let raw = child.wait()
        // A child killed by a signal reports 128 + the signal, as a shell does.
        let status: Int32 = (raw & 0x7f) == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
        return ChildResult(status: status, stdout: Data(out), stderr: String(decoding: err, as: UTF8.self), elapsed: clock.now - start)
    }

    /// Writes `input` to the child's stdin (then closes it) while reading its stdout and stderr,
    /// until both end.
    private func drain(writing input: [UInt8]) throws -> (stdout: [UInt8], stderr: [UInt8]) {
        var out: [UInt8] = []
        var err: [UInt8] = []
        var inputFD: Int32 = self.input?.fileDescriptor ?? -1
        var written = 0
        if inputFD >= 0 && input.isEmpty {
            try self.input?.close()
            inputFD = -1
        }
        if inputFD >= 0 {
            _ = Self.pipeWritesFailInsteadOfSignalling
            _ = fcntl(inputFD, F_SETFL, fcntl(inputFD, F_GETFL) | O_NONBLOCK)
        }
        var open: [Int32: Bool] = [:]
        if let output { open[output.fileDescriptor] = true }
        if let errorOutput { open[errorOutput.fileDescriptor] = false }
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while !open.isEmpty || inputFD >= 0 {
            var fds = open.keys.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            if inputFD >= 0 { fds.append(pollfd(fd: inputFD, events: Int16(POLLOUT), revents: 0)) }
            let ready = poll(&fds, nfds_t(fds.count), -1)
            if ready < 0 {
                if errno == EINTR { continue }
                throw SetupFailure("poll failed: \(String(cString: strerror(errno)))")
            }
            for entry in fds where entry.revents != 0 {
                if entry.fd == inputFD {
                    let count = input[written...].withUnsafeBytes { Glibc.write(inputFD, $0.baseAddress, $0.count) }
                    if count > 0 { written += count }
                    if written == input.count || (count < 0 && errno != EAGAIN && errno != EINTR) {
                        try self.input?.close()
                        inputFD = -1
                    }
                    continue
                }
                let count = chunk.withUnsafeMutableBytes { Glibc.read(entry.fd, $0.baseAddress, $0.count) }
                if count > 0 {
                    if open[entry.fd] == true { out += chunk[0..<count] } else { err += chunk[0..<count] }
                } else if count == 0 || (errno != EINTR && errno != EAGAIN) {
                    open[entry.fd] = nil
                }
            }
        }
        return (out, err)
    }
}

/// What a child that ran to its end left: its exit status (128 + the signal if one killed it),
/// its output and how long it took.
struct ChildResult: CustomStringConvertible {
    var status: Int32
    var stdout: Data
    var stderr: String
    var elapsed: Duration

    var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
    var description: String { "exit \(status); stderr: \(stderr)" }
}

/// A test fixture that could not be set up. Thrown (not recorded) because it may happen on a
/// thread of its own, outside the test's task.
struct SetupFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs blocking fixture work (starting daemons, waiting on pipes) on a thread of its own, so that
/// it never occupies the cooperative pool that the code under test and its time bounds rely on.
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

func offPoolNoThrow<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
}
