// Owns: every libc call the library and the `vault` commands make for files, locks, sockets,
// inotify and terminals (this module, TokenVaultSystem, is the only one that imports Glibc for
// them; Tests/TokenVaultTests/SystemLayerTests fails on a call outside it). One policy: `EINTR`
// is retried everywhere except `close`, which follows swift-nio's rule, and failure is a thrown
// ``Errno``. Nothing here knows what a file is for; callers turn an ``Errno`` into their own error
// (TokenVault's `VaultError+Errno.swift`). Calls that change files pass through ``FileOperationHooks``.
internal import Glibc

// File-scope names for the C calls whose names the `SystemCall` members shadow.
private typealias CStat = stat
private func cStat(_ path: String, _ buffer: inout CStat) -> Int32 { stat(path, &buffer) }
private func cLstat(_ path: String, _ buffer: inout CStat) -> Int32 { lstat(path, &buffer) }
/// Linux's `seekData` and `seekHole` (glibc declares them only under `_GNU_SOURCE`).
private let seekData: Int32 = 3
private let seekHole: Int32 = 4
private func cFlock(_ fd: Int32, _ operation: Int32) -> Int32 { flock(fd, operation) }

/// `renameat2(2)`, which glibc declares only under `_GNU_SOURCE`: looked up once with `dlsym`.
private enum Renameat2 {
    typealias Function = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
    /// `AT_FDCWD` and `RENAME_EXCHANGE` from the kernel's stable ABI.
    static let currentDirectory: Int32 = -100
    static let exchange: UInt32 = 2
    static let function: Function? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "renameat2") else { return nil }
        return unsafeBitCast(symbol, to: Function.self)
    }()
}

/// The one thin layer over POSIX (swift-system's `valueOrErrno` style, without the dependency).
package enum SystemCall {
    /// Runs `body` until it does not fail with `EINTR`; throws the `errno` of any other `-1`.
    @discardableResult
    package static func retrying<Result: FixedWidthInteger>(_ body: () -> Result) throws(Errno) -> Result {
        while true {
            let result = body()
            if result != -1 { return result }
            let code = Errno.current
            if code != .interrupted { throw code }
        }
    }

    // MARK: Status

    package struct FileStatus: Equatable, Sendable {
        package var device: UInt64
        package var inode: UInt64
        package var size: Int64
        package var mode: UInt32
        package var owner: UInt32
        package var group: UInt32
        package var linkCount: UInt64
        /// The last change of the file's content or metadata (`st_ctim`), in nanoseconds since 1970.
        package var changeTime: Int64

        package var isRegularFile: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFREG) }
        package var isDirectory: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFDIR) }
        package var isSymbolicLink: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFLNK) }
        package var isSocket: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFSOCK) }
        /// Permission bits for group and others.
        package var groupOrOtherBits: UInt32 { mode & 0o077 }
        package var permissionBits: UInt32 { mode & 0o7777 }
        /// Whether the calling process's effective user owns it.
        package var isOwnedByCaller: Bool { owner == UInt32(geteuid()) }

        fileprivate init(_ raw: CStat) {
            device = UInt64(raw.st_dev)
            inode = UInt64(raw.st_ino)
            size = Int64(raw.st_size)
            mode = UInt32(raw.st_mode)
            owner = UInt32(raw.st_uid)
            group = UInt32(raw.st_gid)
            linkCount = UInt64(raw.st_nlink)
            changeTime = Int64(raw.st_ctim.tv_sec) * 1_000_000_000 + Int64(raw.st_ctim.tv_nsec)
        }
    }

    package static var effectiveUserID: UInt32 { UInt32(geteuid()) }
    package static var effectiveGroupID: UInt32 { UInt32(getegid()) }

    package static func fstat(_ fd: Int32) throws(Errno) -> FileStatus {
        var raw = CStat()
        try retrying { Glibc.fstat(fd, &raw) }
        return FileStatus(raw)
    }

    /// The status of `path` (following symbolic links), or `nil` if it does not exist.
    package static func stat(_ path: String) throws(Errno) -> FileStatus? {
        var raw = CStat()
        do {
            try retrying { cStat(path, &raw) }
        } catch .noSuchFileOrDirectory {
            return nil
        }
        return FileStatus(raw)
    }

    /// The status of `path` itself (a symbolic link is not followed), or `nil` if it does not exist.
    package static func lstat(_ path: String) throws(Errno) -> FileStatus? {
        var raw = CStat()
        do {
            try retrying { cLstat(path, &raw) }
        } catch .noSuchFileOrDirectory {
            return nil
        }
        return FileStatus(raw)
    }

    /// The canonical absolute path of an existing `path`: every symbolic link, `.` and `..` resolved.
    package static func realPath(_ path: String) throws(Errno) -> String {
        guard let resolved = Glibc.realpath(path, nil) else { throw Errno.current }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    // MARK: Descriptors

    /// The flags of `open(2)` that callers choose (`O_CLOEXEC` is always added).
    package struct OpenFlags: OptionSet, Sendable {
        package let rawValue: Int32
        package init(rawValue: Int32) { self.rawValue = rawValue }

        package static let readOnly = OpenFlags(rawValue: O_RDONLY)
        package static let writeOnly = OpenFlags(rawValue: O_WRONLY)
        package static let readWrite = OpenFlags(rawValue: O_RDWR)
        package static let create = OpenFlags(rawValue: O_CREAT)
        /// With ``create``: fail with `EEXIST` rather than open an existing file.
        package static let exclusive = OpenFlags(rawValue: O_EXCL)
        /// Fail with `ELOOP` where the last component is a symbolic link.
        package static let noFollow = OpenFlags(rawValue: O_NOFOLLOW)
        /// Never wait in `open` (a FIFO) or on a lease.
        package static let nonBlocking = OpenFlags(rawValue: O_NONBLOCK)
        package static let directory = OpenFlags(rawValue: O_DIRECTORY)
        /// A terminal opened does not become the process's controlling terminal.
        package static let noControllingTerminal = OpenFlags(rawValue: O_NOCTTY)
    }

    /// Opens `path` (always `O_CLOEXEC`). `O_CREAT` counts as a file change for the hooks.
    package static func open(_ path: String, _ flags: OpenFlags, mode: UInt32 = 0o600) throws(Errno) -> Int32 {
        let creates = flags.contains(.create)
        if creates { try FileOperationHooks.before(.create(path: path)) }
        let fd = try retrying { Glibc.open(path, flags.rawValue | O_CLOEXEC, mode_t(mode)) }
        if creates { FileOperationHooks.after(.create(path: path)) }
        return fd
    }

    /// Opens `path`, or returns `nil` if it does not exist.
    package static func openIfExists(_ path: String, _ flags: OpenFlags) throws(Errno) -> Int32? {
        do {
            return try open(path, flags.subtracting(.create))
        } catch .noSuchFileOrDirectory {
            return nil
        }
    }

    /// Closes `fd`, swift-nio's rule for `close(2)` on Linux:
    /// - never retried, and `EINTR` counts as closed: on Linux the descriptor is gone even when
    ///   `close` reports `EINTR`, and a retry could close a descriptor another thread has just
    ///   been given;
    /// - `EBADF` is a bug in this program, not a condition to handle: a descriptor closed twice
    ///   is one whose number another thread may have been given in between, and the second close
    ///   takes that thread's file from under it (a read of a key file failed with `EBADF` that
    ///   way once). Stopping at the first such close is safer than going on with someone else's
    ///   file closed;
    /// - any other error is thrown (the descriptor is gone all the same): `EIO`, `ENOSPC` or
    ///   `EDQUOT` from a file system that writes back on close (NFS) mean written data was lost.
    package static func close(_ fd: Int32) throws(Errno) {
        guard Glibc.close(fd) == -1 else { return }
        let code = Errno.current
        if code == .badDescriptor {
            preconditionFailure("close(\(fd)) of a descriptor that is not open: a double close")
        }
        if code != .interrupted { throw code }
    }

    /// Closes `fd` where there is nothing a close could still report: a descriptor only read
    /// from, a socket, a lock, a directory, an inotify instance, or a file whose writes were
    /// synced (`fsync`/`fdatasync` reported their errors) before it. On Linux such a close fails
    /// only as ``close(_:)`` describes, and its remaining errors concern unsynced written data,
    /// which there is none of. `EBADF` stops the process as in ``close(_:)``.
    package static func closeAfterUse(_ fd: Int32) {
        do {
            try close(fd)
        } catch {
            // Nothing written is unsynced (see above): the descriptor is released all the same.
        }
    }

    // MARK: Reading

    /// One `read` into `buffer`, retried on `EINTR`. Returns how many bytes; 0 at end of file.
    package static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        guard buffer.count > 0 else { return 0 }
        return try retrying { Glibc.read(fd, buffer.baseAddress!, buffer.count) }
    }

    /// Fills `buffer` from `offset`, or fewer bytes at end of file. Returns how many.
    package static func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(Errno) -> Int {
        var done = 0
        while done < buffer.count {
            let n = try retrying {
                Glibc.pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// Reads `[offset, offset + count)` into a new array, or less at end of file.
    package static func read(_ fd: Int32, at offset: Int64, count: Int) throws(Errno) -> [UInt8] {
        guard count > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: count)
        var result: Result<Int, Errno> = .success(0)
        bytes.withUnsafeMutableBytes { buffer in
            do throws(Errno) { result = .success(try pread(fd, into: buffer, at: offset)) } catch { result = .failure(error) }
        }
        let n = try result.get()
        if n < count { bytes.removeLast(count - n) }
        return bytes
    }

    /// The end of the data worth reading in `[offset, size)`: `size`, or where a hole begins
    /// that runs to the end of the file (a sparse tail, which reads as zeros). File systems
    /// without `seekHole` report no holes.
    package static func endOfData(_ fd: Int32, from offset: Int64, size: Int64) -> Int64 {
        var hole = Int64(Glibc.lseek(fd, off_t(offset), seekHole))
        while hole >= 0 && hole < size {
            let data = Int64(Glibc.lseek(fd, off_t(hole), seekData))
            if data < 0 { return errno == ENXIO ? hole : size }  // ENXIO: only a hole follows
            hole = Int64(Glibc.lseek(fd, off_t(data), seekHole))
        }
        return size
    }

    // MARK: Writing

    /// Writes all of `bytes` at `offset` of `fd` (opened from `path`), looping over short writes.
    package static func pwriteAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64, path: String) throws(Errno) {
        let operation = FileOperationHooks.isActive ? FileOperation.write(path: path, offset: offset, bytes: Array(bytes)) : nil
        if let operation { try FileOperationHooks.before(operation) }
        var done = 0
        while done < bytes.count {
            let n = try retrying {
                Glibc.pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
            }
            done += n
        }
        if let operation { FileOperationHooks.after(operation) }
    }

    package static func truncate(_ fd: Int32, to size: Int64, path: String) throws(Errno) {
        try hooked(.truncate(path: path, size: size)) { Glibc.ftruncate(fd, off_t(size)) }
    }

    /// Writes all of `bytes` to `fd` (a pipe, a terminal, a socket): partial writes are
    /// continued and `EINTR` retried.
    package static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(Errno) {
        var done = 0
        while done < bytes.count {
            done += try retrying { Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done) }
        }
    }

    /// `fdatasync`: the data and the size, which is all an append needs.
    package static func syncData(_ fd: Int32, path: String) throws(Errno) {
        try hooked(.sync(path: path)) { Glibc.fdatasync(fd) }
    }

    /// `fsync`: data and metadata.
    package static func sync(_ fd: Int32, path: String) throws(Errno) {
        try hooked(.sync(path: path)) { Glibc.fsync(fd) }
    }

    /// `fsync`s a directory, so that a rename or a creation in it survives a crash.
    package static func syncDirectory(_ path: String) throws(Errno) {
        let fd = try open(path, [.readOnly, .directory])
        defer { closeAfterUse(fd) }
        try hooked(.syncDirectory(path: path)) { Glibc.fsync(fd) }
    }

    package static func rename(_ from: String, to: String) throws(Errno) {
        try hooked(.rename(from: from, to: to)) { Glibc.rename(from, to) }
    }

    /// Swaps the files at `first` and `second` in one step (`renameat2` with `RENAME_EXCHANGE`,
    /// Linux 3.15 and later): each name then holds what the other held, and neither is destroyed.
    /// Throws `EINVAL` (or `ENOSYS`) where the file system or C library cannot.
    package static func exchange(_ first: String, _ second: String) throws(Errno) {
        guard let renameat2 = Renameat2.function else { throw Errno.invalidArgument }
        try hooked(.exchange(first: first, second: second)) {
            renameat2(Renameat2.currentDirectory, first, Renameat2.currentDirectory, second, Renameat2.exchange)
        }
    }

    /// Takes a read lease on `fd` (opened read-only): from then on nobody else holds the file open
    /// for writing, until `fd` is closed. `false` if somebody does now (`EAGAIN`); `nil` where
    /// leases are not available (a file system without them, `fs.leases-enable=0`, a file
    /// this user does not own). No `SIGIO` is sent to this process when the lease is broken.
    package static func takeReadLease(_ fd: Int32) -> Bool? {
        let setLease: Int32 = 1024  // F_SETLEASE, declared by glibc only under _GNU_SOURCE
        if Glibc.fcntl(fd, setLease, Int32(F_RDLCK)) == 0 {
            // A lease break would signal the owner with SIGIO, which ends a process by default.
            _ = Glibc.fcntl(fd, F_SETOWN, Int32(0))
            return true
        }
        return Errno.current == .wouldBlock ? false : nil
    }

    package static func unlink(_ path: String) throws(Errno) {
        try hooked(.unlink(path: path)) { Glibc.unlink(path) }
    }

    package static func chmod(_ fd: Int32, _ mode: UInt32) throws(Errno) {
        try retrying { Glibc.fchmod(fd, mode_t(mode)) }
    }

    package static func chown(_ fd: Int32, owner: UInt32, group: UInt32) throws(Errno) {
        try retrying { Glibc.fchown(fd, uid_t(owner), gid_t(group)) }
    }

    /// Creates one directory; `false` if something already exists at `path`.
    package static func makeDirectory(_ path: String, mode: UInt32 = 0o700) throws(Errno) -> Bool {
        do {
            try hooked(.makeDirectory(path: path)) { Glibc.mkdir(path, mode_t(mode)) }
            return true
        } catch .fileExists {
            return false
        }
    }

    // MARK: Locks

    /// Takes a `flock` lock, or returns `false` at once if another descriptor holds a conflicting one.
    package static func tryLock(_ fd: Int32, exclusive: Bool) throws(Errno) -> Bool {
        do {
            try retrying { cFlock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) }
            return true
        } catch .wouldBlock {
            return false
        }
    }

    /// Takes a `flock` lock, waiting as long as it takes. Call it off the cooperative pool.
    package static func lock(_ fd: Int32, exclusive: Bool) throws(Errno) {
        try retrying { cFlock(fd, exclusive ? LOCK_EX : LOCK_SH) }
    }

    package static func unlock(_ fd: Int32) throws(Errno) {
        try retrying { cFlock(fd, LOCK_UN) }
    }

    // MARK: Hooks

    @discardableResult
    private static func hooked<Result: FixedWidthInteger>(
        _ operation: FileOperation, _ body: () -> Result
    ) throws(Errno) -> Result {
        try FileOperationHooks.before(operation)
        let result = try retrying(body)
        FileOperationHooks.after(operation)
        return result
    }
}
