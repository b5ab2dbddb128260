// Owns: the vault's log as bytes, and nothing else. Bytes in, records and an index out
// (batches applied whole, a torn tail told apart from damage); changes sealed into bytes; the
// live entries resealed for a rewrite. No file descriptor, no lock, no clock: it is tested on
// byte arrays (RecordLogTests).
internal import Foundation

/// The in-memory state of one vault's log: which sealed record is the latest for each key,
/// where the last complete batch ends, and whether bytes after it belong to an interrupted write.
struct RecordLog {
    /// The vault's path, for messages only.
    let name: String
    private(set) var header: VaultHeader
    private(set) var keys: VaultKeys
    /// The latest sealed record of each key that holds an entry.
    private(set) var index: [CredentialKey: SealedRecord] = [:]
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

    /// Applies the records in `bytes`, which begin at file offset `validEnd`.
    ///
    /// Records are applied a whole batch at a time. A torn tail (fewer bytes than a frame
    /// header, a frame longer than the bytes, a last frame that fails its tag, zero fill, or a
    /// batch without its last record) is left unapplied and flagged. Anything else that fails is
    /// an integrity error; state then stays at the last complete batch.
    ///
    /// - Returns: How many bytes after the new `validEnd` belong to a torn tail (0 if none).
    @discardableResult
    mutating func ingest(_ bytes: UnsafeRawBufferPointer, scratch: SecureBuffer) throws -> Int {
        let base = validEnd
        var position = 0
        var committed = 0
        var sequence = recordCount
        var pending: [(SealedRecord.Opened, SealedRecord)] = []
        hasTornTail = false
        defer { hasTornTail = committed < bytes.count }
        while position < bytes.count {
            let offset = base + Int64(position)
            if bytes.count - position < SealedRecord.frameHeaderLength {
                break
            }
            let length = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: position, as: UInt32.self))
            let check = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: position + 4, as: UInt32.self))
            guard check == ~length else {
                if bytes[position...].allSatisfy({ $0 == 0 }) { break }  // zero fill after a crash
                throw damagedRecord(at: offset, "has a damaged length field")
            }
            guard (SealedRecord.minimumSealedLength...SealedRecord.maximumSealedLength).contains(Int(length)) else {
                throw damagedRecord(at: offset, "has an impossible length")
            }
            let end = position + SealedRecord.frameHeaderLength + Int(length)
            if end > bytes.count { break }  // torn: the write stopped inside this record
            let frame = UnsafeRawBufferPointer(rebasing: bytes[position..<end])
            let opened = try Self.openFrame(frame, sequence: sequence, fileID: header.fileID, keys: keys, scratch: scratch) {
                SealedRecord.decodePlaintext(UnsafeRawBufferPointer($0))
            }
            guard let opened else {
                // A last record that fails its tag, or one followed only by zeros (a write whose
                // sectors past a point never reached the disk, though the size did): torn.
                if end == bytes.count || bytes[end...].allSatisfy({ $0 == 0 }) { break }
                throw damagedRecord(at: offset, "failed authentication")
            }
            guard let parsed = opened else { throw damagedRecord(at: offset, "is malformed") }
            pending.append((parsed, SealedRecord(sequence: sequence, frame: Array(frame))))
            sequence += 1
            position = end
            if !parsed.continues {
                for (record, sealed) in pending { apply(record, sealed) }
                pending.removeAll(keepingCapacity: true)
                committed = position
                validEnd = base + Int64(committed)
                recordCount = sequence
            }
        }
        return bytes.count - committed
    }

    mutating func ingest(_ bytes: [UInt8], scratch: SecureBuffer) throws -> Int {
        try bytes.withUnsafeBytes { try ingest($0, scratch: scratch) }
    }

    /// Flags bytes after the ingested ones that were not read (a sparse tail) as a torn tail.
    mutating func markTornTail() {
        hasTornTail = true
    }

    private mutating func apply(_ record: SealedRecord.Opened, _ sealed: SealedRecord) {
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

    /// Authenticates and decrypts `frame` into `scratch` and passes the plaintext to `body`.
    /// Returns `nil` if the frame fails authentication.
    static func openFrame<Result>(
        _ frame: UnsafeRawBufferPointer, sequence: UInt64, fileID: [UInt8], keys: VaultKeys, scratch: SecureBuffer,
        _ body: (UnsafeMutableRawBufferPointer) throws -> Result
    ) throws -> Result? {
        let headerBytes = UnsafeRawBufferPointer(rebasing: frame[0..<SealedRecord.frameHeaderLength])
        let sealed = UnsafeRawBufferPointer(rebasing: frame[SealedRecord.frameHeaderLength...])
        let count = SealedRecord.plaintextCount(frameCount: frame.count)
        return try withUnsafeTemporaryAllocation(byteCount: SealedRecord.associatedDataLength, alignment: 1) { ad in
            SealedRecord.writeAssociatedData(fileID: fileID, sequence: sequence, frameHeader: headerBytes, into: ad)
            return try scratch.withBytes(count: count) { plaintext in
                guard Sodium.open(sealed, associatedData: UnsafeRawBufferPointer(ad), key: keys.recordKey, into: plaintext) == count
                else { return nil }
                return try body(plaintext)
            }
        }
    }

    /// The secret under `key`, decrypted from its sealed record.
    func lookup(_ key: CredentialKey, scratch: SecureBuffer) throws -> Lookup {
        guard let record = index[key] else { return .absent }
        let secret = try record.frame.withUnsafeBytes { frame in
            try Self.openFrame(frame, sequence: record.sequence, fileID: header.fileID, keys: keys, scratch: scratch) {
                plaintext -> Data? in
                SealedRecord.secretRange(UnsafeRawBufferPointer(plaintext)).map { Data(plaintext[$0]) }
            }
        }
        switch secret {
        case .some(.some(let secret)): return .found(secret)
        case .some(.none), .none: throw damagedRecord(at: -1, "in memory no longer authenticates")
        }
    }

    func keys(service: String?) -> [CredentialKey] {
        index.keys.filter { service == nil || $0.service == service }.sorted()
    }

    // MARK: Writing

    /// A batch sealed for appending at `validEnd`, and the index entries it makes.
    struct Batch {
        var bytes: [UInt8] = []
        fileprivate var records: [(SealedRecord.Opened, SealedRecord)] = []
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

    /// Seals `changes` as one batch that continues the log.
    func seal(_ changes: [Change], scratch: SecureBuffer) throws -> Batch {
        var batch = Batch()
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
                try Self.seal(
                    operation: operation, continues: continues, key: change.key, secret: secretBytes, sequence: sequence,
                    fileID: header.fileID, keys: keys, scratch: scratch, appendingTo: &batch.bytes)
            }
            let opened = SealedRecord.Opened(operation: operation, continues: continues, key: change.key, secretRange: 0..<0)
            batch.records.append((opened, SealedRecord(sequence: sequence, frame: Array(batch.bytes[start...]))))
        }
        return batch
    }

    /// Takes in a batch from ``seal(_:scratch:)`` once it is durable at `validEnd`.
    mutating func append(_ batch: Batch) {
        for (record, sealed) in batch.records { apply(record, sealed) }
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

    /// A whole new file (header and one put per live entry, resealed under `newHeader` and
    /// `newKeys`) and the log that describes it. The plaintext goes from one secure buffer
    /// (`readScratch`) straight into the seal (`writeScratch`).
    func resealed(
        header newHeader: VaultHeader, keys newKeys: VaultKeys, readScratch: SecureBuffer, writeScratch: SecureBuffer
    ) throws -> (bytes: [UInt8], log: RecordLog) {
        var output = newHeader.encoded(keys: newKeys)
        var log = RecordLog(name: name, header: newHeader, keys: newKeys)
        for (sequence, (key, record)) in index.sorted(by: { $0.key < $1.key }).enumerated() {
            let start = output.count
            let sealed = try record.frame.withUnsafeBytes { frame in
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
            guard sealed == true else { throw damagedRecord(at: -1, "in memory no longer authenticates") }
            let frame = Array(output[start...])
            log.liveBytes += Int64(frame.count)
            log.index[key] = SealedRecord(sequence: UInt64(sequence), frame: frame)
        }
        log.recordCount = UInt64(log.index.count)
        log.validEnd = Int64(output.count)
        return (output, log)
    }
}
