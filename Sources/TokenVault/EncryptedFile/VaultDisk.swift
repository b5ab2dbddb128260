// Owns: the vault on disk, the file layer under ``VaultFile``: the lock file and its `flock`,
// opening the vault file (read-write, or read-only when that is all this process may do),
// reading it whole or from an offset, appending a batch durably, and replacing it atomically.
// It knows bytes and descriptors, not records (that is ``RecordLog``).
internal import Foundation
internal import Logging

#if canImport(Glibc)
internal import Glibc
#endif

/// The `<vault>.lock` file. Writers hold its `flock` exclusively, readers shared.
final class LockFile: Sendable {
    let path: String
    private let fd: Int32

    /// Opens (creating it `0600` if need be) the lock file. When it exists but may not be
    /// written, it is opened for reading: `flock` needs no more.
    init(path: String) throws {
        self.path = path
        do {
            fd = try VaultIO.open(path, flags: O_RDWR | O_CREAT, mode: 0o600)
        } catch let error as VaultError where error.code == .permissionDenied {
            guard let fd = try VaultIO.openIfExists(path, flags: O_RDONLY) else { throw error }
            self.fd = fd
        }
    }

    deinit { VaultIO.close(fd) }

    func lock(exclusive: Bool) throws {
        try VaultIO.lock(fd, exclusive: exclusive, path: path)
    }

    func unlock() throws {
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
}

enum VaultDisk {
    /// A vault file as read under the lock: its status, its bytes and its parsed header.
    struct Snapshot {
        var status: SystemCall.FileStatus
        var header: VaultHeader
        var bytes: [UInt8]
    }

    /// Opens the vault file for reading and writing, or, when this process may not write it,
    /// for reading only. `nil` if it does not exist.
    static func open(_ path: String) throws -> (fd: Int32, writable: Bool)? {
        do {
            return try VaultIO.openIfExists(path, flags: O_RDWR).map { ($0, true) }
        } catch let error as VaultError where error.code == .permissionDenied {
            guard let fd = try VaultIO.openIfExists(path, flags: O_RDONLY) else { return nil }
            return (fd, false)
        }
    }

    /// Reads a whole vault file and checks its permissions and the structure of its header.
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
        let bytes = try VaultIO.read(fd, at: 0, count: Int(status.size), path: path)
        let header = try VaultHeader.parse(bytes, fileSize: status.size, path: path)
        return Snapshot(status: status, header: header, bytes: bytes)
    }

    /// The bytes of the file from `offset` to `size`.
    static func readTail(fd: Int32, from offset: Int64, to size: Int64, path: String) throws -> [UInt8] {
        try VaultIO.read(fd, at: offset, count: Int(size - offset), path: path)
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
            try VaultIO.syncData(fd, path: path)
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
        let fd = try VaultIO.open(path, flags: O_RDWR)
        do {
            return (fd, try VaultIO.fstat(fd, path: path))
        } catch {
            VaultIO.close(fd)
            throw error
        }
    }
}
