internal import Foundation
internal import Logging

#if canImport(Glibc)
internal import Glibc
#endif

/// The engine behind ``EncryptedFileStore``: one open vault file, its keys and its in-memory index.
///
/// Threading: every method that changes state, and every file operation that can block (locks,
/// reads of new data, writes, `fsync`), runs on the store's serial queue, never on Swift's
/// cooperative pool. The fast read path (``lookupIfFresh(_:)``) runs on the caller's thread and
/// only `stat`s the file and decrypts one record. State is guarded by `lock`; the queue-only
/// fields (`lockFD`, `writeScratch`, `compactionDeferredUntil`) are touched only on the queue.
final class VaultFile: @unchecked Sendable {
    let path: String
    let lockPath: String
    let directory: String
    let options: EncryptedFileStore.Options
    let logger: Logger

    private let lock = NSLock()
    // Guarded by `lock`; changed only on the queue.
    private var fd: Int32
    /// Whether `fd` was opened for writing. A vault this process may only read (mode 0400, a
    /// read-only mount) is opened read-only: reads work, writes fail with `permissionDenied`.
    private var writable: Bool
    private var identity: (device: UInt64, inode: UInt64)
    private var header: VaultHeader
    private var keys: VaultKeys
    private var index: [CredentialKey: SealedRecord] = [:]
    /// The end of the last complete record (or batch): where the next record goes.
    private var validEnd: Int64
    /// The file size when last read; a different size means another process wrote.
    private var observedSize: Int64
    private var recordCount: UInt64 = 0
    /// Bytes of frames that are live (the latest put of each key).
    private var liveBytes: Int64 = 0
    /// Bytes after `validEnd` that belong to an interrupted write.
    private var hasTornTail = false
    private let readScratch: SecureBuffer

    // Queue only.
    private let lockFD: Int32
    private let writeScratch: SecureBuffer
    private let rewriteScratch: SecureBuffer
    private var compactionDeferredUntil: Int64 = 0

    // MARK: Opening

    /// Opens (or creates) the vault at `path`. Blocks: runs the KDF and reads the whole file.
    init(
        path: String, keySource: VaultConfiguration.KeySource, options: EncryptedFileStore.Options, logger: Logger
    ) throws {
        try Sodium.ensureInitialized()
        Sodium.checkSizes()
        guard !path.isEmpty else { throw VaultError(.invalidInput, "The vault file path is empty.") }
        self.path = path
        self.lockPath = path + ".lock"
        self.directory = AtomicFile.parentDirectory(of: path)
        self.options = options
        self.logger = logger
        readScratch = try SecureBuffer()
        writeScratch = try SecureBuffer()
        rewriteScratch = try SecureBuffer()

        let secret = try KeyMaterial.load(keySource, allowInsecurePermissions: options.allowInsecurePermissions)

        if try VaultIO.stat(directory) == nil {
            guard options.createIfMissing else {
                throw VaultError(.backendUnavailable, "There is no vault file at \(path): its directory does not exist.")
            }
            try AtomicFile.makeDirectories(directory)
        }
        // Not even a lock file is left behind when the vault may not be created and is missing.
        if !options.createIfMissing, try VaultIO.stat(path) == nil {
            throw VaultError(.backendUnavailable, "There is no vault file at \(path), and creating one was not allowed.")
        }
        let lockDescriptor = try Self.openLockFile(lockPath)
        var lockOwned = true
        defer { if lockOwned { VaultIO.close(lockDescriptor) } }

        try VaultIO.lock(lockDescriptor, exclusive: false, path: lockPath)
        var opened = try Self.openVaultFile(path)
        // Keys derived while creating the vault, so that the KDF runs once, not twice.
        var created: (header: VaultHeader, keys: VaultKeys)?
        if opened == nil {
            guard options.createIfMissing else {
                throw VaultError(.backendUnavailable, "There is no vault file at \(path), and creating one was not allowed.")
            }
            // Run the KDF before taking the exclusive lock, so other processes are not held up.
            try VaultIO.unlock(lockDescriptor, path: lockPath)
            let header = VaultHeader.new(kind: secret.kind, kdf: options.kdf, salt: Sodium.randomBytes(Sodium.saltBytes))
            let keys = try VaultKeys.derive(from: secret, header: header, path: path)
            // Creating needs the exclusive lock; another process may have created it meanwhile.
            try VaultIO.lock(lockDescriptor, exclusive: true, path: lockPath)
            opened = try Self.openVaultFile(path)
            if opened == nil {
                try Self.writeReplacement(header.encoded(keys: keys), path: path, directory: directory, logger: logger)
                logger.info("created encrypted vault file", metadata: ["path": "\(path)", "keyKind": "\(secret.kind)"])
                created = (header, keys)
                opened = (try VaultIO.open(path, flags: O_RDWR), true)
            }
        }
        let (fd, writable) = opened!
        var fdOwned = true
        defer { if fdOwned { VaultIO.close(fd) } }

        // A consistent snapshot, read under the lock; later changes are caught up with later.
        let snapshot = try Self.readVault(fd: fd, path: path, options: options)
        try VaultIO.unlock(lockDescriptor, path: lockPath)

        // The KDF runs without the lock held.
        let header = snapshot.header
        let keys: VaultKeys
        if let created, header.sameKeyDerivation(as: created.header) {
            keys = created.keys
        } else {
            guard header.kind != .passphrase || header.memLimit <= options.maximumKDFMemoryLimit else {
                throw VaultError(
                    .invalidInput,
                    "The vault file \(path) asks Argon2id for \(header.memLimit / 1_048_576) MiB of memory, more than the \(options.maximumKDFMemoryLimit / 1_048_576) MiB this process allows (Options.maximumKDFMemoryLimit)."
                )
            }
            // Time, too: an edited header (its checksum is unkeyed) could ask for 2^32 passes.
            guard header.kind != .passphrase || header.opsLimit <= options.maximumKDFOpsLimit else {
                throw VaultError(
                    .invalidInput,
                    "The vault file \(path) asks Argon2id for \(header.opsLimit) passes, more than the \(options.maximumKDFOpsLimit) this process allows (Options.maximumKDFOpsLimit)."
                )
            }
            keys = try VaultKeys.derive(from: secret, header: header, path: path)
        }
        try VaultHeader.verify(snapshot.bytes, keys: keys, header: header, path: path)

        self.lockFD = lockDescriptor
        self.fd = fd
        self.writable = writable
        self.identity = (snapshot.status.device, snapshot.status.inode)
        self.header = header
        self.keys = keys
        self.validEnd = Int64(VaultHeader.length)
        self.observedSize = Int64(snapshot.bytes.count)
        // Every stored property is set: from here on, a throw still runs `deinit`, which closes
        // both descriptors. The defers must not close them as well: the second close(2) could
        // close a descriptor that another thread has opened under the same number meanwhile.
        fdOwned = false
        lockOwned = false
        try ingestLocked(snapshot.bytes, from: VaultHeader.length)
        logger.debug(
            "opened encrypted vault file",
            metadata: ["path": "\(path)", "entries": "\(index.count)", "records": "\(recordCount)"])
    }

    deinit {
        VaultIO.close(fd)
        VaultIO.close(lockFD)
    }

    /// Opens the vault file for reading and writing, or, when this process may not write it,
    /// for reading only. `nil` if it does not exist.
    private static func openVaultFile(_ path: String) throws -> (fd: Int32, writable: Bool)? {
        do {
            return try VaultIO.openIfExists(path, flags: O_RDWR).map { ($0, true) }
        } catch let error as VaultError where error.code == .permissionDenied {
            guard let fd = try VaultIO.openIfExists(path, flags: O_RDONLY) else { return nil }
            return (fd, false)
        }
    }

    /// Opens (creating it `0600` if need be) the lock file. When it exists but may not be
    /// written, it is opened for reading: `flock` needs no more.
    private static func openLockFile(_ path: String) throws -> Int32 {
        do {
            return try VaultIO.open(path, flags: O_RDWR | O_CREAT, mode: 0o600)
        } catch let error as VaultError where error.code == .permissionDenied {
            guard let fd = try VaultIO.openIfExists(path, flags: O_RDONLY) else { throw error }
            return fd
        }
    }

    /// Throws unless the vault file was opened for writing. Queue only.
    private func requireWritable() throws {
        guard lock.withLock({ writable }) else {
            throw VaultError(
                .permissionDenied,
                "The vault file \(path) is read-only for this process, so it can be read but not changed; nothing was written. Make it writable (chmod 600 \(path)) to change it."
            )
        }
    }

    /// A vault file as read under the lock: its status, its bytes and its parsed header.
    private struct Snapshot {
        var status: SystemCall.FileStatus
        var header: VaultHeader
        var bytes: [UInt8]
    }

    /// Reads a whole vault file and checks its permissions and the structure of its header.
    private static func readVault(fd: Int32, path: String, options: EncryptedFileStore.Options) throws -> Snapshot {
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

    /// Replaces `path` atomically through ``AtomicFile``, first removing the temporary files of
    /// rewrites that a killed process left (the caller holds the exclusive lock).
    private static func writeReplacement(_ bytes: [UInt8], path: String, directory: String, logger: Logger) throws {
        AtomicFile.removeAbandonedTemporaries(of: path, logger: logger)
        // The new file is in place and durable itself; only the rename's own durability is in
        // question. Failing now would report a rewrite that happened as one that did not.
        if let error = try AtomicFile.replace(path, with: bytes, logger: logger) {
            logger.warning(
                "could not sync the vault directory after replacing the file; a crash now may bring back the previous version",
                metadata: ["directory": "\(directory)", "error": "\(String(describing: error))"])
        }
    }

    // MARK: Reading records

    private func damagedRecord(at offset: Int64, _ detail: String) -> VaultError {
        VaultError(
            .integrityFailure,
            "The vault file \(path) is damaged or was tampered with: the record at byte \(offset) \(detail). No entry was skipped; restore the file from a backup."
        )
    }

    /// Applies the records in `bytes[start...]`, which begin at file offset `validEnd`.
    ///
    /// Records are applied a whole batch at a time. A torn tail (fewer bytes than a frame
    /// header, a frame longer than the file, a last frame that fails its tag, zero fill, or a
    /// batch without its last record) is left unapplied and flagged. Anything else that fails is
    /// an integrity error; state then stays at the last complete batch.
    private func ingestLocked(_ bytes: [UInt8], from start: Int) throws {
        let base = validEnd - Int64(start)
        var position = start
        var committed = start
        var sequence = recordCount
        var pending: [(SealedRecord.Opened, SealedRecord)] = []
        hasTornTail = false
        try bytes.withUnsafeBytes { all in
            while position < all.count {
                let offset = base + Int64(position)
                let remaining = all.count - position
                if remaining < SealedRecord.frameHeaderLength { break }
                let length = UInt32(littleEndian: all.loadUnaligned(fromByteOffset: position, as: UInt32.self))
                let check = UInt32(littleEndian: all.loadUnaligned(fromByteOffset: position + 4, as: UInt32.self))
                guard check == ~length else {
                    if all[position...].allSatisfy({ $0 == 0 }) { break }  // zero fill after a crash
                    throw damagedRecord(at: offset, "has a damaged length field")
                }
                guard (SealedRecord.minimumSealedLength...SealedRecord.maximumSealedLength).contains(Int(length)) else {
                    throw damagedRecord(at: offset, "has an impossible length")
                }
                let end = position + SealedRecord.frameHeaderLength + Int(length)
                if end > all.count { break }  // torn: the write stopped inside this record
                let frame = UnsafeRawBufferPointer(rebasing: all[position..<end])
                let opened = try openFrame(frame, sequence: sequence, fileID: header.fileID) { plaintext in
                    SealedRecord.decodePlaintext(UnsafeRawBufferPointer(plaintext))
                }
                guard let opened else {
                    if end == all.count { break }  // a last record that fails its tag: torn
                    throw damagedRecord(at: offset, "failed authentication")
                }
                guard let parsed = opened else {
                    throw damagedRecord(at: offset, "is malformed")
                }
                pending.append((parsed, SealedRecord(sequence: sequence, frame: Array(frame))))
                sequence += 1
                position = end
                if !parsed.continues {
                    for (record, sealed) in pending { applyLocked(record, sealed) }
                    pending.removeAll(keepingCapacity: true)
                    committed = position
                    validEnd = base + Int64(committed)
                    recordCount = sequence
                }
            }
        }
        hasTornTail = committed < bytes.count
        if hasTornTail {
            logger.notice(
                "vault file has an incomplete last write; it is ignored and repaired by the next write",
                metadata: ["path": "\(path)", "offset": "\(validEnd)", "bytes": "\(Int64(bytes.count - committed))"])
        }
    }

    private func applyLocked(_ record: SealedRecord.Opened, _ sealed: SealedRecord) {
        let old = index[record.key]
        if let old { liveBytes -= Int64(old.frame.count) }
        switch record.operation {
        case .put:
            index[record.key] = sealed
            liveBytes += Int64(sealed.frame.count)
        case .delete:
            if old != nil { index[record.key] = nil }
        }
    }

    /// Authenticates and decrypts `frame` into secure scratch memory and passes the plaintext to
    /// `body`. Returns `nil` if the frame fails authentication.
    private func openFrame<Result>(
        _ frame: UnsafeRawBufferPointer, sequence: UInt64, fileID: [UInt8], keys: VaultKeys? = nil,
        scratch: SecureBuffer? = nil, _ body: (UnsafeMutableRawBufferPointer) throws -> Result
    ) throws -> Result? {
        let headerBytes = UnsafeRawBufferPointer(rebasing: frame[0..<SealedRecord.frameHeaderLength])
        let sealed = UnsafeRawBufferPointer(rebasing: frame[SealedRecord.frameHeaderLength...])
        let count = SealedRecord.plaintextCount(frameCount: frame.count)
        let key = (keys ?? self.keys).recordKey
        return try withUnsafeTemporaryAllocation(byteCount: SealedRecord.associatedDataLength, alignment: 1) { ad in
            SealedRecord.writeAssociatedData(fileID: fileID, sequence: sequence, frameHeader: headerBytes, into: ad)
            return try (scratch ?? readScratch).withBytes(count: count) { plaintext in
                guard Sodium.open(sealed, associatedData: UnsafeRawBufferPointer(ad), key: key, into: plaintext) == count
                else { return nil }
                return try body(plaintext)
            }
        }
    }

    // MARK: Freshness

    /// Whether the in-memory state still matches the file: same inode, same size, no torn tail.
    private func isFreshLocked() throws -> Bool {
        guard let status = try VaultIO.stat(path) else { return false }
        return status.device == identity.device && status.inode == identity.inode && status.size == observedSize
            && !hasTornTail
    }

    /// Reads what other processes appended, or reloads a replaced file. Holds `lock`; the
    /// caller holds the file lock (shared or exclusive) and runs on the queue.
    private func catchUpLocked() throws {
        guard let status = try VaultIO.stat(path) else {
            throw VaultError(.io, "The vault file \(path) was removed while it was in use.")
        }
        if status.device != identity.device || status.inode != identity.inode || status.size < validEnd {
            try reloadLocked()
            return
        }
        if status.size == observedSize && !hasTornTail { return }
        let readFrom = validEnd
        let bytes = try VaultIO.read(fd, at: readFrom, count: Int(status.size - readFrom), path: path)
        try ingestLocked(bytes, from: 0)
        observedSize = readFrom + Int64(bytes.count)
    }

    /// Reopens `path` after another process compacted or rekeyed it, and rebuilds the index.
    private func reloadLocked() throws {
        guard let (newFD, newWritable) = try Self.openVaultFile(path) else {
            throw VaultError(.io, "The vault file \(path) was removed while it was in use.")
        }
        var owned = true
        defer { if owned { VaultIO.close(newFD) } }
        let loaded = try Self.readVault(fd: newFD, path: path, options: options)
        guard loaded.header.sameKeyDerivation(as: header) else {
            throw VaultError(
                .authenticationFailed,
                "The vault file \(path) was rekeyed by another process: its key or passphrase changed. Open it again with the new one."
            )
        }
        try VaultHeader.verify(loaded.bytes, keys: keys, header: loaded.header, path: path)
        VaultIO.close(fd)
        fd = newFD
        writable = newWritable
        owned = false
        identity = (loaded.status.device, loaded.status.inode)
        header = loaded.header
        index = [:]
        liveBytes = 0
        recordCount = 0
        validEnd = Int64(VaultHeader.length)
        try ingestLocked(loaded.bytes, from: VaultHeader.length)
        observedSize = Int64(loaded.bytes.count)
        logger.debug("reloaded the vault file after another process replaced it", metadata: ["path": "\(path)"])
    }

    // MARK: Operations (reads on any thread, the rest on the queue)

    /// The secret under `key` if the in-memory state is current, `.none` if the caller must refresh first.
    func lookupIfFresh(_ key: CredentialKey) throws -> Data?? {
        try lock.withLock {
            guard try isFreshLocked() else { return .none }
            return .some(try lookupLocked(key))
        }
    }

    /// The secret under `key` as of the last refresh.
    func lookup(_ key: CredentialKey) throws -> Data? {
        try lock.withLock { try lookupLocked(key) }
    }

    private func lookupLocked(_ key: CredentialKey) throws -> Data? {
        guard let record = index[key] else { return nil }
        let secret = try record.frame.withUnsafeBytes { frame in
            try openFrame(frame, sequence: record.sequence, fileID: header.fileID) { plaintext -> Data? in
                guard let range = SealedRecord.secretRange(UnsafeRawBufferPointer(plaintext)) else { return nil }
                return Data(plaintext[range])
            }
        }
        guard let secret, let secret else {
            throw damagedRecord(at: -1, "in memory no longer authenticates")
        }
        return secret
    }

    /// The keys if the in-memory state is current, `nil` if the caller must refresh first.
    func keysIfFresh(service: String?) throws -> [CredentialKey]? {
        try lock.withLock {
            guard try isFreshLocked() else { return nil }
            return keysLocked(service: service)
        }
    }

    func keys(service: String?) -> [CredentialKey] {
        lock.withLock { keysLocked(service: service) }
    }

    private func keysLocked(service: String?) -> [CredentialKey] {
        index.keys.filter { service == nil || $0.service == service }.sorted()
    }

    /// Catches up with other processes under a shared lock. Queue only.
    func refresh() throws {
        try withFileLock(exclusive: false) {
            try lock.withLock { try catchUpLocked() }
        }
    }

    private func withFileLock<Result>(exclusive: Bool, _ body: () throws -> Result) throws -> Result {
        try VaultIO.lock(lockFD, exclusive: exclusive, path: lockPath)
        defer {
            do {
                try VaultIO.unlock(lockFD, path: lockPath)
            } catch {
                logger.error("could not release the vault lock", metadata: ["path": "\(lockPath)", "error": "\(error)"])
            }
        }
        return try body()
    }

    enum Change {
        case put(CredentialKey, Data)
        case delete(CredentialKey)
    }

    /// Appends `changes` as one batch and makes them durable with one `fdatasync`. Queue only.
    /// Returns, for each change, whether the key held an entry before.
    func write(_ changes: [Change]) throws -> [Bool] {
        try withFileLock(exclusive: true) {
            try lock.withLock { try catchUpLocked() }
            let existed = changes.map { change -> Bool in
                switch change {
                case .put(let key, _), .delete(let key): index[key] != nil
                }
            }
            // A delete of an absent key writes nothing (unless an earlier change in the batch put it).
            var presentInBatch: [CredentialKey: Bool] = [:]
            var effective: [Change] = []
            for change in changes {
                switch change {
                case .put(let key, _):
                    presentInBatch[key] = true
                    effective.append(change)
                case .delete(let key):
                    if presentInBatch[key] ?? (index[key] != nil) { effective.append(change) }
                    presentInBatch[key] = false
                }
            }
            guard !effective.isEmpty else { return existed }
            try requireWritable()

            var output: [UInt8] = []
            var records: [(SealedRecord.Opened, SealedRecord)] = []
            for (offset, change) in effective.enumerated() {
                let sequence = recordCount + UInt64(offset)
                let start = output.count
                let (operation, key, secret): (SealedRecord.Operation, CredentialKey, Data) =
                    switch change {
                    case .put(let key, let secret): (.put, key, secret)
                    case .delete(let key): (.delete, key, Data())
                    }
                let continues = offset < effective.count - 1
                try seal(
                    operation: operation, continues: continues, key: key, secret: secret, sequence: sequence,
                    fileID: header.fileID, keys: keys, appendingTo: &output)
                let opened = SealedRecord.Opened(
                    operation: operation, continues: continues, key: key, secretRange: 0..<0)
                records.append((opened, SealedRecord(sequence: sequence, frame: Array(output[start...]))))
            }

            if hasTornTail {
                try VaultIO.truncate(fd, to: validEnd, path: path)
                logger.notice("repaired the incomplete last write of the vault file", metadata: ["path": "\(path)"])
            }
            do {
                try VaultIO.pwriteAll(fd, output, at: validEnd, path: path)
                try VaultIO.syncData(fd, path: path)
            } catch {
                // Take back whatever part of the batch reached the file; readers would ignore a
                // partial batch anyway, but a clean tail is better.
                do {
                    try VaultIO.truncate(fd, to: validEnd, path: path)
                } catch let truncation {
                    logger.warning(
                        "could not remove a failed write from the vault file; readers ignore it",
                        metadata: ["path": "\(path)", "error": "\(truncation)"])
                }
                throw error
            }
            lock.withLock {
                for (record, sealed) in records { applyLocked(record, sealed) }
                validEnd += Int64(output.count)
                observedSize = validEnd
                recordCount += UInt64(records.count)
                hasTornTail = false
            }
            compactIfWorthwhile()
            return existed
        }
    }

    /// Seals one record and appends its frame to `output`.
    private func seal(
        operation: SealedRecord.Operation, continues: Bool, key: CredentialKey, secret: Data, sequence: UInt64,
        fileID: [UInt8], keys: VaultKeys, appendingTo output: inout [UInt8]
    ) throws {
        try secret.withUnsafeBytes { secretBytes in
            try seal(
                operation: operation, continues: continues, key: key, secret: secretBytes, sequence: sequence,
                fileID: fileID, keys: keys, appendingTo: &output)
        }
    }

    private func seal(
        operation: SealedRecord.Operation, continues: Bool, key: CredentialKey, secret: UnsafeRawBufferPointer,
        sequence: UInt64, fileID: [UInt8], keys: VaultKeys, appendingTo output: inout [UInt8]
    ) throws {
        let count = SealedRecord.plaintextCount(key: key, secretCount: secret.count)
        try writeScratch.withBytes(count: count) { plaintext in
            SealedRecord.encodePlaintext(
                operation: operation, continues: continues, key: key, secret: secret, into: plaintext)
            let length = UInt32(Sodium.aeadNonceBytes + count + Sodium.aeadTagBytes)
            var frameHeader: [UInt8] = []
            frameHeader.appendLE(length)
            frameHeader.appendLE(~length)
            let ad = frameHeader.withUnsafeBytes {
                SealedRecord.associatedData(fileID: fileID, sequence: sequence, frameHeader: $0)
            }
            output += frameHeader
            Sodium.seal(UnsafeRawBufferPointer(plaintext), associatedData: ad, key: keys.recordKey, appendingTo: &output)
        }
    }

    // MARK: Rewriting: compaction and rekey

    /// Compacts when dead records outweigh live ones. A failure is logged, not thrown: the
    /// write that triggered it is already durable. Queue only, under the exclusive lock.
    private func compactIfWorthwhile() {
        let dead = validEnd - Int64(VaultHeader.length) - liveBytes
        guard dead > liveBytes, dead >= Int64(options.compactionMinimumDeadBytes), validEnd >= compactionDeferredUntil
        else { return }
        do {
            try rewriteLocked(header: header.withNewFileID(), keys: keys)
            logger.debug("compacted the vault file", metadata: ["path": "\(path)", "freedBytes": "\(dead)"])
        } catch {
            compactionDeferredUntil = validEnd + max(liveBytes, Int64(options.compactionMinimumDeadBytes))
            logger.warning(
                "could not compact the vault file; will try again later",
                metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    /// Compacts now, whatever the ratio. Queue only.
    func compact() throws {
        try requireWritable()
        try withFileLock(exclusive: true) {
            try lock.withLock { try catchUpLocked() }
            try rewriteLocked(header: header.withNewFileID(), keys: keys)
        }
    }

    /// Rewrites the whole file with a new key or passphrase. Queue only.
    func rekey(to source: VaultConfiguration.KeySource, kdf: EncryptedFileStore.KDFParameters) throws {
        try requireWritable()
        let secret = try KeyMaterial.load(source, allowInsecurePermissions: options.allowInsecurePermissions)
        let newHeader = VaultHeader.new(kind: secret.kind, kdf: kdf, salt: Sodium.randomBytes(Sodium.saltBytes))
        let newKeys = try VaultKeys.derive(from: secret, header: newHeader, path: path)
        try withFileLock(exclusive: true) {
            try lock.withLock { try catchUpLocked() }
            try rewriteLocked(header: newHeader, keys: newKeys)
        }
        logger.info("rekeyed the vault file", metadata: ["path": "\(path)", "keyKind": "\(secret.kind)"])
    }

    /// Writes the live entries, resealed under `newHeader` and `newKeys`, to a new file that
    /// replaces the old one atomically; then switches to it. Queue only, exclusive lock held.
    private func rewriteLocked(header newHeader: VaultHeader, keys newKeys: VaultKeys) throws {
        var output = newHeader.encoded(keys: newKeys)
        var newIndex: [CredentialKey: SealedRecord] = [:]
        var newLive: Int64 = 0
        let entries = lock.withLock { index.sorted { $0.key < $1.key } }
        for (sequence, (key, record)) in entries.enumerated() {
            let start = output.count
            let sealed = try record.frame.withUnsafeBytes { frame in
                // The plaintext goes from one secure buffer (read) into the seal (write scratch).
                try openFrame(frame, sequence: record.sequence, fileID: header.fileID, scratch: rewriteScratch) { plaintext in
                    guard let opened = SealedRecord.decodePlaintext(UnsafeRawBufferPointer(plaintext)) else {
                        return false
                    }
                    try seal(
                        operation: .put, continues: false, key: key,
                        secret: UnsafeRawBufferPointer(rebasing: plaintext[opened.secretRange]),
                        sequence: UInt64(sequence), fileID: newHeader.fileID, keys: newKeys, appendingTo: &output)
                    return true
                }
            }
            guard sealed == true else { throw damagedRecord(at: -1, "in memory no longer authenticates") }
            let frame = Array(output[start...])
            newLive += Int64(frame.count)
            newIndex[key] = SealedRecord(sequence: UInt64(sequence), frame: frame)
        }
        try Self.writeReplacement(output, path: path, directory: directory, logger: logger)
        let newFD = try VaultIO.open(path, flags: O_RDWR)
        let status: SystemCall.FileStatus
        do {
            status = try VaultIO.fstat(newFD, path: path)
        } catch {
            VaultIO.close(newFD)
            throw error
        }
        lock.withLock {
            VaultIO.close(fd)
            fd = newFD
            identity = (status.device, status.inode)
            header = newHeader
            keys = newKeys
            index = newIndex
            liveBytes = newLive
            recordCount = UInt64(entries.count)
            validEnd = Int64(output.count)
            observedSize = validEnd
            hasTornTail = false
        }
        compactionDeferredUntil = 0
    }

    // MARK: Introspection for tests and tools

    struct Statistics: Sendable {
        var entries: Int
        var records: UInt64
        var fileBytes: Int64
        var liveBytes: Int64
    }

    var statistics: Statistics {
        lock.withLock {
            Statistics(entries: index.count, records: recordCount, fileBytes: validEnd, liveBytes: liveBytes)
        }
    }
}
