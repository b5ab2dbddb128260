// Owns: replacing a file atomically (the vault's compaction and rekey, the migration's plist
// rewrite) and creating a directory with its missing parents. One recipe for both callers:
// a unique temporary file in the same directory, write, `fsync`, `rename`, `fsync` the directory.
internal import FoundationEssentials
package import Logging
internal import TokenVaultSystem

package enum AtomicFile {
    /// Who owns the replacement and its permission bits; `nil` owner means this process's user.
    package struct Attributes {
        package var mode: UInt32 = 0o600
        package var owner: (user: UInt32, group: UInt32)?

        package init(mode: UInt32 = 0o600, owner: (user: UInt32, group: UInt32)? = nil) {
            self.mode = mode
            self.owner = owner
        }
    }

    /// Replaces `path` with `bytes`: a new file `.<name>.tmp-<random>` in the same directory
    /// (`O_EXCL`, so never someone else's file), the bytes, the attributes, `fsync`, then
    /// `beforeRename` (which may throw to abort), `rename` over `path` and an `fsync` of the
    /// directory. On any failure before the rename, the temporary file is removed and `path` is
    /// untouched.
    ///
    /// Once the rename has succeeded the new contents are in place, so nothing after it throws:
    /// a directory that cannot be synced is returned instead, for the caller to report.
    ///
    /// - Parameter consequence: what a full disk leaves behind, for the `diskFull` message.
    /// - Returns: The error of the directory `fsync` after the rename, or `nil`.
    ///
    /// With `checkReplaced`, the rename is an exchange (`renameat2` `RENAME_EXCHANGE`), so that
    /// the file that was at `path` is swapped out to the temporary name rather than destroyed,
    /// and `checkReplaced` is given it open read-only, with `openForWriting` telling whether some
    /// process still holds it open for writing (a read lease, taken first, says; where leases are
    /// not available it is `false`). If the check passes, the old file is unlinked while the lease
    /// still holds, so nothing can write it afterwards. If it throws, the exchange is undone
    /// (another exchange) and its error is thrown, once the file that came back out is found to
    /// be exactly this replacement: `path` then holds what it held before the replacement. Where
    /// the file system cannot exchange (`EINVAL`), a plain `rename` follows `beforeRename` as
    /// without `checkReplaced`.
    package static func replace(
        _ path: String, with bytes: UnsafeRawBufferPointer, attributes: Attributes = Attributes(),
        diskFull consequence: String = VaultError.vaultKeepsLastState, logger: Logger? = nil,
        beforeRename: () throws -> Void = {},
        checkReplaced: ((_ fd: Int32, _ openForWriting: Bool) throws -> Void)? = nil
    ) throws -> VaultError? {
        let directory = parentDirectory(of: path)
        let suffix = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let temporary = directory + "/" + temporaryPrefix(for: path) + suffix
        let fd = try withErrnoMapped("create a temporary file in", directory, diskFull: consequence) {
            try SystemCall.open(temporary, [.writeOnly, .create, .exclusive], mode: 0o600)
        }
        var open = true
        var renamed = false
        defer {
            // Close once: a second close(2) could close a descriptor that another thread has
            // been given under the same number in the meantime.
            if open { SystemCall.closeAfterUse(fd) }
            if !renamed {
                do {
                    try SystemCall.unlink(temporary)
                } catch {
                    logger?.warning(
                        "could not remove a temporary file", metadata: ["path": "\(temporary)", "error": "\(error)"])
                }
            }
        }
        try withErrnoMapped("write to", temporary, diskFull: consequence) {
            try SystemCall.pwriteAll(fd, bytes, at: 0, path: temporary)
        }
        if let owner = attributes.owner, owner.user != SystemCall.effectiveUserID || owner.group != SystemCall.effectiveGroupID {
            try withErrnoMapped("keep the owner and group of", path) {
                try SystemCall.chown(fd, owner: owner.user, group: owner.group)
            }
        }
        // Whatever the umask said.
        try withErrnoMapped("set permissions on", temporary) { try SystemCall.chmod(fd, attributes.mode & 0o7777) }
        try withErrnoMapped("flush to disk", temporary, diskFull: consequence) { try SystemCall.sync(fd, path: temporary) }
        let replacement = try withErrnoMapped("inspect", temporary) { try SystemCall.fstat(fd) }
        open = false
        // Written and synced; a file system that writes back on close (NFS) may still fail here.
        try withErrnoMapped("close", temporary, diskFull: consequence) { try SystemCall.close(fd) }
        try beforeRename()
        if let checkReplaced, try exchange(temporary, path) {
            // `temporary` now names the old file; from here on this code decides its fate.
            renamed = true
            try settleExchange(
                path, temporary: temporary, replacement: (replacement, bytes), check: checkReplaced)
        } else {
            try withErrnoMapped("rename a file over", path, diskFull: consequence) { try SystemCall.rename(temporary, to: path) }
            renamed = true
        }
        do {
            try SystemCall.syncDirectory(directory)
            return nil
        } catch {
            return VaultError.system(error, "sync the directory", directory)
        }
    }

    /// Swaps `temporary` and `path`; `false` where the file system or C library cannot (then
    /// nothing happened).
    private static func exchange(_ temporary: String, _ path: String) throws -> Bool {
        do {
            try SystemCall.exchange(temporary, path)
            return true
        } catch let errno where errno == .invalidArgument || errno == .notImplemented || errno == .notSupported {
            return false
        } catch {
            throw VaultError.system(error, "exchange a file with", path)
        }
    }

    /// After `exchange(temporary, path)`: checks the old file, now at `temporary`, and removes it,
    /// or swaps it back and throws the check's error (see `replace`).
    private static func settleExchange(
        _ path: String, temporary: String, replacement: (status: SystemCall.FileStatus, bytes: UnsafeRawBufferPointer),
        check: (Int32, Bool) throws -> Void
    ) throws {
        let refusal: any Error
        do {
            try inspectAndRemove(temporary, check)
            return
        } catch let errno as Errno {
            refusal = VaultError.system(errno, "check the file swapped out of", path)
        } catch {
            refusal = error
        }
        do {
            try SystemCall.exchange(temporary, path)
        } catch {
            throw VaultError(
                .io,
                "\(path) was replaced while another process changed it, and could not be put back (\(error.message)): \(path) holds the new contents; what it held before is kept as \(temporary).")
        }
        // What comes out must be this replacement, untouched: anything else is a newer write by
        // another process, which is kept rather than removed.
        do {
            try inspectAndRemove(temporary) { fd, openForWriting in
                let status = try SystemCall.fstat(fd)
                guard !openForWriting, status.device == replacement.status.device, status.inode == replacement.status.inode,
                    status.size == Int64(replacement.bytes.count),
                    try SystemCall.read(fd, at: 0, count: replacement.bytes.count + 1).elementsEqual(replacement.bytes)
                else { throw Errno.fileExists }
            }
        } catch {
            throw VaultError(
                .io,
                "\(path) changed twice while it was being replaced: it holds the first change again, and the second is kept as \(temporary); compare the two.")
        }
        try? SystemCall.syncDirectory(parentDirectory(of: path))
        throw refusal
    }

    /// Opens `name` read-only, takes a read lease where it can, runs `check`, then unlinks `name`
    /// before the lease ends.
    private static func inspectAndRemove(_ name: String, _ check: (Int32, Bool) throws -> Void) throws {
        let fd = try SystemCall.open(name, [.readOnly, .nonBlocking, .noFollow])
        defer { SystemCall.closeAfterUse(fd) }
        let lease = SystemCall.takeReadLease(fd)
        try check(fd, lease == false)
        try SystemCall.unlink(name)
    }

    package static func replace(
        _ path: String, with bytes: [UInt8], attributes: Attributes = Attributes(),
        diskFull consequence: String = VaultError.vaultKeepsLastState, logger: Logger? = nil,
        beforeRename: () throws -> Void = {}
    ) throws -> VaultError? {
        try bytes.withUnsafeBytes {
            try replace(path, with: $0, attributes: attributes, diskFull: consequence, logger: logger, beforeRename: beforeRename)
        }
    }

    /// Temporary files for `path` are `.<name>.tmp-<random>` in the same directory.
    package static func temporaryPrefix(for path: String) -> String {
        "." + (path.split(separator: "/").last.map(String.init) ?? "file") + ".tmp-"
    }

    /// Removes temporary files that a process killed during a replacement of `path` left
    /// behind. Only safe while the caller excludes every other replacement (the vault's
    /// exclusive lock). A failure is logged: the leftovers are harmless and never read.
    package static func removeAbandonedTemporaries(of path: String, logger: Logger) {
        let directory = parentDirectory(of: path)
        let prefix = temporaryPrefix(for: path)
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            logger.debug("could not list the directory", metadata: ["directory": "\(directory)"])
            return
        }
        for name in names where name.hasPrefix(prefix) {
            do {
                try SystemCall.unlink(directory + "/" + name)
                logger.notice("removed an abandoned temporary file", metadata: ["path": "\(directory)/\(name)"])
            } catch {
                logger.warning(
                    "could not remove an abandoned temporary file",
                    metadata: ["path": "\(directory)/\(name)", "error": "\(error)"])
            }
        }
    }

    /// Creates `path` and any missing parents with mode `0700`. Existing directories are left as they are.
    ///
    /// Each new directory's parent is `fsync`ed: until then the new name is not durable (POSIX),
    /// and a vault created in it, its writes synced and acknowledged, could vanish with it in a
    /// crash (CrashStateTests found it; ext4's and XFS's journals usually hide it, btrfs's log
    /// has not always). Done also when another process made the directory first, which may not
    /// have synced it yet. A file system that cannot sync a directory (`EINVAL`) is left as it is.
    package static func makeDirectories(_ path: String) throws {
        if let existing = try withErrnoMapped("inspect", path, { try SystemCall.stat(path) }) {
            guard existing.isDirectory else { throw VaultError(.io, "\(path) exists and is not a directory.") }
            return
        }
        let parent = parentDirectory(of: path)
        if parent != path { try makeDirectories(parent) }
        try withErrnoMapped("create the directory", path) { _ = try SystemCall.makeDirectory(path) }
        do {
            try SystemCall.syncDirectory(parent)
        } catch let errno where errno == .invalidArgument || errno == .notSupported {
            return
        } catch {
            throw VaultError.system(error, "sync the directory", parent)
        }
    }

    /// The directory part of `path`: `"."` for a bare name, `"/"` for a name at the root.
    package static func parentDirectory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        if slash == path.startIndex { return "/" }
        return String(path[..<slash])
    }
}
