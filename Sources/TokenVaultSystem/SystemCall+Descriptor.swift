// Owns: what is asked of a descriptor itself rather than of its file: its close-on-exec and
// non-blocking flags, whether it is open, whether it is a terminal; the standard streams'
// numbers; and the two path checks that are no open (`access`).
internal import Glibc

extension SystemCall {
    package static let standardInput: Int32 = STDIN_FILENO
    package static let standardOutput: Int32 = STDOUT_FILENO
    package static let standardError: Int32 = STDERR_FILENO

    /// Opens `path` without `O_CLOEXEC`, for a descriptor that programs this one `exec`s must
    /// inherit (a standard stream's placeholder). Creates nothing (no hooks).
    package static func openInheritable(_ path: String, _ flags: OpenFlags) throws(Errno) -> Int32 {
        try retrying { Glibc.open(path, flags.subtracting(.create).rawValue) }
    }

    /// The descriptors this process has open now (`/proc/self/fd`, less the one that lists it);
    /// empty where it cannot be read.
    package static func openDescriptors() -> [Int32] {
        guard let directory = opendir("/proc/self/fd") else { return [] }
        defer { closedir(directory) }
        let own = dirfd(directory)
        var result: [Int32] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if let fd = Int32(name), fd != own { result.append(fd) }
        }
        return result
    }

    /// Whether `fd` is an open descriptor (`fcntl(F_GETFD)` does not fail with `EBADF`).
    package static func isOpen(_ fd: Int32) -> Bool {
        fcntl(fd, F_GETFD) != -1 || errno != EBADF
    }

    /// Whether `fd` is open and survives an `exec` (`FD_CLOEXEC` clear); `false` for a closed one.
    package static func isInheritedByExec(_ fd: Int32) -> Bool {
        let flags = fcntl(fd, F_GETFD)
        return flags >= 0 && flags & FD_CLOEXEC == 0
    }

    /// Sets `FD_CLOEXEC` on `fd`: no program it `exec`s inherits it.
    package static func setCloseOnExec(_ fd: Int32) {
        let flags = fcntl(fd, F_GETFD)
        if flags >= 0 && flags & FD_CLOEXEC == 0 { _ = fcntl(fd, F_SETFD, flags | FD_CLOEXEC) }
    }

    /// Sets or clears `O_NONBLOCK` on the open file behind `fd`.
    package static func setNonBlocking(_ fd: Int32, _ nonBlocking: Bool) {
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, nonBlocking ? flags | O_NONBLOCK : flags & ~O_NONBLOCK)
    }

    /// Whether `fd` is a terminal (`isatty`).
    package static func isTerminal(_ fd: Int32) -> Bool { isatty(fd) == 1 }

    /// Whether something exists at `path` (`access(F_OK)`; a dangling symbolic link does not).
    package static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    /// Whether this process may execute `path` (`access(X_OK)`); the reason when it may not.
    package static func checkExecutable(_ path: String) throws(Errno) {
        guard access(path, X_OK) == 0 else { throw Errno.current }
    }
}

extension SystemCall {
    /// `fgetxattr(2)`, looked up once with `dlsym` (Swift's Glibc module leaves <sys/xattr.h> out).
    private typealias GetXattr = @convention(c) (Int32, UnsafePointer<CChar>, UnsafeMutableRawPointer?, Int) -> Int
    private static let fgetxattr: GetXattr? = dlsym(nil, "fgetxattr").map { unsafeBitCast($0, to: GetXattr.self) }

    /// The value of the extended attribute `name` of `fd`'s file, if it has one of at most
    /// `maximumLength` bytes; nil otherwise (none, too long, or no `fgetxattr`).
    package static func extendedAttribute(_ fd: Int32, _ name: String, maximumLength: Int) -> [UInt8]? {
        guard let fgetxattr else { return nil }
        var buffer = [UInt8](repeating: 0, count: maximumLength)
        let length = buffer.withUnsafeMutableBytes { fgetxattr(fd, name, $0.baseAddress, $0.count) }
        guard length >= 0 else { return nil }
        return Array(buffer[0..<length])
    }
}
