#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

// File-scope names for the C calls whose names the `Posix` members shadow.
private typealias CStat = stat
private func cStat(_ path: String, _ buffer: inout CStat) -> Int32 { stat(path, &buffer) }
private func cFlock(_ fd: Int32, _ operation: Int32) -> Int32 { flock(fd, operation) }

/// The one thin wrapper every POSIX call of the library goes through: the file backend, the
/// migration's plist rewrite and the refresh locks.
///
/// It retries `EINTR`, turns `-1` into a thrown ``VaultError`` and maps `errno` to a code in one
/// place (as swift-system's `valueOrErrno` does). Messages name the operation and the path, and
/// the system's own text for the error; never file contents.
enum Posix {
    /// What a path is, for the `ENOENT` mapping: a missing key file has its own code.
    enum Role {
        case vault, keyFile, directory, lockFile
        /// A defaults plist being migrated: a missing one is `notFound`.
        case plist
        /// A refresh lock file or directory, opened with `O_NOFOLLOW`: a symbolic link is refused.
        case refreshLock
    }

    /// Runs `body` until it does not fail with `EINTR`; throws on `-1`.
    @discardableResult
    static func call<Result: FixedWidthInteger>(
        _ operation: @autoclosure () -> String,
        path: String,
        role: Role = .vault,
        _ body: () -> Result
    ) throws -> Result {
        while true {
            let result = body()
            if result != -1 { return result }
            let code = errno
            if code == EINTR { continue }
            throw error(errno: code, operation: operation(), path: path, role: role)
        }
    }

    /// The ``VaultError`` for `errno` after `operation` on `path` failed.
    static func error(errno code: Int32, operation: String, path: String, role: Role = .vault) -> VaultError {
        let reason = systemMessage(code)
        switch code {
        case EACCES, EPERM, EROFS:
            return VaultError(
                .permissionDenied, "Cannot \(operation) \(path): \(reason).", underlying: Errno(rawValue: code))
        case ENOSPC, EDQUOT, EFBIG:
            let consequence =
                role == .plist
                ? "The plist was not changed" : "The vault keeps its last complete state"
            return VaultError(
                .diskFull,
                "Cannot \(operation) \(path): \(reason). \(consequence); free some space and try again.",
                underlying: Errno(rawValue: code))
        case ENOENT where role == .keyFile:
            return VaultError(
                .keyFileMissing, "The key or passphrase file \(path) does not exist.", underlying: Errno(rawValue: code))
        case ENOENT where role == .plist:
            return VaultError(.notFound, "Cannot \(operation) \(path): \(reason).", underlying: Errno(rawValue: code))
        case ELOOP where role == .refreshLock:
            return VaultError(
                .insecurePermissions, "Cannot \(operation) \(path): it is a symbolic link.", underlying: Errno(rawValue: code))
        default:
            return VaultError(.io, "Cannot \(operation) \(path): \(reason).", underlying: Errno(rawValue: code))
        }
    }

    static func systemMessage(_ code: Int32) -> String {
        guard let text = strerror(code) else { return "error \(code)" }
        return String(cString: text)
    }

    /// A C `errno` value, kept as the `underlying` error.
    struct Errno: Error, Sendable, CustomStringConvertible {
        let rawValue: Int32
        var description: String { "errno \(rawValue) (\(Posix.systemMessage(rawValue)))" }
    }

    // MARK: Files

    struct FileStatus: Equatable {
        var device: UInt64
        var inode: UInt64
        var size: Int64
        var mode: UInt32
        var isRegularFile: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFREG) }
        /// Permission bits for group and others.
        var groupOrOtherBits: UInt32 { mode & 0o077 }
        var permissionBits: UInt32 { mode & 0o7777 }
    }

    private static func status(_ raw: CStat) -> FileStatus {
        FileStatus(
            device: UInt64(raw.st_dev), inode: UInt64(raw.st_ino), size: Int64(raw.st_size), mode: UInt32(raw.st_mode))
    }

    static func open(_ path: String, flags: Int32, mode: UInt32 = 0o600, role: Role = .vault) throws -> Int32 {
        try call("open", path: path, role: role) { Glibc.open(path, flags | O_CLOEXEC, mode_t(mode)) }
    }

    /// Opens `path`, or returns `nil` if it does not exist.
    static func openIfExists(_ path: String, flags: Int32, role: Role = .vault) throws -> Int32? {
        while true {
            let fd = Glibc.open(path, flags | O_CLOEXEC)
            if fd >= 0 { return fd }
            let code = errno
            if code == EINTR { continue }
            if code == ENOENT { return nil }
            throw error(errno: code, operation: "open", path: path, role: role)
        }
    }

    static func close(_ fd: Int32) {
        // close(2) must not be retried on EINTR on Linux: the descriptor is gone either way.
        _ = Glibc.close(fd)
    }

    static func fstat(_ fd: Int32, path: String) throws -> FileStatus {
        var raw = CStat()
        try call("inspect", path: path) { Glibc.fstat(fd, &raw) }
        return status(raw)
    }

    /// The status of `path`, or `nil` if it does not exist.
    static func stat(_ path: String, role: Role = .vault) throws -> FileStatus? {
        var raw = CStat()
        while true {
            if cStat(path, &raw) == 0 { return status(raw) }
            let code = errno
            if code == EINTR { continue }
            if code == ENOENT { return nil }
            throw error(errno: code, operation: "inspect", path: path, role: role)
        }
    }

    /// Reads exactly `count` bytes at `offset` into `buffer`, or fewer at end of file. Returns how many.
    static func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64, path: String) throws -> Int {
        var done = 0
        while done < buffer.count {
            let n = try call("read", path: path) {
                Glibc.pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// Reads `[offset, offset + count)` into a new array, or less at end of file.
    static func read(_ fd: Int32, at offset: Int64, count: Int, path: String) throws -> [UInt8] {
        guard count > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: count)
        let n = try bytes.withUnsafeMutableBytes { (buffer) throws -> Int in
            try pread(fd, into: buffer, at: offset, path: path)
        }
        if n < count { bytes.removeLast(count - n) }
        return bytes
    }

    /// Writes all of `bytes` at `offset`, looping over short writes.
    static func pwriteAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64, path: String) throws {
        var done = 0
        while done < bytes.count {
            let n = try call("write to", path: path) {
                Glibc.pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
            }
            done += n
        }
    }

    static func truncate(_ fd: Int32, to size: Int64, path: String) throws {
        try call("truncate", path: path) { Glibc.ftruncate(fd, off_t(size)) }
    }

    /// Makes written data durable (`fdatasync`: the data and the size, which is all an append needs).
    static func syncData(_ fd: Int32, path: String) throws {
        try call("flush to disk", path: path) { Glibc.fdatasync(fd) }
    }

    /// Makes data and metadata durable.
    static func sync(_ fd: Int32, path: String) throws {
        try call("flush to disk", path: path) { Glibc.fsync(fd) }
    }

    /// `fsync`s a directory, so a rename or creation in it survives a crash.
    static func syncDirectory(_ path: String) throws {
        let fd = try open(path, flags: O_RDONLY | O_DIRECTORY, role: .directory)
        defer { close(fd) }
        try sync(fd, path: path)
    }

    static func rename(_ from: String, to: String) throws {
        try call("rename a file over", path: to) { Glibc.rename(from, to) }
    }

    static func unlink(_ path: String) throws {
        try call("remove", path: path) { Glibc.unlink(path) }
    }

    static func chmod(_ fd: Int32, _ mode: UInt32, path: String) throws {
        try call("set permissions on", path: path) { Glibc.fchmod(fd, mode_t(mode)) }
    }

    /// Creates `path` and any missing parents with mode `0700`. Existing directories are left as they are.
    static func makeDirectories(_ path: String) throws {
        if let existing = try stat(path, role: .directory) {
            guard existing.mode & UInt32(S_IFMT) == UInt32(S_IFDIR) else {
                throw VaultError(.io, "\(path) exists and is not a directory.")
            }
            return
        }
        let parent = parentDirectory(of: path)
        if parent != path { try makeDirectories(parent) }
        while true {
            if Glibc.mkdir(path, 0o700) == 0 { return }
            let code = errno
            if code == EINTR { continue }
            if code == EEXIST { return }
            throw error(errno: code, operation: "create the directory", path: path, role: .directory)
        }
    }

    static func parentDirectory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        if slash == path.startIndex { return "/" }
        return String(path[..<slash])
    }

    // MARK: Locks

    /// Takes a `flock` lock, waiting for it (call this off the cooperative pool).
    static func lock(_ fd: Int32, exclusive: Bool, path: String) throws {
        try call("lock", path: path, role: .lockFile) { cFlock(fd, exclusive ? LOCK_EX : LOCK_SH) }
    }

    static func unlock(_ fd: Int32, path: String) throws {
        try call("unlock", path: path, role: .lockFile) { cFlock(fd, LOCK_UN) }
    }
}
