// Owns: the engine behind ``EncryptedFileStore``, one open vault: opening (KDF, header check),
// keeping the in-memory ``RecordLog`` in step with the file and with other processes, writes
// under the exclusive lock, compaction and rekey. Bytes-to-records is ``RecordLog``; descriptors,
// locks and atomic replacement are ``VaultDisk`` and ``LockFile``.
internal import FoundationEssentials
internal import Logging
internal import Synchronization
internal import TokenVaultSystem

/// One open vault file, its keys and its index.
///
/// Threading: every method that changes state, and every file operation that can block (locks,
/// reads of new data, writes, `fsync`), runs on the store's serial queue, never on Swift's
/// cooperative pool. The fast read path (``lookupIfFresh(_:)``) runs on the caller's thread:
/// it asks the ``FileWatch`` whether anything touched the file (or `stat`s it where there is no
/// watch, or there was an event) and decrypts one record. Everything several threads touch is in `state`.
final class VaultFile: Sendable {
    let path: String
    let lockPath: String
    let options: EncryptedFileStore.Options
    let logger: Logger
    private let lockFile: LockFile
    private let state: Mutex<State>
    private let queueOnly: QueueOnly

    /// What several threads read and the queue changes.
    private struct State {
        var fd: Int32
        /// Whether `fd` was opened for writing. A vault this process may only read (mode 0400, a
        /// read-only mount) is opened read-only: reads work, writes fail with `permissionDenied`.
        var writable: Bool
        var identity: (device: UInt64, inode: UInt64)
        /// The file size when last read; a different size means another process wrote.
        var observedSize: Int64
        var log: RecordLog
        /// Reads records from `fd`: the index holds where they lie, not their bytes.
        var source: LogSource
        let readScratch: SecureBuffer
        /// An `fdatasync` failed: no later write may report success (see ``VaultDisk/SyncFailed``).
        var poisoned = false
        /// Tells the read path that nothing touched the file, without a `stat` of its path;
        /// `nil` where it cannot (see ``FileWatch``), and until `checksBeforeWatching` runs out.
        var watch: FileWatch?
        /// `stat` checks left before the read path sets up its watch; 0 once it has tried. A
        /// short-lived process (a `vault get`) never sets one up: the kernel frees an inotify
        /// instance only after a grace period, and a process's exit waits for it (3 ms on an idle
        /// machine, over 10 ms on a busy one, measured; the cold `vault get` went from 15 to 28 ms).
        var checksBeforeWatching = 32
        /// The state was current at a moment after `watch` was last drained: with no event since,
        /// it still is. False until a `stat` (or a catch-up) confirms it.
        var currentSinceLastPoll = false
        /// This process is writing: it holds the exclusive file lock and caught up under it, so no
        /// other process can change the file, and every write acknowledged so far is in the state.
        /// Readers use the state as it is (the write in progress has not returned, so not seeing
        /// it is correct) instead of waiting on the queue behind the write's `fdatasync`: a
        /// long-lived reader (`vault agent`) that saves a refreshed token keeps answering meanwhile.
        var writing = false
    }

    /// What only the store's serial queue touches.
    private final class QueueOnly: @unchecked Sendable {  // sodium_malloc buffers, used on the serial queue only
        let writeScratch: SecureBuffer
        let rewriteScratch: SecureBuffer
        var compactionDeferredUntil: Int64 = 0

        init() throws {
            writeScratch = try SecureBuffer()
            rewriteScratch = try SecureBuffer()
        }
    }

    // MARK: Opening

    /// Opens (or creates) the vault at `path`. Blocks: runs the KDF and reads the whole file.
    init(
        path: String, keySource: VaultConfiguration.KeySource, options: EncryptedFileStore.Options, logger: Logger
    ) throws {
        try Sodium.ensureInitialized()
        Sodium.checkSizes()
        guard !path.isEmpty else { throw VaultError(.invalidInput, "The vault file path is empty.") }
        self.options = options
        self.logger = logger
        queueOnly = try QueueOnly()
        let readScratch = try SecureBuffer()

        let secret = try KeyMaterial.load(keySource, allowInsecurePermissions: options.allowInsecurePermissions)

        let directory = AtomicFile.parentDirectory(of: path)
        if try VaultIO.stat(directory) == nil {
            guard options.createIfMissing else {
                throw VaultError(.backendUnavailable, "There is no vault file at \(path): its directory does not exist.")
            }
            try AtomicFile.makeDirectories(directory)
        }
        // Every name of one vault (a symbolic link, a relative path) takes the same lock and
        // replaces the same file; a hard link is refused when the file is read.
        let path = try VaultDisk.canonicalPath(path)
        self.path = path
        self.lockPath = path + ".lock"
        if try VaultIO.stat(path) == nil, options.createIfMissing {
            try KeyMaterial.checkNewPassphrase(secret)
        }
        // Not even a lock file is left behind when the vault may not be created and is missing.
        if !options.createIfMissing, try VaultIO.stat(path) == nil {
            throw VaultError(.backendUnavailable, "There is no vault file at \(path), and creating one was not allowed.")
        }
        let lockFile = try LockFile(path: lockPath, timeout: options.lockTimeout)
        try lockFile.lock(exclusive: false)
        var opened = try VaultDisk.open(path)
        // Keys derived while creating the vault, so that the KDF runs once, not twice.
        var created: (header: VaultHeader, keys: VaultKeys)?
        if opened == nil {
            guard options.createIfMissing else {
                throw VaultError(.backendUnavailable, "There is no vault file at \(path), and creating one was not allowed.")
            }
            try KeyMaterial.checkNewPassphrase(secret)
            // Run the KDF before taking the exclusive lock, so other processes are not held up.
            try lockFile.unlock()
            let header = VaultHeader.new(kind: secret.kind, kdf: options.kdf, salt: Sodium.randomBytes(Sodium.saltBytes))
            let keys = try VaultKeys.derive(from: secret, header: header, path: path)
            // Creating needs the exclusive lock; another process may have created it meanwhile.
            try lockFile.lock(exclusive: true)
            opened = try VaultDisk.open(path)
            if opened == nil {
                let (fd, _) = try VaultDisk.replace(path, with: header.encoded(keys: keys), logger: logger)
                logger.info("created encrypted vault file", metadata: ["path": "\(path)", "keyKind": "\(secret.kind)"])
                created = (header, keys)
                opened = (fd, true)
            }
        }
        let (fd, writable) = opened!
        var fdOwned = true
        defer { if fdOwned { VaultIO.closeAfterUse(fd) } }

        // The header, read under the lock; the records are read after the KDF.
        let snapshot = try VaultDisk.read(fd: fd, path: path, options: options)
        try lockFile.unlock()

        // The KDF runs without the lock held.
        let header = snapshot.header
        let keys: VaultKeys
        if let created, header.sameKeyDerivation(as: created.header) {
            keys = created.keys
        } else {
            try Self.checkKDFCost(header, options: options, path: path)
            keys = try VaultKeys.derive(from: secret, header: header, path: path)
        }
        try VaultHeader.verify(snapshot.headerBytes, keys: keys, header: header, path: path)

        // The records, read a chunk at a time and authenticated one by one under the shared lock
        // again, so that a batch another process is writing is seen whole or not at all. A
        // snapshot of the whole file is never held: the index keeps offsets, not bytes.
        var log = RecordLog(name: path, header: header, keys: keys)
        let source = LogSource(fd: fd, path: path)
        let (status, torn) = try lockFile.withLock(exclusive: false, logger: logger) {
            try Self.readRecords(into: &log, from: source, fd: fd, path: path, scratch: readScratch)
        }
        Self.noteTornTail(torn, log: log, logger: logger)
        self.lockFile = lockFile
        state = Mutex(
            State(
                fd: fd, writable: writable, identity: (status.device, status.inode),
                observedSize: status.size, log: log, source: source, readScratch: readScratch))
        fdOwned = false
        logger.debug(
            "opened encrypted vault file",
            metadata: ["path": "\(path)", "entries": "\(log.index.count)", "records": "\(log.recordCount)"])
    }

    deinit {
        state.withLock { VaultIO.closeAfterUse($0.fd) }
    }

    /// Reads the records of `fd` after the header into `log`, a chunk at a time; returns the
    /// file's status and the bytes of a torn tail. The caller holds the file lock.
    private static func readRecords(
        into log: inout RecordLog, from source: LogSource, fd: Int32, path: String, scratch: SecureBuffer
    ) throws -> (status: SystemCall.FileStatus, torn: Int) {
        let status = try VaultIO.fstat(fd, path: path)
        guard status.size >= log.validEnd else {
            throw VaultError(
                .truncated, "The vault file \(path) was cut short to \(status.size) bytes while it was being opened.")
        }
        let end = VaultDisk.endOfData(fd: fd, from: log.validEnd, to: status.size)
        let torn = try log.ingest(from: source, to: end, scratch: scratch)
        if end < status.size { log.markTornTail() }
        return (status, torn)
    }

    private static func noteTornTail(_ bytes: Int, log: RecordLog, logger: Logger) {
        guard bytes > 0 else { return }
        logger.notice(
            "vault file has an incomplete last write; it is ignored and repaired by the next write",
            metadata: ["path": "\(log.name)", "offset": "\(log.validEnd)", "bytes": "\(bytes)"])
    }

    /// Throws unless the vault file was opened for writing and no flush of it has failed.
    private func requireWritable() throws {
        let (writable, poisoned) = state.withLock { ($0.writable, $0.poisoned) }
        guard !poisoned else {
            throw VaultError(
                .io,
                "An earlier flush to disk of the vault file \(path) failed, so what it covered may be lost even if a later flush succeeds; nothing was written. Open the vault again to go on."
            )
        }
        guard writable else {
            throw VaultError(
                .permissionDenied,
                "The vault file \(path) is read-only for this process, so it can be read but not changed; nothing was written. Make it writable (chmod 600 \(path)) to change it."
            )
        }
    }

    // MARK: Keeping up with the file

    /// Whether the in-memory state still matches the file: same inode, same size, no torn tail.
    /// With a ``FileWatch`` and no event since the state was last found current, that is known
    /// without a system call on the path; otherwise the path is `stat`ed.
    private func isFresh(_ state: inout State) throws -> Bool {
        if state.writing { return true }
        if let watch = state.watch, !state.log.hasTornTail {
            switch watch.poll() {
            case .quiet:
                if state.currentSinceLastPoll { return true }
            case .changed:
                state.currentSinceLastPoll = false
            case .broken:
                state.watch = nil
                state.currentSinceLastPoll = false
            }
        }
        guard let status = try VaultIO.stat(path) else { return false }
        let fresh =
            status.device == state.identity.device && status.inode == state.identity.inode
            && status.size == state.observedSize && !state.log.hasTornTail
        state.currentSinceLastPoll = fresh
        if state.checksBeforeWatching > 0 {
            state.checksBeforeWatching -= 1
            if state.checksBeforeWatching == 0 {
                state.watch = FileWatch(directory: AtomicFile.parentDirectory(of: path), fd: state.fd)
                // That stat came before the watch: the next check must stat again.
                state.currentSinceLastPoll = false
            }
        }
        return fresh
    }

    /// Reads what other processes appended, or reloads a replaced file. The caller holds the
    /// file lock (shared or exclusive) and runs on the queue.
    private func catchUp(_ state: inout State) throws {
        guard let status = try VaultIO.stat(path) else {
            throw VaultError(.io, "The vault file \(path) was removed while it was in use.")
        }
        if status.device != state.identity.device || status.inode != state.identity.inode
            || status.size < state.log.validEnd
        {
            try reload(&state)
            return
        }
        // Current as of this stat, which follows the watch's last poll (both run under `state`'s lock).
        if status.size == state.observedSize && !state.log.hasTornTail {
            state.currentSinceLastPoll = true
            return
        }
        let end = VaultDisk.endOfData(fd: state.fd, from: state.log.validEnd, to: status.size)
        let torn = try state.log.ingest(from: state.source, to: end, scratch: state.readScratch)
        if end < status.size { state.log.markTornTail() }
        Self.noteTornTail(torn, log: state.log, logger: logger)
        state.observedSize = status.size
        state.currentSinceLastPoll = !state.log.hasTornTail
    }

    /// Reopens `path` after another process compacted or rekeyed it, and rebuilds the index.
    private func reload(_ state: inout State) throws {
        guard let (newFD, newWritable) = try VaultDisk.open(path) else {
            throw VaultError(.io, "The vault file \(path) was removed while it was in use.")
        }
        var owned = true
        defer { if owned { VaultIO.closeAfterUse(newFD) } }
        let loaded = try VaultDisk.read(fd: newFD, path: path, options: options)
        guard loaded.header.sameKeyDerivation(as: state.log.header) else {
            throw VaultError(
                .authenticationFailed,
                "The vault file \(path) was rekeyed by another process: its key or passphrase changed. Open it again with the new one."
            )
        }
        let keys = state.log.keys
        try VaultHeader.verify(loaded.headerBytes, keys: keys, header: loaded.header, path: path)
        var log = RecordLog(name: path, header: loaded.header, keys: keys)
        let source = LogSource(fd: newFD, path: path)
        let (status, torn) = try Self.readRecords(into: &log, from: source, fd: newFD, path: path, scratch: state.readScratch)
        Self.noteTornTail(torn, log: log, logger: logger)
        VaultIO.closeAfterUse(state.fd)
        owned = false
        state.fd = newFD
        state.writable = newWritable
        state.identity = (status.device, status.inode)
        state.log = log
        state.source = source
        state.observedSize = status.size
        Self.watchNewFile(&state)
        logger.debug("reloaded the vault file after another process replaced it", metadata: ["path": "\(path)"])
    }

    /// Watches the file now open at `state.fd`, which replaced the one watched. Until a `stat`
    /// after this, the state is not taken as current: a change between the read and the new
    /// watch raised no event.
    private static func watchNewFile(_ state: inout State) {
        if let watch = state.watch, !watch.watchFile(state.fd) { state.watch = nil }
        state.currentSinceLastPoll = false
    }

    /// Catches up with other processes under a shared lock. Queue only.
    func refresh() throws {
        try lockFile.withLock(exclusive: false, logger: logger) {
            try state.withLock { try catchUp(&$0) }
        }
    }

    // MARK: Reading (any thread)

    /// A lookup that may find the in-memory state behind the file.
    enum FreshLookup {
        case found(Data)
        case absent
        /// Another process changed the file: ``refresh()`` first, then ``lookup(_:)``.
        case stale
    }

    func lookupIfFresh(_ key: CredentialKey) throws -> FreshLookup {
        try state.withLock { state in
            guard try isFresh(&state) else { return .stale }
            return switch try state.log.lookup(key, in: state.source, scratch: state.readScratch) {
            case .found(let secret): .found(secret)
            case .absent: .absent
            }
        }
    }

    /// The secret under `key` as of the last refresh.
    func lookup(_ key: CredentialKey) throws -> RecordLog.Lookup {
        try state.withLock { try $0.log.lookup(key, in: $0.source, scratch: $0.readScratch) }
    }

    /// The keys if the in-memory state is current, `nil` if the caller must refresh first.
    func keysIfFresh(service: String?) throws -> [CredentialKey]? {
        try state.withLock { state in
            guard try isFresh(&state) else { return nil }
            return state.log.keys(service: service)
        }
    }

    func keys(service: String?) -> [CredentialKey] {
        state.withLock { $0.log.keys(service: service) }
    }

    /// How many bytes at the end of the file, as last read, belong to a write that did not
    /// finish; `nil` when none do.
    func unfinishedWriteLength() -> Int64? {
        state.withLock { $0.log.hasTornTail ? max($0.observedSize - $0.log.validEnd, 0) : nil }
    }

    // MARK: Writing (queue only)

    /// Appends `changes` as one batch and makes them durable with one `fdatasync`.
    /// Returns, for each change, whether the key held an entry before.
    func write(_ changes: [RecordLog.Change]) throws -> [Bool] {
        try lockFile.withLock(exclusive: true, logger: logger) {
            // The log's tail, not the log: a copy of the log would make `append` below copy the index.
            let (existed, effective, tail, fd) = try state.withLock { state in
                try catchUp(&state)
                // Current now, and nobody else can write until the lock is released.
                state.writing = true
                let plan = state.log.plan(changes)
                return (plan.existed, plan.effective, state.log.tail, state.fd)
            }
            defer { state.withLock { $0.writing = false } }
            guard !effective.isEmpty else { return existed }
            try requireWritable()
            let batch = try tail.seal(effective, scratch: queueOnly.writeScratch)
            do {
                try VaultDisk.append(
                    batch.bytes, fd: fd, at: tail.validEnd, cutTornTail: tail.hasTornTail, path: path, logger: logger)
            } catch let failure as VaultDisk.SyncFailed {
                state.withLock { $0.poisoned = true }
                throw failure.error
            }
            state.withLock { state in
                state.log.append(batch)
                state.observedSize = state.log.validEnd
            }
            compactIfWorthwhile()
            return existed
        }
    }

    // MARK: Rewriting: compaction and rekey (queue only)

    /// Compacts when dead records outweigh live ones. A failure is logged, not thrown: the
    /// write that triggered it is already durable. Runs under the exclusive lock.
    private func compactIfWorthwhile() {
        let (dead, live, validEnd, header) = state.withLock { ($0.log.deadBytes, $0.log.liveBytes, $0.log.validEnd, $0.log.header) }
        guard dead > live, dead >= Int64(options.compactionMinimumDeadBytes), validEnd >= queueOnly.compactionDeferredUntil
        else { return }
        do {
            try rewrite(header: header.withNewFileID(), keys: nil)
            logger.debug("compacted the vault file", metadata: ["path": "\(path)", "freedBytes": "\(dead)"])
        } catch {
            queueOnly.compactionDeferredUntil = validEnd + max(live, Int64(options.compactionMinimumDeadBytes))
            logger.warning(
                "could not compact the vault file; will try again later",
                metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    /// Compacts now, whatever the ratio.
    func compact() throws {
        try requireWritable()
        try lockFile.withLock(exclusive: true, logger: logger) {
            let header = try state.withLock { state in
                try catchUp(&state)
                return state.log.header
            }
            try rewrite(header: header.withNewFileID(), keys: nil)
        }
    }

    /// Rewrites the whole file with a new key or passphrase.
    func rekey(to source: VaultConfiguration.KeySource, kdf: EncryptedFileStore.KDFParameters) throws {
        try requireWritable()
        let secret = try KeyMaterial.load(source, allowInsecurePermissions: options.allowInsecurePermissions)
        try KeyMaterial.checkNewPassphrase(secret, rekeying: true)
        let newHeader = VaultHeader.new(kind: secret.kind, kdf: kdf, salt: Sodium.randomBytes(Sodium.saltBytes))
        let newKeys = try VaultKeys.derive(from: secret, header: newHeader, path: path)
        try lockFile.withLock(exclusive: true, logger: logger) {
            try state.withLock { try catchUp(&$0) }
            try rewrite(header: newHeader, keys: newKeys)
        }
        logger.info("rekeyed the vault file", metadata: ["path": "\(path)", "keyKind": "\(secret.kind)"])
    }

    /// Writes the live entries, resealed under `newHeader` and `newKeys` (`nil`: the same
    /// keys), to a new file that replaces the old one atomically; then switches to it.
    /// Runs with the exclusive lock held.
    private func rewrite(header newHeader: VaultHeader, keys newKeys: VaultKeys?) throws {
        let (log, fd) = state.withLock { ($0.log, $0.fd) }
        // A source of its own: the state's serves lookups on other threads meanwhile.
        let (bytes, newLog) = try log.resealed(
            header: newHeader, keys: newKeys ?? log.keys, from: LogSource(fd: fd, path: path),
            readScratch: queueOnly.rewriteScratch, writeScratch: queueOnly.writeScratch)
        let (newFD, status) = try VaultDisk.replace(path, with: bytes, logger: logger)
        state.withLock { state in
            VaultIO.closeAfterUse(state.fd)
            state.fd = newFD
            state.source.switchTo(fd: newFD, path: path)
            state.identity = (status.device, status.inode)
            state.log = newLog
            state.observedSize = newLog.validEnd
            Self.watchNewFile(&state)
        }
        queueOnly.compactionDeferredUntil = 0
    }

    // MARK: Introspection for tests and tools

    struct Statistics: Sendable {
        var entries: Int
        var records: UInt64
        var fileBytes: Int64
        var liveBytes: Int64
    }

    var watchesFile: Bool { state.withLock { $0.watch != nil } }

    var statistics: Statistics {
        state.withLock {
            Statistics(
                entries: $0.log.index.count, records: $0.log.recordCount, fileBytes: $0.log.validEnd,
                liveBytes: $0.log.liveBytes)
        }
    }
}
