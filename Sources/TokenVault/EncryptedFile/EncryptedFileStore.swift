// Owns: the public encrypted-file store: the CredentialStore API, its serial queue, and the
// hand-off to VaultFile. No file I/O here.
public import FoundationEssentials
internal import TokenVaultSystem
public import Logging
internal import Dispatch

/// A ``CredentialStore`` in one libsodium-encrypted file, for headless servers, containers and CI.
///
/// - **Keys.** The master key is a 32-byte key file, or a passphrase stretched once per open
///   with Argon2id. Subkeys for records and for the header come from it through
///   `crypto_kdf_derive_from_key`. All key material lives in ``SecretBytes``.
/// - **Format.** A versioned header followed by an append-only log of records, each sealed with
///   XChaCha20-Poly1305 and bound to this file and to its place in the log. Service and
///   account names are inside the ciphertext. See <doc:FileFormat>.
/// - **Writes.** A save appends one record and `fdatasync`s before it returns; ``saveAll(_:)``
///   appends one batch, which becomes visible all at once, with one `fdatasync`. When dead
///   records outweigh live ones, the file is compacted: rewritten to a temporary file, synced
///   and renamed over.
/// - **Several processes.** Writers hold an exclusive `flock` on `<file>.lock`; readers notice
///   appended records or a replaced file on their next operation and read them under a shared lock.
/// - **Crashes.** A write cut short (`kill -9`, power loss) leaves a torn tail that is ignored;
///   the next write removes it. Damage anywhere else is an `integrityFailure` for the whole vault.
///
/// Loads decrypt one record on demand: the index in memory holds each entry's name and where its
/// sealed record lies in the file, so neither plaintext secrets nor the file's records sit in
/// memory (opening a vault adds far less memory than the file's size). An open still
/// authenticates every record, so damage is reported when the vault is opened. Blocking work (the KDF, locks, `fsync`) runs on a
/// dedicated serial queue, never on Swift's cooperative thread pool.
public final class EncryptedFileStore: CredentialStore, ChangeStamping, Sendable {
    /// The largest secret this backend stores (4 MiB); larger ones are refused with `tooLarge`.
    public static let maximumSecretSize = SealedRecord.maximumSecretSize

    public var backend: BackendKind { .file }

    /// Lock files beside the vault file, at its real path (links resolved), so that every path
    /// that reaches one vault meets at the same locks.
    public func refreshLockPlacement() throws -> RefreshLockPlacement { try .besideVaultFile(path) }

    /// The vault file.
    public var path: String { file.path }

    /// The vault file's device, inode, size and change time, from one `stat`: every write by any
    /// process appends (the size grows) or replaces the file (compaction, rekey: a new inode), and
    /// either moves the change time. Nil when the file cannot be read.
    package func changeStamp() -> [Int64]? {
        guard let status = try? VaultIO.stat(path) else { return nil }
        return [Int64(bitPattern: status.device), Int64(bitPattern: status.inode), status.size, status.changeTime]
    }

    /// How many bytes at the end of the vault file, as last read, belong to a write that did not
    /// finish (a process killed, or power lost, during a save that therefore never returned);
    /// `nil` when none do. They are ignored, and the next write cuts them off. Bytes cut off the
    /// end of the file at a record boundary leave no such trace (see SECURITY.md).
    public var unfinishedWriteLength: Int64? { file.unfinishedWriteLength() }

    private let file: VaultFile
    private let queue: DispatchQueue

    private init(file: VaultFile, queue: DispatchQueue) {
        self.file = file
        self.queue = queue
    }

    /// Opens the vault at `path`, creating it (and its directory, `0700`) if it is missing and
    /// `options.createIfMissing` allows it.
    ///
    /// The key or passphrase file is read here; a passphrase is stretched with Argon2id once.
    ///
    /// - Throws: ``VaultError`` with code `keyFileMissing`, `insecurePermissions`,
    ///   `authenticationFailed` (wrong key or passphrase), `notAVault`, `emptyFile`, `truncated`,
    ///   `unsupportedVersion`, `integrityFailure`, `permissionDenied`, `backendUnavailable` (no
    ///   file and creation not allowed), `invalidInput` or `io`.
    public static func open(
        path: String,
        keySource: VaultConfiguration.KeySource,
        options: Options = Options(),
        logger: Logger = Vault.noopLogger
    ) async throws -> EncryptedFileStore {
        let queue = DispatchQueue(label: "TokenVault.EncryptedFileStore")
        let file = try await run(on: queue) {
            try VaultFile(path: path, keySource: keySource, options: options, logger: logger)
        }
        return EncryptedFileStore(file: file, queue: queue)
    }

    private static func run<Value: Sendable>(
        on queue: DispatchQueue, _ body: @escaping @Sendable () throws -> Value
    ) async throws -> Value {
        // The body is dropped before the caller resumes: it holds the VaultFile, and a block that
        // still held it after resuming would close the file and its lock whenever this thread got
        // to it, not when the caller dropped the store (a remount read-only right after failed with
        // EBUSY under load, the file still open for writing).
        let job = Job(body)
        return try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: job.run())
            }
        }
    }

    /// A body that lets go of what it captured as soon as it has run.
    private final class Job<Value: Sendable>: @unchecked Sendable {  // run once, on the store's serial queue
        private var body: (@Sendable () throws -> Value)?
        init(_ body: @escaping @Sendable () throws -> Value) { self.body = body }
        /// Runs the body once, on the store's queue, and drops it.
        func run() -> Result<Value, any Error> {
            let result = Result { try body!() }
            body = nil
            return result
        }
    }

    private func onQueue<Value: Sendable>(_ body: @escaping @Sendable () throws -> Value) async throws -> Value {
        try await Self.run(on: queue, body)
    }

    // MARK: CredentialStore

    public func load(_ key: CredentialKey) async throws -> Data? {
        switch try file.lookupIfFresh(key) {
        case .found(let secret): return secret
        case .absent: return nil
        case .stale: break
        }
        let file = self.file
        try await onQueue { try file.refresh() }
        return try file.lookup(key).secret
    }

    public func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) async throws {
        try await saveAll([CredentialWrite(key: key, secret: secret, contentType: contentType)])
    }

    /// Saves every entry as one batch: one append and one `fdatasync`. Another process, or a
    /// reopen after a crash, sees either the whole batch or none of it.
    public func saveAll(_ entries: [CredentialWrite]) async throws {
        guard !entries.isEmpty else { return }
        for entry in entries where entry.secret.count > Self.maximumSecretSize {
            throw VaultError(
                .tooLarge,
                "The secret for \(entry.key) is \(entry.secret.count) bytes; the encrypted file stores at most \(Self.maximumSecretSize) bytes per entry."
            )
        }
        let changes = entries.map { RecordLog.Change.put($0.key, $0.secret) }
        let file = self.file
        _ = try await onQueue { try file.write(changes) }
    }

    @discardableResult
    public func delete(_ key: CredentialKey) async throws -> Bool {
        let file = self.file
        return try await onQueue { try file.write([.delete(key)]) }[0]
    }

    public func keys(service: String?) async throws -> [CredentialKey] {
        if let current = try file.keysIfFresh(service: service) { return current }
        let file = self.file
        try await onQueue { try file.refresh() }
        return file.keys(service: service)
    }

    // MARK: Maintenance

    /// Rewrites the file with only the live entries, now. Writes also compact on their own when
    /// dead records outweigh live ones (see ``Options/compactionMinimumDeadBytes``).
    public func compact() async throws {
        let file = self.file
        try await onQueue { try file.compact() }
    }

    /// Changes the key or passphrase: every entry is resealed under a new master key (new salt,
    /// new file id) into a new file that replaces the old one atomically.
    ///
    /// Other processes that have the vault open get `authenticationFailed` on their next
    /// operation and must reopen with the new key.
    ///
    /// The rekey first takes the refresh lock of every entry (the lock files a refresh takes,
    /// in one order), waiting at most `lockTimeout`: a refresh in flight finishes and saves its
    /// answer under the old key first, and is then sealed again with the rest; a refresh that
    /// starts during the rekey waits for it, and then finds the vault rekeyed before it sends
    /// anything (`authenticationFailed`). So a rekey never makes a refresh lose a rotated token.
    ///
    /// - Parameters:
    ///   - newSource: the new key file, passphrase file or passphrase. Its file must exist and be
    ///     private (`0600`) unless ``Options/allowInsecurePermissions`` is set.
    ///   - kdf: the Argon2id cost for a passphrase; `nil` means ``Options/kdf``.
    ///   - lockTimeout: how long to wait for refreshes in flight (then `timeout`, nothing changed).
    public func rekey(to newSource: VaultConfiguration.KeySource, kdf: KDFParameters? = nil, lockTimeout: Duration = .seconds(30)) async throws {
        let file = self.file
        let parameters = kdf ?? file.options.kdf
        var locks: [RefreshLock] = []
        defer { for lock in locks { lock.release() } }
        if case .files(let directory) = try refreshLockPlacement().lock {
            // Sorted, so that two rekeys cannot each hold a lock the other waits for (a refresh
            // holds one lock only).
            let paths = Set(try await keys(service: nil).map { try directory.lockFilePath(for: $0) }).sorted()
            for path in paths { locks.append(try await RefreshLock.acquire(path: path, timeout: lockTimeout)) }
        }
        try await onQueue { try file.rekey(to: newSource, kdf: parameters) }
    }

    /// Counts for tests and tools: entries, records in the log, bytes in the file, live bytes.
    var statistics: VaultFile.Statistics { file.statistics }

    /// Whether reads ask a ``FileWatch`` instead of `stat`ing the path (tests).
    var watchesFile: Bool { file.watchesFile }
}

extension EncryptedFileStore: RekeyableStore {
    package func rekeyAll(to newSource: VaultConfiguration.KeySource, kdf: KDFParameters?) async throws -> Int {
        try await rekey(to: newSource, kdf: kdf)
        return try await keys().count
    }
}
