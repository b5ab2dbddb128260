// Owns: the vault's log as bytes, and nothing else. Bytes in, records and an index out
// (batches applied whole, a torn tail told apart from damage); changes sealed into bytes; the
// live entries resealed for a rewrite. No lock, no clock; bytes come from a ``LogSource`` (the
// file, or a byte array in RecordLogTests). The index holds where each live record lies, not
// its bytes: a lookup reads and opens its one record.
internal import FoundationEssentials

/// The in-memory state of one vault's log: which sealed record is the latest for each key,
/// where the last complete batch ends, and whether bytes after it belong to an interrupted write.
struct RecordLog {
    /// The vault's path, for messages only.
    let name: String
    private(set) var header: VaultHeader
    private(set) var keys: VaultKeys
    /// Where the latest sealed record of each key that holds an entry lies in the file.
    private(set) var index = RecordIndex()
    /// The file offset just past the last complete batch: where the next record goes.
    private(set) var validEnd = Int64(VaultHeader.length)
    /// Records in the log up to `validEnd`; the next record's sequence number.
    private(set) var recordCount: UInt64 = 0
    /// Bytes of frames that are live (the latest put of each key).
    private(set) var liveBytes: Int64 = 0
    /// Whether bytes after `validEnd` belong to an interrupted write.
    private(set) var hasTornTail = false

    init(name: String, header: VaultHeader, keys: VaultKeys) {
        self.name = name
        self.header = header
        self.keys = keys
    }

    /// Bytes of records that a later record made dead.
    var deadBytes: Int64 { validEnd - Int64(VaultHeader.length) - liveBytes }

    enum Change {
        case put(CredentialKey, Data)
        case delete(CredentialKey)

        var key: CredentialKey {
            switch self {
            case .put(let key, _), .delete(let key): key
            }
        }
    }

    /// What a lookup found.
    enum Lookup: Equatable {
        case found(Data)
        case absent

        var secret: Data? {
            if case .found(let secret) = self { return secret }
            return nil
        }
    }

    private func damagedRecord(at offset: Int64, _ detail: String) -> VaultError {
        VaultError(
            .integrityFailure,
            "The vault file \(name) is damaged or was tampered with: the record at byte \(offset) \(detail). No entry was skipped; restore the file from a backup."
        )
    }

    // MARK: Reading

    /// Applies the records in `[validEnd, end)` of `source`.
    ///
    /// Records are applied a whole batch at a time. A torn tail (fewer bytes than a frame
    /// header, a frame longer than the bytes, a last frame that fails its tag, zero fill, or a
    /// batch without its last record) is left unapplied and flagged. Anything else that fails is
    /// an integrity error; state then stays at the last complete batch. Every record's tag is
    /// checked here, so damage is found when the log is read, not at a later lookup.
    ///
    /// - Returns: How many bytes after the new `validEnd` belong to a torn tail (0 if none).
    @discardableResult
    mutating func ingest(from source: LogSource, to end: Int64, scratch: SecureBuffer) throws -> Int {
        var position = validEnd
        var committed = validEnd
        var sequence = recordCount
        var pending: [PendingRecord] = []
        // The last batch of one record (a lone set), applied after the next record's crypto, so
        // that its slot, prefetched when it was read, is in the cache by then (as a batch's are).
        var lone: PendingRecord?
        // The index is sized once, from the first records, rather than grown (and rehashed) step by step.
        let (passStart, firstSequence) = (validEnd, recordCount)
        var sizedIndex = end - passStart < 1 << 20
        hasTornTail = false
        defer {
            // Committed already: applied on every way out, a thrown error included.
            if let lone { apply(lone) }
            hasTornTail = committed < end
            source.endPass()
        }
        while position < end {
            guard let frameHeader = try source.bytes(
                at: position, count: SealedRecord.frameHeaderLength, end: end, readAhead: true)
            else { break }
            let length = UInt32(littleEndian: frameHeader.loadUnaligned(fromByteOffset: 0, as: UInt32.self))
            let check = UInt32(littleEndian: frameHeader.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
            guard check == ~length else {
                if try source.isZero(from: position, to: end) { break }  // zero fill after a crash
                // A frame header cut by the crash (it straddled a sector that reached the disk
                // and one that did not, with the size already extended): it ends in zeros, and so
                // does the rest of the file. A real header's last byte, the top byte of `~length`,
                // is never zero, so this is never a complete record.
                if frameHeader[SealedRecord.frameHeaderLength - 1] == 0,
                    try source.isZero(from: position + Int64(SealedRecord.frameHeaderLength), to: end)
                {
                    break
                }
                throw damagedRecord(at: position, "has a damaged length field")
            }
            guard (SealedRecord.minimumSealedLength...SealedRecord.maximumSealedLength).contains(Int(length)) else {
                throw damagedRecord(at: position, "has an impossible length")
            }
            let frameCount = SealedRecord.frameHeaderLength + Int(length)
            let frameEnd = position + Int64(frameCount)
            // Torn: the write stopped inside this record.
            guard let frame = try source.bytes(at: position, count: frameCount, end: end, readAhead: true) else { break }
            let opened = try Self.authenticateFrame(frame, sequence: sequence, fileID: header.fileID, keys: keys, scratch: scratch) {
                SealedRecord.decodePlaintext(prefix: $0, count: $1)
            }
            guard let opened else {
                // A last record that fails its tag, or one followed only by zeros (a write whose
                // sectors past a point never reached the disk, though the size did): torn.
                if frameEnd == end { break }
                if try source.isZero(from: frameEnd, to: end) { break }
                throw damagedRecord(at: position, "failed authentication")
            }
            guard let parsed = opened else { throw damagedRecord(at: position, "is malformed") }
            let record = PendingRecord(
                key: parsed.key, operation: parsed.operation,
                sealed: SealedRecord(sequence: sequence, offset: position, count: UInt32(frameCount)))
            sequence += 1
            position = frameEnd
            if !sizedIndex, sequence - firstSequence == 64 {
                // At most one entry per record: the rest of the pass at the first records' mean size.
                let mean = (position - passStart) / 64
                index.reserveCapacity(index.count + 64 + Int((end - position) / max(mean, 1)))
                sizedIndex = true
            }
            if parsed.continues {
                pending.append(record)
            } else {
                if pending.isEmpty {
                    // A batch of one record (every lone set): not copied through `pending` (the
                    // copies were 7 % of opening a 100,000-entry vault), and applied one record late.
                    index.prefetch(tag: record.tag)
                    if let previous = lone { apply(previous) }
                    lone = record
                } else {
                    if let previous = lone {
                        apply(previous)
                        lone = nil
                    }
                    pending.append(record)
                    // Borrowed, not copied; each record's slot is fetched a few records ahead.
                    for item in pending.indices {
                        if item + Self.prefetchDistance < pending.count { index.prefetch(tag: pending[item + Self.prefetchDistance].tag) }
                        apply(pending[item])
                    }
                    pending.removeAll(keepingCapacity: true)
                }
                committed = position
                validEnd = committed
                recordCount = sequence
            }
        }
        return Int(end - committed)
    }

    /// How many records ahead a batch's apply loop prefetches slots.
    private static let prefetchDistance = 8

    /// Applies `bytes`, which begin at file offset `validEnd` (tests).
    mutating func ingest(_ bytes: [UInt8], scratch: SecureBuffer) throws -> Int {
        try ingest(from: LogSource(bytes: bytes, base: validEnd), to: validEnd + Int64(bytes.count), scratch: scratch)
    }

    /// Flags bytes after the ingested ones that were not read (a sparse tail) as a torn tail.
    mutating func markTornTail() {
        hasTornTail = true
    }

    /// A record read or sealed, applied to the index when its batch is complete.
    fileprivate struct PendingRecord {
        var key: CredentialKey
        var operation: SealedRecord.Operation
        var sealed: SealedRecord
        /// The key's ``RecordIndex/tag(of:)``: a batch prefetches its records' slots with it.
        var tag: UInt64

        init(key: CredentialKey, operation: SealedRecord.Operation, sealed: SealedRecord) {
            self.key = key
            self.operation = operation
            self.sealed = sealed
            tag = RecordIndex.tag(of: key)
        }
    }

    /// One hash of the key per record: opening a large vault is mostly this and the crypto.
    private mutating func apply(_ record: PendingRecord) {
        let old: SealedRecord? =
            switch record.operation {
            case .put: index.updateValue(record.sealed, forKey: record.key, tag: record.tag)
            case .delete: index.removeValue(forKey: record.key, tag: record.tag)
            }
        if let old { liveBytes -= Int64(old.count) }
        if record.operation == .put { liveBytes += Int64(record.sealed.count) }
    }

    /// Authenticates and decrypts `frame` into `scratch` and passes the plaintext to `body`.
    /// Returns `nil` if the frame fails authentication.
    static func openFrame<Result>(
        _ frame: UnsafeRawBufferPointer, sequence: UInt64, fileID: [UInt8], keys: VaultKeys, scratch: SecureBuffer,
        _ body: (UnsafeMutableRawBufferPointer) throws -> Result
    ) throws -> Result? {
        let count = SealedRecord.plaintextCount(frameCount: frame.count)
        return try withSealed(frame, sequence: sequence, fileID: fileID) { sealed, ad in
            try scratch.withBytes(count: count) { plaintext in
                guard Sodium.open(sealed, associatedData: ad, key: keys.recordKey, into: plaintext) == count else { return nil }
                return try body(plaintext)
            }
        }
    }

    /// Lends `body` the sealed part of `frame` (nonce, ciphertext, tag) and the associated data
    /// that binds it to its file and its place in the log.
    private static func withSealed<Result>(
        _ frame: UnsafeRawBufferPointer, sequence: UInt64, fileID: [UInt8],
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Result
    ) rethrows -> Result {
        let headerBytes = UnsafeRawBufferPointer(rebasing: frame[0..<SealedRecord.frameHeaderLength])
        let sealed = UnsafeRawBufferPointer(rebasing: frame[SealedRecord.frameHeaderLength...])
        return try withUnsafeTemporaryAllocation(byteCount: SealedRecord.associatedDataLength, alignment: 1) { ad in
            SealedRecord.writeAssociatedData(fileID: fileID, sequence: sequence, frameHeader: headerBytes, into: ad)
            return try body(sealed, UnsafeRawBufferPointer(ad))
        }
    }

    /// The plaintext bytes a pass decrypts at first: the header and, in one ChaCha20 block
    /// after another, names of up to 119 bytes together.
    static let namesPrefixCount = 128

    /// Authenticates all of `frame` and decrypts only the start of its plaintext, up to the end
    /// of its names, into `scratch`; passes that prefix and the plaintext's whole length to
    /// `body`. Returns `nil` if the frame fails authentication.
    ///
    /// A pass through the log needs every record's tag checked and its names, not its secret:
    /// leaving the secrets sealed takes about a quarter off the crypto of opening a large vault
    /// (93 → 69 ms at 100,000 entries), and keeps them out of memory until a lookup asks for one.
    static func authenticateFrame<Result>(
        _ frame: UnsafeRawBufferPointer, sequence: UInt64, fileID: [UInt8], keys: VaultKeys, scratch: SecureBuffer,
        _ body: (UnsafeRawBufferPointer, Int) throws -> Result
    ) throws -> Result? {
        let count = SealedRecord.plaintextCount(frameCount: frame.count)
        guard count >= 0 else { return nil }
        return try withSealed(frame, sequence: sequence, fileID: fileID) { sealed, ad in
            var namesEnd = 0
            let first: Result?? = try scratch.withBytes(count: min(count, namesPrefixCount)) { prefix in
                guard Sodium.authenticate(sealed, associatedData: ad, key: keys.recordKey, decryptingPrefixInto: prefix)
                else { return .some(nil) }
                namesEnd = SealedRecord.namesEnd(UnsafeRawBufferPointer(prefix)) ?? 0
                // Longer names (rare): decrypted below, once this buffer is wiped.
                if namesEnd > prefix.count, namesEnd <= count { return nil }
                return .some(try body(UnsafeRawBufferPointer(prefix), count))
            }
            if let first { return first }
            // The frame authenticated above; these are the same bytes.
            return try scratch.withBytes(count: namesEnd) { prefix in
                Sodium.decryptPrefix(of: sealed, key: keys.recordKey, into: prefix)
                return try body(UnsafeRawBufferPointer(prefix), count)
            }
        }
    }

    /// The secret under `key`, read from `source` and decrypted from its sealed record.
    func lookup(_ key: CredentialKey, in source: LogSource, scratch: SecureBuffer) throws -> Lookup {
        guard let record = index[key] else { return .absent }
        let secret = try withFrame(record, in: source) { frame in
            try Self.openFrame(frame, sequence: record.sequence, fileID: header.fileID, keys: keys, scratch: scratch) {
                plaintext -> Data? in
                SealedRecord.secretRange(UnsafeRawBufferPointer(plaintext)).map { Data(plaintext[$0]) }
            }
        }
        switch secret {
        case .some(.some(let secret)): return .found(secret)
        case .some(.none), .none: throw damagedRecord(at: record.offset, "no longer authenticates")
        }
    }

    /// Reads the frame of `record` from `source`. The bytes were authenticated when the log was
    /// read and the file only grows before `validEnd`, so a short read means that the file was
    /// cut or tampered with since.
    private func withFrame<Result>(
        _ record: SealedRecord, in source: LogSource, _ body: (UnsafeRawBufferPointer) throws -> Result
    ) throws -> Result {
        guard let frame = try source.bytes(at: record.offset, count: Int(record.count)) else {
            throw damagedRecord(at: record.offset, "is missing: the file was cut short")
        }
        return try body(frame)
    }

    func keys(service: String?) -> [CredentialKey] {
        index.keys.filter { service == nil || $0.service == service }.sorted()
    }

    // MARK: Writing

    /// A batch sealed for appending at `validEnd`, and the index entries it makes.
    struct Batch {
        var bytes: [UInt8] = []
        fileprivate var records: [PendingRecord] = []
        var isEmpty: Bool { records.isEmpty }
    }

    /// For each change, whether its key held an entry before; and the changes that do something
    /// (a delete of an absent key writes nothing, unless an earlier change in the batch put it).
    func plan(_ changes: [Change]) -> (existed: [Bool], effective: [Change]) {
        let existed = changes.map { index[$0.key] != nil }
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
        return (existed, effective)
    }

    /// Where the log ends and what sealing there needs, without the index. A writer takes this
    /// out of the state lock, not the log: a copy of the log would share the index, and the
    /// `append(_:)` that follows the write would then copy the whole index (copy-on-write), an
    /// O(N) cost on every set (3.6 ms at 100,000 entries, measured).
    struct Tail {
        let validEnd: Int64
        let hasTornTail: Bool
        fileprivate let recordCount: UInt64
        fileprivate let fileID: [UInt8]
        fileprivate let keys: VaultKeys
    }

    var tail: Tail {
        Tail(validEnd: validEnd, hasTornTail: hasTornTail, recordCount: recordCount, fileID: header.fileID, keys: keys)
    }

    /// Seals `changes` as one batch that continues the log.
    func seal(_ changes: [Change], scratch: SecureBuffer) throws -> Batch {
        try tail.seal(changes, scratch: scratch)
    }
}

extension RecordLog.Tail {
    /// Seals `changes` as one batch that continues the log at this tail.
    func seal(_ changes: [RecordLog.Change], scratch: SecureBuffer) throws -> RecordLog.Batch {
        var batch = RecordLog.Batch()
        for (offset, change) in changes.enumerated() {
            let sequence = recordCount + UInt64(offset)
            let start = batch.bytes.count
            let (operation, secret): (SealedRecord.Operation, Data) =
                switch change {
                case .put(_, let secret): (.put, secret)
                case .delete: (.delete, Data())
                }
            let continues = offset < changes.count - 1
            try secret.withUnsafeBytes { secretBytes in
                try RecordLog.seal(
                    operation: operation, continues: continues, key: change.key, secret: secretBytes, sequence: sequence,
                    fileID: fileID, keys: keys, scratch: scratch, appendingTo: &batch.bytes)
            }
            // The offset is from the batch's start until ``append(_:)`` places it at `validEnd`.
            let sealed = SealedRecord(sequence: sequence, offset: Int64(start), count: UInt32(batch.bytes.count - start))
            batch.records.append(RecordLog.PendingRecord(key: change.key, operation: operation, sealed: sealed))
        }
        return batch
    }
}

extension RecordLog {
    /// Takes in a batch from ``seal(_:scratch:)`` once it is durable at `validEnd`.
    mutating func append(_ batch: Batch) {
        for var record in batch.records {
            record.sealed = SealedRecord(sequence: record.sealed.sequence, offset: validEnd + record.sealed.offset, count: record.sealed.count)
            apply(record)
        }
        validEnd += Int64(batch.bytes.count)
        recordCount += UInt64(batch.records.count)
        hasTornTail = false
    }

    /// Seals one record and appends its frame to `output`.
    static func seal(
        operation: SealedRecord.Operation, continues: Bool, key: CredentialKey, secret: UnsafeRawBufferPointer,
        sequence: UInt64, fileID: [UInt8], keys: VaultKeys, scratch: SecureBuffer, appendingTo output: inout [UInt8]
    ) throws {
        let count = SealedRecord.plaintextCount(key: key, secretCount: secret.count)
        try scratch.withBytes(count: count) { plaintext in
            SealedRecord.encodePlaintext(operation: operation, continues: continues, key: key, secret: secret, into: plaintext)
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

    // MARK: Rewriting

    /// A whole new file (header and one put per live entry, read from `source` and resealed
    /// under `newHeader` and `newKeys`) and the log that describes it. The plaintext goes from one
    /// secure buffer (`readScratch`) straight into the seal (`writeScratch`).
    func resealed(
        header newHeader: VaultHeader, keys newKeys: VaultKeys, from source: LogSource, readScratch: SecureBuffer,
        writeScratch: SecureBuffer
    ) throws -> (bytes: [UInt8], log: RecordLog) {
        var output = newHeader.encoded(keys: newKeys)
        var log = RecordLog(name: name, header: newHeader, keys: newKeys)
        log.index.reserveCapacity(index.count)
        for (sequence, entry) in index.entries.sorted(by: { $0.key < $1.key }).enumerated() {
            let (key, record) = (entry.key, entry.record)
            let start = output.count
            let sealed = try withFrame(record, in: source) { frame in
                try Self.openFrame(frame, sequence: record.sequence, fileID: header.fileID, keys: keys, scratch: readScratch) {
                    plaintext in
                    guard let opened = SealedRecord.decodePlaintext(UnsafeRawBufferPointer(plaintext)) else { return false }
                    try Self.seal(
                        operation: .put, continues: false, key: key,
                        secret: UnsafeRawBufferPointer(rebasing: plaintext[opened.secretRange]), sequence: UInt64(sequence),
                        fileID: newHeader.fileID, keys: newKeys, scratch: writeScratch, appendingTo: &output)
                    return true
                }
            }
            guard sealed == true else { throw damagedRecord(at: record.offset, "no longer authenticates") }
            let count = output.count - start
            log.liveBytes += Int64(count)
            log.index.updateValue(SealedRecord(sequence: UInt64(sequence), offset: Int64(start), count: UInt32(count)), forKey: key)
        }
        log.recordCount = UInt64(log.index.count)
        log.validEnd = Int64(output.count)
        return (output, log)
    }
}
