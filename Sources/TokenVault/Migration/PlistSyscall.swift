import Foundation

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// The migration's file work: reading a plist and replacing it atomically. Every call goes
/// through ``Posix``, which retries `EINTR` and turns `-1` into a ``VaultError`` that names the
/// operation and the path, never file contents.
enum PlistSyscall {
    @discardableResult
    static func call<Result: FixedWidthInteger>(
        _ operation: String, _ path: String, _ body: () -> Result
    ) throws -> Result {
        try Posix.call(operation, path: path, role: .plist, body)
    }

    static func error(errno number: Int32, operation: String, path: String) -> VaultError {
        Posix.error(errno: number, operation: operation, path: path, role: .plist)
    }

    /// Reads a whole regular file, refusing anything larger than `limit` bytes.
    static func readFile(_ path: String, limit: Int) throws -> (data: Data, status: stat) {
        let fd = try call("open", path) { open(path, O_RDONLY | O_CLOEXEC) }
        defer { _ = close(fd) }
        var info = stat()
        try call("inspect", path) { fstat(fd, &info) }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            throw VaultError(.invalidInput, "\(path) is not a regular file.")
        }
        guard Int(info.st_size) <= limit else {
            throw VaultError(.tooLarge, "\(path) is larger than \(limit / (1 << 20)) MiB; it is not a defaults plist.")
        }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = try buffer.withUnsafeMutableBytes { raw in
                try call("read", path) { read(fd, raw.baseAddress, raw.count) }
            }
            if count == 0 { break }
            data.append(contentsOf: buffer[0..<count])
            guard data.count <= limit else {
                throw VaultError(.tooLarge, "\(path) is larger than \(limit / (1 << 20)) MiB; it is not a defaults plist.")
            }
        }
        return (data, info)
    }

    /// Replaces `path` atomically with `data`: a temporary file in the same directory gets the
    /// bytes, the given mode, owner and group, and an `fsync`; then `rename` puts it in place
    /// and the directory is `fsync`ed. On failure before the rename, the temporary file is
    /// removed and `path` is untouched.
    ///
    /// Once the rename has succeeded the new contents are in place, so nothing after it throws:
    /// a directory that cannot be opened or synced is returned as a warning instead, so that no
    /// caller rolls back what the plist no longer holds.
    ///
    /// `beforeRename` runs last, just before the rename, and may throw to abort.
    /// - Returns: A warning for the person running the migration, or `nil`.
    static func replaceAtomically(
        _ path: String, with data: Data, mode: mode_t, owner: uid_t, group: gid_t, beforeRename: () throws -> Void
    ) throws -> String? {
        let url = URL(fileURLWithPath: path)
        let directory = url.deletingLastPathComponent().path
        var template = Array("\(directory)/.\(url.lastPathComponent).tokenvault-XXXXXX".utf8CString)
        let fd = try template.withUnsafeMutableBufferPointer { buffer in
            try call("create a temporary file in", directory) { mkstemp(buffer.baseAddress!) }
        }
        let temporary = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        var renamed = false
        var isOpen = true
        defer {
            if isOpen { _ = close(fd) }
            if !renamed { _ = unlink(temporary) }
        }
        try data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = try call("write", temporary) {
                    write(fd, raw.baseAddress!.advanced(by: offset), raw.count - offset)
                }
                offset += written
            }
        }
        if owner != geteuid() || group != getegid() {
            try call("keep the owner and group of", path) { fchown(fd, owner, group) }
        }
        try call("keep the permissions of", path) { fchmod(fd, mode & 0o7777) }
        try call("flush", temporary) { fsync(fd) }
        isOpen = false
        try call("close", temporary) { close(fd) }
        try beforeRename()
        try call("replace", path) { rename(temporary, path) }
        renamed = true
        do {
            let directoryFD = try call("open the directory", directory) { open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
            defer { _ = close(directoryFD) }
            try call("flush the directory", directory) { fsync(directoryFD) }
            return nil
        } catch let error as VaultError {
            return
                "\(path) was rewritten without the migrated keys, but its directory could not be synced (\(error.message)) The change is in place; until the system writes it out, a power failure could bring back the old plist."
        }
    }
}
