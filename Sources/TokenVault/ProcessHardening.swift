internal import Glibc
internal import TokenVaultSystem

/// Keeps secrets in this process's memory from being copied out of it by the system: an opt-in
/// for programs that hold tokens for a long time, such as a daemon or a desktop app.
///
/// TokenVault keeps keys and decrypted file contents in `sodium_malloc` memory, which core dumps
/// leave out, but a token a program has read is an ordinary `String`, and a core dump of a crash
/// holds it. The `vault` command calls ``disableCoreDumps()`` as it starts; a library never
/// changes its host process on its own, so call it yourself, early in `main`:
///
/// ```swift
/// try ProcessHardening.disableCoreDumps()
/// ```
public enum ProcessHardening: Sendable {
    /// Makes this process write no core dump, for good.
    ///
    /// - Sets the core-file size limit (`RLIMIT_CORE`) to 0, the hard limit too, so that nothing
    ///   later in the process can raise it again (a privileged process could).
    /// - On Linux, also marks the process not dumpable (`prctl(PR_SET_DUMPABLE, 0)`): no core dump
    ///   even where the core pattern is a pipe (systemd-coredump, apport), and other processes
    ///   of the same user can no longer attach with `ptrace` or read its memory through `/proc`.
    ///   The files in `/proc/<pid>/` then belong to root.
    ///
    /// Child processes inherit the limit; the dumpable mark is reset by `execve`.
    ///
    /// - Throws: ``VaultError`` `io` if the system refuses either change.
    public static func disableCoreDumps() throws {
        var none = rlimit(rlim_cur: 0, rlim_max: 0)
        #if os(Linux)
            let resource = __rlimit_resource_t(RLIMIT_CORE.rawValue)
        #else
            let resource = RLIMIT_CORE
        #endif
        guard setrlimit(resource, &none) == 0 else {
            throw VaultError(.io, "Could not turn off core dumps (setrlimit RLIMIT_CORE): \(Errno(rawValue: errno).message).")
        }
        #if os(Linux)
            guard let prctl = Prctl.function else {
                throw VaultError(.io, "Could not mark the process not dumpable: prctl is not available.")
            }
            guard prctl(Prctl.setDumpable, 0, 0, 0, 0) == 0 else {
                throw VaultError(.io, "Could not mark the process not dumpable (prctl PR_SET_DUMPABLE): \(Errno(rawValue: errno).message).")
            }
        #endif
    }
}

#if os(Linux)
    /// `prctl(2)`, which C declares variadic (`int prctl(int option, ...)`) and Swift therefore
    /// cannot call directly. glibc reads its four optional arguments as `unsigned long`, so it is
    /// called through that fixed prototype, looked up once with `dlsym`.
    private enum Prctl {
        typealias Function = @convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32

        /// `PR_SET_DUMPABLE` from `<linux/prctl.h>`, part of the kernel's stable ABI.
        static let setDumpable: Int32 = 4

        static let function: Function? = {
            guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "prctl") else { return nil }
            return unsafeBitCast(symbol, to: Function.self)
        }()
    }
#endif
