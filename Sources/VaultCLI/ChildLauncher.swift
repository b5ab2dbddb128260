#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
// Owns: how `vault run` starts its command (posix_spawnp, the environment, the descriptors and
// signal dispositions it inherits), forwards signals to it, and turns its end into an exit status.
import ArgumentParser
import FoundationEssentials
import Synchronization
import TokenVault
internal import TokenVaultSystem

import Glibc

enum ChildLauncher {
    /// The signals `vault run` passes on to its command.
    static let forwardedSignals: [Int32] = [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2]

    /// What vault's caller gave it, taken before vault opens anything: the descriptors above 2
    /// that will survive an exec (its own, such as `3<file` or a systemd socket), and the signals
    /// it was started ignoring (`nohup` ignores SIGHUP). The command inherits both, and nothing
    /// that vault opened itself.
    struct Inheritance {
        var descriptors: Set<Int32>
        var ignoredSignals: Set<Int32>

        static func current() -> Inheritance {
            let descriptors = Set(ChildLauncher.openDescriptors().filter(SystemCall.isInheritedByExec))
            var ignored = Set<Int32>()
            for signal in Int32(1)..<65 where signal != SIGKILL && signal != SIGSTOP {
                var action = sigaction()
                if sigaction(signal, nil, &action) == 0, unsafeBitCast(action.__sigaction_handler.sa_handler, to: Int.self) == 1 {
                    ignored.insert(signal)
                }
            }
            return Inheritance(descriptors: descriptors, ignoredSignals: ignored)
        }
    }

    /// Starts `command` (found on PATH when it holds no `/`) with vault's environment plus
    /// `variables`, forwards signals to it while it runs, and returns vault's exit status: the
    /// command's, or 128 + the signal that ended it.
    /// - Throws: `ExitCode(127)` when the command is not found, `ExitCode(126)` when it cannot be
    ///   run, each after a message; nothing was started then.
    static func run(_ command: [String], setting variables: [(String, String)], inheritance: Inheritance) throws -> Int32 {
        closeOnExecAllBut(inheritance.descriptors)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // An empty mask (the thread that spawns is one of the runtime's, which block nearly every
        // signal) and default dispositions, except for what the caller had ignored.
        var mask = sigset_t()
        sigemptyset(&mask)
        var defaults = sigset_t()
        sigfillset(&defaults)
        for signal in inheritance.ignoredSignals { sigdelset(&defaults, signal) }
        posix_spawnattr_setsigmask(&attributes, &mask)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let forwarded = forwardedSignals.filter { !inheritance.ignoredSignals.contains($0) }
        for signal in forwarded { installForwarding(signal) }

        let argv = command.map { strdup($0) } + [nil]
        let envp = environment(setting: variables)
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let result = posix_spawnp(&child, command[0], nil, &attributes, argv, envp)
        guard result == 0 else {
            let notFound = result == ENOENT
            // A message that cannot be written leaves the exit code to say what happened.
            do {
                try Output.error(
                    "\(command[0]): \(notFound ? "command not found" : "cannot be run") (\(String(cString: strerror(result)))); nothing was started.")
            } catch {}
            throw ExitCode(notFound ? ExitStatus.commandNotFound : ExitStatus.commandNotRunnable)
        }
        ForwardingTarget.started(child)

        var raw: Int32 = 0
        while waitpid(child, &raw, 0) == -1 {
            guard errno == EINTR else {
                let reason = String(cString: strerror(errno))
                do { try Output.error("Lost track of \(command[0]) (waitpid: \(reason)).") } catch {}
                throw ExitCode(ExitStatus.other)
            }
        }
        ForwardingTarget.ended()
        let signal = raw & 0x7f
        return signal == 0 ? (raw >> 8) & 0xff : 128 + signal
    }

    /// vault's environment as it got it (byte for byte, duplicates and all), without the
    /// variables it sets, then those.
    private static func environment(setting variables: [(String, String)]) -> [UnsafeMutablePointer<CChar>?] {
        let names = Set(variables.map(\.0))
        var result: [UnsafeMutablePointer<CChar>?] = []
        var entry: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?> = environ
        while let pointer = entry.pointee {
            let bytes = UnsafeRawBufferPointer(start: pointer, count: strlen(pointer))
            let name = bytes.firstIndex(of: UInt8(ascii: "=")).map { String(decoding: bytes[..<$0], as: UTF8.self) }
            if name.map({ !names.contains($0) }) ?? true {
                result.append(strdup(pointer))
            }
            entry += 1
        }
        for (name, value) in variables { result.append(strdup("\(name)=\(value)")) }
        return result + [nil]
    }

    /// The descriptors this process has open now.
    static func openDescriptors() -> [Int32] { SystemCall.openDescriptors() }

    /// Marks every descriptor above 2 that the caller did not give vault close-on-exec: the vault
    /// file, its lock files, a keyring's bus connection, a token endpoint's socket.
    private static func closeOnExecAllBut(_ inherited: Set<Int32>) {
        for fd in openDescriptors() where fd > SystemCall.standardError && !inherited.contains(fd) {
            SystemCall.setCloseOnExec(fd)
        }
    }

    private static func installForwarding(_ signal: Int32) {
        // The handler must not be the first to touch the atomics: that would run their lazy
        // initialisation inside a signal handler.
        ForwardingTarget.prepare()
        var action = sigaction()
        action.__sigaction_handler.sa_sigaction = forwardSignal
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_SIGINFO | SA_RESTART
        sigaction(signal, &action, nil)
    }
}

/// The child the signal handler forwards to. Atomics, as a handler may read nothing else: the
/// child's pid once it exists, and a signal that came before it did (delivered once it exists).
private enum ForwardingTarget {
    static let pid = Atomic<Int32>(0)
    static let pending = Atomic<Int32>(0)

    static func prepare() {
        _ = pid.load(ordering: .relaxed)
        _ = pending.load(ordering: .relaxed)
    }

    /// Sends a signal that came before the child existed. Whichever of this and the handler sees
    /// both the pid and the pending signal sends it (exchange: once).
    static func started(_ child: pid_t) {
        pid.store(child, ordering: .sequentiallyConsistent)
        let early = pending.exchange(0, ordering: .sequentiallyConsistent)
        if early != 0 { _ = kill(child, early) }
    }

    /// The child has been reaped: its pid may be reused, so nothing more is sent to it.
    static func ended() {
        pid.store(-1, ordering: .sequentiallyConsistent)
    }
}

/// The handler of every forwarded signal: async-signal-safe (atomics, `kill`), and keeps `errno`.
private func forwardSignal(_ signal: Int32, _ info: UnsafeMutablePointer<siginfo_t>?, _ context: UnsafeMutableRawPointer?) {
    let saved = errno
    defer { errno = saved }
    if let info {
        // Sent by the kernel (the terminal's ^C, ^\ or hang-up) to the whole foreground process
        // group, which the command is in: it has it already.
        if info.pointee.si_code == 0x80 /* SI_KERNEL */ { return }
        // Sent by the command itself (kill 0 reaches its whole group, vault included).
        let sender = info.pointee._sifields._kill.si_pid
        if sender > 0, sender == ForwardingTarget.pid.load(ordering: .sequentiallyConsistent) { return }
    }
    ForwardingTarget.pending.store(signal, ordering: .sequentiallyConsistent)
    let child = ForwardingTarget.pid.load(ordering: .sequentiallyConsistent)
    guard child > 0 else { return }
    let due = ForwardingTarget.pending.exchange(0, ordering: .sequentiallyConsistent)
    if due != 0 { _ = kill(child, due) }
}
#endif
