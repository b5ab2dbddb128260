// Owns: the vault file's system calls with their errors in vault words. Each is one
// ``SystemCall`` whose ``Errno`` becomes a ``VaultError`` naming the operation and the path.
internal import TokenVaultSystem

enum VaultIO {
    static func open(_ path: String, flags: SystemCall.OpenFlags, mode: UInt32 = 0o600) throws -> Int32 {
        try withErrnoMapped("open", path) { try SystemCall.open(path, flags, mode: mode) }
    }

    /// Opens `path`, or returns `nil` if it does not exist.
    static func openIfExists(_ path: String, flags: SystemCall.OpenFlags) throws -> Int32? {
        try withErrnoMapped("open", path) { try SystemCall.openIfExists(path, flags) }
    }

    /// Closes a descriptor of the vault or its lock: nothing written through it is unsynced (every
    /// append ends with `fdatasync`), so there is nothing left for a close to report.
    static func closeAfterUse(_ fd: Int32) { SystemCall.closeAfterUse(fd) }

    static func fstat(_ fd: Int32, path: String) throws -> SystemCall.FileStatus {
        try withErrnoMapped("inspect", path) { try SystemCall.fstat(fd) }
    }

    /// The status of `path`, or `nil` if it does not exist.
    static func stat(_ path: String) throws -> SystemCall.FileStatus? {
        try withErrnoMapped("inspect", path) { try SystemCall.stat(path) }
    }

    /// The status of `path` itself, not of what a symbolic link points to; `nil` if it does not exist.
    static func lstat(_ path: String) throws -> SystemCall.FileStatus? {
        try withErrnoMapped("inspect", path) { try SystemCall.lstat(path) }
    }

    static func read(_ fd: Int32, at offset: Int64, count: Int, path: String) throws -> [UInt8] {
        try withErrnoMapped("read", path) { try SystemCall.read(fd, at: offset, count: count) }
    }

    static func pwriteAll(_ fd: Int32, _ bytes: [UInt8], at offset: Int64, path: String) throws {
        try withErrnoMapped("write to", path) {
            try bytes.withUnsafeBytes { try SystemCall.pwriteAll(fd, $0, at: offset, path: path) }
        }
    }

    static func truncate(_ fd: Int32, to size: Int64, path: String) throws {
        try withErrnoMapped("truncate", path) { try SystemCall.truncate(fd, to: size, path: path) }
    }

    static func syncData(_ fd: Int32, path: String) throws {
        try withErrnoMapped("flush to disk", path) { try SystemCall.syncData(fd, path: path) }
    }

    static func lock(_ fd: Int32, exclusive: Bool, path: String) throws {
        try withErrnoMapped("lock", path) { try SystemCall.lock(fd, exclusive: exclusive) }
    }

    static func unlock(_ fd: Int32, path: String) throws {
        try withErrnoMapped("unlock", path) { try SystemCall.unlock(fd) }
    }
}
