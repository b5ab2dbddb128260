import TokenVault
import Foundation

internal import TokenVaultSystem

// Owns: the migration's file work, reading a plist and replacing it atomically, in plist words.
// The calls go through ``SystemCall`` (which retries `EINTR`) and ``AtomicFile``; an ``Errno``
// becomes a ``VaultError`` that names the operation and the path, never file contents.
enum PlistSyscall {
    /// What a full disk leaves behind during a plist rewrite.
    static let plistUnchanged = "The plist was not changed"

    /// Runs one system call on a plist; a missing plist is `notFound`.
    @discardableResult
    static func call<Result>(_ operation: String, _ path: String, _ body: () throws -> Result) throws -> Result {
        do {
            return try body()
        } catch let errno as Errno {
            if errno == .noSuchFileOrDirectory {
                throw VaultError(.notFound, "Cannot \(operation) \(path): \(errno.message).", underlying: errno)
            }
            throw VaultError.system(errno, operation, path, diskFull: plistUnchanged)
        }
    }

    /// Reads a whole regular file, refusing anything larger than `limit` bytes. The file is
    /// opened `O_NONBLOCK`, so a FIFO is refused at once instead of waiting for a writer.
    static func readFile(_ path: String, limit: Int) throws -> (data: Data, status: SystemCall.FileStatus) {
        let fd = try call("open", path) { try SystemCall.open(path, [.readOnly, .nonBlocking]) }
        defer { SystemCall.closeAfterUse(fd) }
        let info = try call("inspect", path) { try SystemCall.fstat(fd) }
        guard info.isRegularFile else {
            throw VaultError(.invalidInput, "\(path) is not a regular file.")
        }
        guard Int(info.size) <= limit else {
            throw VaultError(.tooLarge, "\(path) is larger than \(limit / (1 << 20)) MiB; it is not a defaults plist.")
        }
        return (try readAll(fd, path, limit: limit), info)
    }

    /// Reads `fd` (the file `path`) from where it is to its end, refusing more than `limit` bytes.
    static func readAll(_ fd: Int32, _ path: String, limit: Int) throws -> Data {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = try buffer.withUnsafeMutableBytes { raw in
                try call("read", path) { try SystemCall.read(fd, into: raw) }
            }
            if count == 0 { break }
            data.append(contentsOf: buffer[0..<count])
            guard data.count <= limit else {
                throw VaultError(.tooLarge, "\(path) is larger than \(limit / (1 << 20)) MiB; it is not a defaults plist.")
            }
        }
        return data
    }

    /// Replaces `path` atomically with `data`, with the given mode, owner and group, through
    /// ``AtomicFile/replace(_:with:attributes:diskFull:logger:beforeRename:checkReplaced:)``. On
    /// failure before the rename, `path` is untouched. `beforeRename` runs last and may throw to
    /// abort. The rename is an exchange where the file system allows: `checkReplaced` then sees
    /// the old file swapped out, and if it throws, the old file is swapped back and `path` holds
    /// what it held before (or, if it changed again meanwhile, the error says where each is).
    ///
    /// Once the rename has succeeded the new contents are in place, so nothing after it throws:
    /// a directory that cannot be synced is returned as a warning instead, so that no caller
    /// rolls back what the plist no longer holds.
    /// - Returns: A warning for the person running the migration, or `nil`.
    static func replaceAtomically(
        _ path: String, with data: Data, mode: mode_t, owner: uid_t, group: gid_t, beforeRename: () throws -> Void,
        checkReplaced: (_ fd: Int32, _ openForWriting: Bool) throws -> Void
    ) throws -> String? {
        let attributes = AtomicFile.Attributes(mode: UInt32(mode), owner: (UInt32(owner), UInt32(group)))
        // An optional closure parameter escapes by type; this one is only called during the call.
        let directoryError = try withoutActuallyEscaping(checkReplaced) { checkReplaced in
            try data.withUnsafeBytes { bytes in
                try AtomicFile.replace(
                    path, with: bytes, attributes: attributes, diskFull: plistUnchanged, beforeRename: beforeRename,
                    checkReplaced: checkReplaced)
            }
        }
        guard let directoryError else { return nil }
        return
            "\(path) was rewritten without the migrated keys, but its directory could not be synced (\(directoryError.message)) The change is in place; until the system writes it out, a power failure could bring back the old plist."
    }
}
