// Owns: the vault on disk, the file layer under ``VaultFile``: the lock file and its `flock`,
// opening the vault file (read-write, or read-only when that is all this process may do),
// reading it whole or from an offset, appending a batch durably, and replacing it atomically.
// It knows bytes and descriptors, not records (that is ``RecordLog``).
internal import FoundationEssentials
internal import Logging
internal import TokenVaultSystem

/// The `<vault>.lock` file. Writers hold its `flock` exclusively, readers shared.
///
/// It is opened `O_NOFOLLOW` (a symbolic link is refused, never followed to create a file
/// elsewhere) and must be a regular file owned by this user. Every wait for it is bounded.
/// In a directory where it does not exist and cannot be created (a read-only mount), there is
/// no lock file: the vault can then be read, without a lock, but not changed.
final class LockFile: Sendable {
    let path: String
    private let fd: Int32?
    private let timeout: Duration

    init(path: String, timeout: Duration) throws {
        self.path = path
        self.timeout = timeout
        let flags: SystemCall.OpenFlags = [.noFollow, .nonBlocking]
        let opened: Int32?
        do {
            opened = try SystemCall.open(path, flags.union([.readWrite, .create]), mode: 0o600)
        } catch let errno where errno.isPermission {
            // Not writable here: an existing lock file can still be locked through a read-only descriptor.
            do {
                opened = try SystemCall.openIfExists(path, flags.union(.readOnly))
            } catch {
                throw Self.error(error, "open", path)
            }
        } catch {
            throw Self.error(error, "open", path)
        }
        // Checked before `self.fd` owns it: once it does, `deinit` closes it, and a second close
        // here would close whatever descriptor another thread was given the same number meanwhile.
        if let fd = opened {
            let status: SystemCall.FileStatus
            do {
                status = try SystemCall.fstat(fd)
            } catch {
                VaultIO.closeAfterUse(fd)
                throw Self.error(error, "inspect", path)
            }
            guard status.isRegularFile, status.isOwnedByCaller else {
                VaultIO.closeAfterUse(fd)
                throw VaultError(
                    .insecurePermissions,
                    "The vault lock file \(path) is not a regular file owned by this user (owner uid \(status.owner)); remove it.")
            }
        }
        fd = opened
    }

    private static func error(_ errno: Errno, _ operation: String, _ path: String) -> VaultError {
        if errno == .tooManySymbolicLinks {
            return VaultError(
                .insecurePermissions, "The vault lock file \(path) is a symbolic link; remove it.", underlying: errno)
        }
        return VaultError.system(errno, operation, path)
    }

    deinit {
        if let fd { VaultIO.closeAfterUse(fd) }
    }

    /// Takes the lock, waiting at most `timeout` (``EncryptedFileStore/Options/lockTimeout``).
    /// Blocks the calling thread: call it on the store's queue.
    func lock(exclusive: Bool) throws {
        guard let fd else {
            guard !exclusive else {
                throw VaultError(
                    .permissionDenied,
                    "The vault lock file \(path) does not exist and cannot be created (the directory is read-only), so the vault can be read but not changed; nothing was written."
                )
            }
            return
        }
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        var pause = Duration.milliseconds(1)
        while try !withErrnoMapped("lock", path, { try SystemCall.tryLock(fd, exclusive: exclusive) }) {
            let now = clock.now
            guard now < deadline else {
                throw VaultError(
                    .timeout,
                    "Another process\(holder(fd).map { " (PID \($0))" } ?? "") held the vault lock \(path) for longer than \(Self.seconds(timeout)); gave up waiting. Nothing was changed."
                )
            }
            let sleep = min(pause, deadline - now)
            let (seconds, attoseconds) = sleep.components
            SystemCall.sleep(seconds: Double(seconds) + Double(attoseconds) / 1e18)
            pause = min(pause * 2, .milliseconds(50))
        }
    }

    /// "10 s", "0.3 s": a duration as people read it.
    static func seconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let value = Double(seconds) + Double(attoseconds) / 1e18
        return value == value.rounded() ? "\(Int64(value)) s" : "\(oneDecimal(value)) s"
    }

    func unlock() throws {
        guard let fd else { return }
        try VaultIO.unlock(fd, path: path)
    }

    /// Runs `body` holding the lock; a failure to release it is logged (closing drops it anyway).
    func withLock<Result>(exclusive: Bool, logger: Logger, _ body: () throws -> Result) throws -> Result {
        try lock(exclusive: exclusive)
        defer {
            do {
                try unlock()
            } catch {
                logger.error("could not release the vault lock", metadata: ["path": "\(path)", "error": "\(error)"])
            }
        }
        return try body()
    }

    /// The PID of a process holding an `flock` on the file of `fd`, from `/proc/locks`; `nil`
    /// when it cannot be told (no `/proc`, or the holder is in another PID namespace).
    private func holder(_ fd: Int32) -> Int? {
        guard let status = try? SystemCall.fstat(fd),  // only for the message
            let table = try? String(contentsOfFile: "/proc/locks", encoding: .utf8)  // only for the message
        else { return nil }
        let major = ((status.device >> 8) & 0xfff) | ((status.device >> 32) & ~0xfff)
        let minor = (status.device & 0xff) | ((status.device >> 12) & ~0xff)
        let file = "\(hexDigits(major, width: 2)):\(hexDigits(minor, width: 2)):\(status.inode)"
        for line in table.split(separator: "\n") where !line.contains("->") {
            // "1: FLOCK  ADVISORY  WRITE 12345 08:01:123456 0 EOF"
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 6, fields[1] == "FLOCK", fields[5] == file, let pid = Int(fields[4]), pid > 0 else { continue }
            return pid
        }
        return nil
    }
}

enum VaultDisk {
    /// A vault file as inspected under the lock: its status, its header's bytes and the parsed
    /// header, and where its data ends. The records are read later, a chunk at a time.
    struct Snapshot {
        var status: SystemCall.FileStatus
        var header: VaultHeader
        var headerBytes: [UInt8]
        /// `status.size`, or where a hole begins that runs to the end (a sparse tail).
        var dataEnd: Int64
    }

    /// The canonical path of the vault at `path`: every symbolic link, `.` and `..` resolved,
    /// so that every name of one vault takes the same lock and a rewrite replaces the real file,
    /// not a link to it. Refuses a dangling symbolic link (never creates through one) and
    /// anything at `path` that is not a regular file, before any lock file is made for it.
    static func canonicalPath(_ path: String) throws -> String {
        let resolved: String
        if let entry = try VaultIO.lstat(path) {
            if entry.isSymbolicLink, try VaultIO.stat(path) == nil {
                throw VaultError(
                    .insecurePermissions,
                    "The vault path \(path) is a symbolic link to a file that does not exist; a vault is never created through a link. Remove the link or point to the vault's real path."
                )
            }
            resolved = try withErrnoMapped("resolve", path) { try SystemCall.realPath(path) }
        } else {
            let directory = AtomicFile.parentDirectory(of: path)
            let name = String(path.split(separator: "/").last ?? "")
            guard try VaultIO.stat(directory) != nil, !name.isEmpty, name != ".", name != ".." else { return path }
            let base = try withErrnoMapped("resolve", directory) { try SystemCall.realPath(directory) }
            resolved = (base == "/" ? "" : base) + "/" + name
        }
        if let status = try VaultIO.stat(resolved), !status.isRegularFile {
            throw VaultError(.notAVault, "\(path) is not a regular file, so it is not a vault file.")
        }
        return resolved
    }

    /// Opens the vault file for reading and writing, or, when this process may not write it,
    /// for reading only. `nil` if it does not exist.
    static func open(_ path: String) throws -> (fd: Int32, writable: Bool)? {
        do {
            return try VaultIO.openIfExists(path, flags: [.readWrite, .nonBlocking]).map { ($0, true) }
        } catch let error as VaultError where error.code == .permissionDenied {
            guard let fd = try VaultIO.openIfExists(path, flags: [.readOnly, .nonBlocking]) else { return nil }
            return (fd, false)
        }
    }

    /// Reads a vault file's header and checks its permissions and the structure of its header.
    static func read(fd: Int32, path: String, options: EncryptedFileStore.Options) throws -> Snapshot {
        let status = try VaultIO.fstat(fd, path: path)
        guard status.isRegularFile else {
            throw VaultError(.notAVault, "\(path) is not a regular file, so it is not a vault file.")
        }
        if status.groupOrOtherBits != 0 && !options.allowInsecurePermissions {
            throw VaultError(
                .insecurePermissions,
                "The vault file \(path) can be read or written by group or others (mode \(KeyMaterial.octal(status.permissionBits))). Run `chmod 600 \(path)`, or accept it explicitly: --allow-insecure-permissions or TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS=1 for the vault command, allowInsecurePermissions in the library."
            )
        }
        guard status.isOwnedByCaller else {
            throw VaultError(
                .insecurePermissions,
                "The vault file \(path) belongs to another user (uid \(status.owner)); a vault must be owned by the user who opens it. Nothing was read."
            )
        }
        guard status.linkCount == 1 else {
            throw VaultError(
                .insecurePermissions,
                "The vault file \(path) has \(status.linkCount) hard links. A vault reached by several names would take different locks and be replaced under one name only, so it is refused; remove the other links (find / -samefile \(path))."
            )
        }
        let end = SystemCall.endOfData(fd, from: 0, size: status.size)
        let bytes = try VaultIO.read(fd, at: 0, count: Int(min(end, Int64(VaultHeader.length))), path: path)
        let header = try VaultHeader.parse(bytes, fileSize: status.size, path: path)
        return Snapshot(status: status, header: header, headerBytes: bytes, dataEnd: end)
    }

    /// Where the data worth reading from `offset` to `size` ends: without a sparse tail (a hole
    /// to the end of the file reads as zeros, which is a torn tail: it is not read, however large).
    static func endOfData(fd: Int32, from offset: Int64, to size: Int64) -> Int64 {
        SystemCall.endOfData(fd, from: offset, size: size)
    }

    /// Writes `bytes` at `offset` (first cutting off a torn tail there, if any) and makes them
    /// durable with `fdatasync`. On failure, whatever part reached the file is cut off again.
    static func append(
        _ bytes: [UInt8], fd: Int32, at offset: Int64, cutTornTail: Bool, path: String, logger: Logger
    ) throws {
        if cutTornTail {
            try VaultIO.truncate(fd, to: offset, path: path)
            logger.notice("repaired the incomplete last write of the vault file", metadata: ["path": "\(path)"])
        }
        do {
            try VaultIO.pwriteAll(fd, bytes, at: offset, path: path)
            do {
                try VaultIO.syncData(fd, path: path)
            } catch let error as VaultError {
                throw SyncFailed(error: error)
            }
        } catch {
            // Readers would ignore a partial batch anyway, but a clean tail is better.
            do {
                try VaultIO.truncate(fd, to: offset, path: path)
            } catch let truncation {
                logger.warning(
                    "could not remove a failed write from the vault file; readers ignore it",
                    metadata: ["path": "\(path)", "error": "\(truncation)"])
            }
            throw error
        }
    }

    /// An `fdatasync` of the vault failed. The kernel may have dropped the pages it covered and
    /// marked them clean, so a later `fsync` can succeed without them (PostgreSQL's "fsyncgate"):
    /// the descriptor is not to be trusted with more writes.
    struct SyncFailed: Error {
        var error: VaultError
    }

    /// Replaces the vault file with `bytes` atomically and opens the new file. The caller holds
    /// the exclusive lock, so temporary files of rewrites that a killed process left are removed first.
    static func replace(_ path: String, with bytes: [UInt8], logger: Logger) throws -> (fd: Int32, status: SystemCall.FileStatus) {
        AtomicFile.removeAbandonedTemporaries(of: path, logger: logger)
        // The new file is in place and durable itself; only the rename's own durability is in
        // question. Failing now would report a rewrite that happened as one that did not.
        if let error = try AtomicFile.replace(path, with: bytes, logger: logger) {
            logger.warning(
                "could not sync the vault directory after replacing the file; a crash now may bring back the previous version",
                metadata: ["directory": "\(AtomicFile.parentDirectory(of: path))", "error": "\(String(describing: error))"])
        }
        let fd = try VaultIO.open(path, flags: .readWrite)
        do {
            return (fd, try VaultIO.fstat(fd, path: path))
        } catch {
            VaultIO.closeAfterUse(fd)
            throw error
        }
    }
}
