import FoundationEssentials

internal import TokenVaultSystem

/// A cross-process, per-key lock: an exclusive `flock` on a small lock file.
///
/// - The kernel drops an `flock` when its file descriptor is closed, including when the process
///   dies (even by `SIGKILL`), so a crashed refresher never leaves a key locked.
/// - Waiting never blocks a thread of the cooperative pool: the lock is tried with `LOCK_NB`
///   and retried after short `Task.sleep`s until the deadline, which then throws `timeout`.
/// - Lock files are never deleted: unlinking a lock file that another process has open and is
///   about to lock is the classic way to let two holders in at once. One empty file per key
///   that was ever refreshed stays behind.
/// - Two descriptors of the same file exclude each other even inside one process, so two
///   `Vault`s opened separately on one store still serialise their refreshes.
final class RefreshLock {
    private var descriptor: Int32

    private init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    deinit {
        release()
    }

    /// Takes the exclusive lock on `path`, creating the file (`0600`) if needed.
    /// - Throws: `timeout` when another holder keeps it past `timeout`; `insecurePermissions`
    ///   for a lock file owned by someone else; `io`/`permissionDenied` for system failures.
    static func acquire(path: String, timeout: Duration) async throws -> RefreshLock {
        let descriptor = try LockSyscall.check("open the lock file", path) {
            try SystemCall.open(path, [.readWrite, .create, .noFollow], mode: 0o600)
        }
        let lock = RefreshLock(descriptor: descriptor)
        let status = try LockSyscall.check("inspect the lock file", path) { try SystemCall.fstat(descriptor) }
        guard status.isOwnedByCaller, status.isRegularFile else {
            throw VaultError(
                .insecurePermissions,
                "The refresh lock file \(path) is not a regular file owned by this user; remove it.")
        }

        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        var pause = Duration.milliseconds(2)
        while true {
            if try LockSyscall.check("lock", path, { try SystemCall.tryLock(descriptor, exclusive: true) }) {
                return lock
            }
            let now = clock.now
            guard now < deadline else {
                throw VaultError(
                    .timeout,
                    "Another task or process held the refresh lock \(path) for longer than \(timeout); gave up waiting.")
            }
            // Back off up to 50 ms, never past the deadline, with jitter so that waiters spread out.
            let jittered = pause * Double.random(in: 0.5...1.0)
            try await Task.sleep(for: min(jittered, deadline - now))
            pause = min(pause * 2, .milliseconds(50))
        }
    }

    /// Releases the lock. Closing the descriptor drops the `flock`; calling twice is harmless.
    func release() {
        guard descriptor >= 0 else { return }
        // close() drops the lock even if it reports an error; SystemCall never retries it.
        SystemCall.closeAfterUse(descriptor)
        descriptor = -1
    }
}

/// Where the lock files of one store live, and how a key becomes a lock file name.
struct RefreshLockDirectory: Sendable {
    /// The directory, mode `0700`, owned by this user.
    let path: String
    /// Mixed into every file name hash, so that different stores sharing a directory never collide.
    let scope: String

    /// The lock file for `key`: a hash of the key, never its names, which the file backend keeps
    /// hidden and which may be sensitive in a shared runtime directory.
    func lockFilePath(for key: CredentialKey) throws -> String {
        try Sodium.ensureInitialized()
        var input = Data("tokenvault-refresh-lock-v1".utf8)
        for part in [scope, key.service, key.account] {
            let bytes = Data(part.utf8)
            withUnsafeBytes(of: UInt32(bytes.count).bigEndian) { input.append(contentsOf: $0) }
            input.append(bytes)
        }
        let name = hexString(Sodium.shortHash(input))
        return PathText.appending(path, "\(name).lock")
    }

    /// Lock files for the encrypted file at `vaultPath`: a `0700` directory next to it, named
    /// after it (`tokens.vault` → `tokens.vault.locks/`).
    static func forVaultFile(_ vaultPath: String) throws -> RefreshLockDirectory {
        let absolute = PathText.standardized(vaultPath)
        let parent = PathText.deletingLastComponent(absolute)
        let name = PathText.lastComponent(absolute)
        let directory = PathText.appending(parent, "\(name).locks")
        try ensurePrivateDirectory(directory)
        return RefreshLockDirectory(path: directory, scope: "file")
    }

    /// Lock files for a store shared by this user's processes, such as the Secret Service:
    /// `$XDG_RUNTIME_DIR/token-vault/locks/`; without a usable `XDG_RUNTIME_DIR` (cron jobs and
    /// services often have none), the systemd runtime directory `/run/user/<uid>` that a login
    /// session's processes use, so that they still share one lock; and only when that does not
    /// exist either, `/tmp/token-vault-<uid>/locks/`. Every directory created is `0700` and is
    /// checked to be ours.
    static func forRuntime(
        scope: String, environment: [String: String] = ProcessInfo.processInfo.environment,
        systemRuntime: String = "/run/user/\(SystemCall.effectiveUserID)"
    ) throws -> RefreshLockDirectory {
        let base: String
        if let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/"), isOwnPrivateDirectory(runtime) {
            base = PathText.appending(runtime, "token-vault")
        } else if isOwnPrivateDirectory(systemRuntime) {
            base = PathText.appending(systemRuntime, "token-vault")
        } else {
            base = "/tmp/token-vault-\(SystemCall.effectiveUserID)"
        }
        try ensurePrivateDirectory(base)
        let directory = PathText.appending(base, "locks")
        try ensurePrivateDirectory(directory)
        return RefreshLockDirectory(path: directory, scope: scope)
    }

    private static func isOwnPrivateDirectory(_ path: String) -> Bool {
        guard let status = try? SystemCall.lstat(path) else { return false }  // unusable either way
        return status.isDirectory && status.isOwnedByCaller && status.groupOrOtherBits == 0
    }

    /// Creates `path` with mode `0700` if it is missing, then insists that it is a real
    /// directory (not a symbolic link), owned by this user, that nobody else can enter.
    static func ensurePrivateDirectory(_ path: String) throws {
        try LockSyscall.check("create the lock directory", path) { _ = try SystemCall.makeDirectory(path, mode: 0o700) }
        let found = try LockSyscall.check("inspect the lock directory", path) { try SystemCall.lstat(path) }
        guard let status = found, status.isDirectory else {
            throw VaultError(.insecurePermissions, "The lock directory \(path) is not a directory; remove it.")
        }
        guard status.isOwnedByCaller else {
            throw VaultError(.insecurePermissions, "The lock directory \(path) belongs to another user; remove it.")
        }
        guard status.groupOrOtherBits == 0 else {
            throw VaultError(
                .insecurePermissions,
                "The lock directory \(path) is open to group or others; make it private with chmod 700.")
        }
    }
}

/// The refresh lock's system calls, with their errors in refresh-lock words.
enum LockSyscall {
    /// Runs one ``SystemCall``; a symbolic link where a lock file must be is `insecurePermissions`.
    @discardableResult
    static func check<Result>(_ action: String, _ path: String, _ call: () throws -> Result) throws -> Result {
        do {
            return try call()
        } catch let errno as Errno {
            if errno == .tooManySymbolicLinks {
                throw VaultError(.insecurePermissions, "Cannot \(action) \(path): it is a symbolic link.", underlying: errno)
            }
            throw VaultError.system(errno, action, path)
        }
    }
}
