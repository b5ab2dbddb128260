// The pure log layer on byte arrays: no file, no lock. Round trips, batch atomicity, a torn
// tail cut at every byte, zero fill, and tampering anywhere in a record.
import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

@Suite struct RecordLogTests {
    typealias S = FileTestSupport

    /// A fresh log with a random key-file key.
    static func makeLog() throws -> RecordLog {
        try Sodium.ensureInitialized()
        let header = VaultHeader.new(kind: .keyFile, kdf: nil, salt: Sodium.randomBytes(Sodium.saltBytes))
        return RecordLog(name: "test.vault", header: header, keys: try VaultKeys(master: try SecretBytes.random(count: 32)))
    }

    /// Seals and appends `changes` as one batch; returns its bytes.
    static func append(_ changes: [RecordLog.Change], to log: inout RecordLog, scratch: SecureBuffer) throws -> [UInt8] {
        let batch = try log.seal(log.plan(changes).effective, scratch: scratch)
        log.append(batch)
        return batch.bytes
    }

    /// A log with three batches and its bytes (after the header).
    static func sample() throws -> (RecordLog, [UInt8], scratch: SecureBuffer) {
        var log = try makeLog()
        let scratch = try SecureBuffer()
        var bytes: [UInt8] = []
        bytes += try append([.put(S.key("a"), Data("one".utf8))], to: &log, scratch: scratch)
        bytes += try append([.put(S.key("b"), Data("two".utf8)), .put(S.key("c"), Data("three".utf8))], to: &log, scratch: scratch)
        bytes += try append([.delete(S.key("a")), .put(S.key("b"), Data("two again".utf8))], to: &log, scratch: scratch)
        return (log, bytes, scratch)
    }

    /// A log with the sample's keys and header, but nothing ingested.
    static func empty(like log: RecordLog) -> RecordLog {
        RecordLog(name: log.name, header: log.header, keys: log.keys)
    }

    @Test func roundTrip() throws {
        let (written, bytes, scratch) = try Self.sample()
        var read = Self.empty(like: written)
        #expect(try read.ingest(bytes, scratch: scratch) == 0)
        #expect(read.keys(service: nil) == [S.key("b"), S.key("c")])
        let source = LogSource(bytes: bytes)
        #expect(try read.lookup(S.key("b"), in: source, scratch: scratch) == .found(Data("two again".utf8)))
        #expect(try read.lookup(S.key("a"), in: source, scratch: scratch) == .absent)
        #expect(read.recordCount == 5 && read.validEnd == written.validEnd && read.liveBytes == written.liveBytes)
        #expect(!read.hasTornTail)
    }

    /// A pass decrypts a record's first 128 plaintext bytes and, for longer names, the rest of
    /// them in a second step: names that end just before, at and after that edge, and the
    /// longest ones, all read back whole, with their secrets.
    @Test func namesAroundTheFirstDecryptedBytesReadBack() throws {
        var written = try Self.makeLog()
        let scratch = try SecureBuffer()
        let edge = RecordLog.namesPrefixCount - SealedRecord.plaintextHeaderLength  // service + account bytes that fit
        var keys: [CredentialKey] = []
        for total in [2, edge - 1, edge, edge + 1, 200, 2 * CredentialKey.maximumPartLength] {
            keys.append(
                try CredentialKey(
                    service: String(repeating: "s", count: total / 2), account: String(repeating: "a", count: total - total / 2)))
        }
        // Across the edge, a two-byte character split by it.
        keys.append(try CredentialKey(service: "service", account: String(repeating: "é", count: 80)))
        var bytes: [UInt8] = []
        for (index, key) in keys.enumerated() {
            bytes += try Self.append([.put(key, Data("secret \(index)".utf8))], to: &written, scratch: scratch)
        }
        var read = Self.empty(like: written)
        #expect(try read.ingest(bytes, scratch: scratch) == 0)
        #expect(read.keys(service: nil) == keys.sorted())
        for (index, key) in keys.enumerated() {
            #expect(try read.lookup(key, in: LogSource(bytes: bytes), scratch: scratch) == .found(Data("secret \(index)".utf8)))
        }
    }

    /// Every cut of the last batch leaves the first two batches, flagged as torn; never an error.
    @Test func tornTailAtEveryByte() throws {
        let (written, bytes, scratch) = try Self.sample()
        var twoBatches = Self.empty(like: written)
        // The end of the second batch: ingest batch by batch to find it.
        var probe = Self.empty(like: written)
        var boundaries: [Int] = []
        for cut in 1...bytes.count {
            probe = Self.empty(like: written)
            if try probe.ingest(Array(bytes[..<cut]), scratch: scratch) == 0 { boundaries.append(cut) }
        }
        #expect(boundaries.count == 3)
        let second = boundaries[1]
        _ = try twoBatches.ingest(Array(bytes[..<second]), scratch: scratch)
        for cut in (second + 1)..<bytes.count {
            var log = Self.empty(like: written)
            let torn = try log.ingest(Array(bytes[..<cut]), scratch: scratch)
            #expect(torn == cut - second && log.hasTornTail, "cut at \(cut)")
            #expect(log.keys(service: nil) == twoBatches.keys(service: nil), "cut at \(cut)")
            #expect(
                try log.lookup(S.key("a"), in: LogSource(bytes: Array(bytes[..<cut])), scratch: scratch) == .found(Data("one".utf8)),
                "cut at \(cut)")
        }
    }

    @Test func zeroFillIsATornTail() throws {
        let (written, bytes, scratch) = try Self.sample()
        var log = Self.empty(like: written)
        #expect(try log.ingest(bytes + [UInt8](repeating: 0, count: 4096), scratch: scratch) == 4096)
        #expect(log.hasTornTail && log.validEnd == written.validEnd)
    }

    /// A last batch whose sectors past some point are zeros (the size reached the disk, the
    /// data did not) is a torn tail, not damage.
    @Test func zeroedEndOfTheLastWriteIsATornTail() throws {
        let (written, bytes, scratch) = try Self.sample()
        // The last record's end, and a sector after it, never reached the disk: zeros.
        var zeroed = bytes
        for index in (bytes.count - 20)..<bytes.count { zeroed[index] = 0 }
        zeroed += [UInt8](repeating: 0, count: 512)
        var log = Self.empty(like: written)
        let torn = try log.ingest(zeroed, scratch: scratch)
        #expect(torn > 512 && log.hasTornTail)
        #expect(log.recordCount == 3, "the first two batches stay")
    }

    /// A flipped byte anywhere before the last record is an integrity failure, never a silent skip.
    @Test func tamperAnywhereIsRefused() throws {
        let (written, bytes, scratch) = try Self.sample()
        var lastRecordStart = 0
        var position = 0
        while position < bytes.count {
            lastRecordStart = position
            let length = Int(UInt32(bytes[position]) | UInt32(bytes[position + 1]) << 8 | UInt32(bytes[position + 2]) << 16)
            position += SealedRecord.frameHeaderLength + length
        }
        for index in 0..<lastRecordStart {
            var tampered = bytes
            tampered[index] ^= 0x01
            var log = Self.empty(like: written)
            do {
                _ = try log.ingest(tampered, scratch: scratch)
                Issue.record("a flip at \(index) was accepted")
            } catch let error as VaultError {
                #expect(error.code == .integrityFailure, "flip at \(index)")
            }
        }
    }

    /// A record from another vault (another file id) does not authenticate here.
    @Test func recordsAreBoundToTheirFile() throws {
        let (written, bytes, scratch) = try Self.sample()
        var other = RecordLog(name: "other", header: written.header.withNewFileID(), keys: written.keys)
        #expect(throws: VaultError.self) { _ = try other.ingest(bytes + bytes, scratch: scratch) }
    }

    /// A pass reads the log a chunk at a time: at every chunk size, records cut by a chunk's
    /// end and records larger than a chunk are read whole, and a zero-filled tail stays torn.
    @Test func everyChunkSizeReadsTheSameLog() throws {
        var (written, bytes, scratch) = try Self.sample()
        let big = Data((0..<3000).map { UInt8(truncatingIfNeeded: $0 * 7) })
        bytes += try Self.append([.put(S.key("big"), big)], to: &written, scratch: scratch)
        let end = Int64(VaultHeader.length + bytes.count)
        for chunk in [1, 2, 7, 8, 9, 31, 64, 100, 333, 1024, 4096, bytes.count - 1, bytes.count] {
            var log = Self.empty(like: written)
            let source = LogSource(bytes: bytes, chunkSize: chunk)
            #expect(try log.ingest(from: source, to: end, scratch: scratch) == 0, "chunk \(chunk)")
            #expect(log.recordCount == written.recordCount && log.validEnd == written.validEnd, "chunk \(chunk)")
            #expect(log.liveBytes == written.liveBytes && !log.hasTornTail, "chunk \(chunk)")
            #expect(try log.lookup(S.key("b"), in: source, scratch: scratch) == .found(Data("two again".utf8)), "chunk \(chunk)")
            #expect(try log.lookup(S.key("big"), in: source, scratch: scratch) == .found(big), "chunk \(chunk)")

            var torn = Self.empty(like: written)
            let zeros = [UInt8](repeating: 0, count: 700)
            let zeroFilled = LogSource(bytes: bytes + zeros, chunkSize: chunk)
            #expect(try torn.ingest(from: zeroFilled, to: end + 700, scratch: scratch) == 700, "chunk \(chunk)")
            #expect(torn.hasTornTail && torn.validEnd == written.validEnd, "chunk \(chunk)")
        }
    }

    /// A lookup reads its record from the source: bytes changed there since the log was read are
    /// an integrity failure, never the old secret.
    @Test func aLookupAuthenticatesWhatItReads() throws {
        let (written, bytes, scratch) = try Self.sample()
        var log = Self.empty(like: written)
        _ = try log.ingest(bytes, scratch: scratch)
        var changed = bytes
        changed[changed.count - 10] ^= 0x01  // in the last record: b's "two again"
        #expect(throws: VaultError.self) { _ = try log.lookup(S.key("b"), in: LogSource(bytes: changed), scratch: scratch) }
        #expect(throws: VaultError.self) { _ = try log.lookup(S.key("b"), in: LogSource(bytes: Array(bytes.dropLast(5))), scratch: scratch) }
        #expect(try log.lookup(S.key("c"), in: LogSource(bytes: changed), scratch: scratch) == .found(Data("three".utf8)))
    }

    @Test func resealKeepsOnlyLiveEntries() throws {
        let (written, logBytes, scratch) = try Self.sample()
        let (bytes, log) = try written.resealed(
            header: written.header.withNewFileID(), keys: written.keys, from: LogSource(bytes: logBytes), readScratch: scratch,
            writeScratch: try SecureBuffer())
        var read = Self.empty(like: log)
        #expect(try read.ingest(Array(bytes[VaultHeader.length...]), scratch: scratch) == 0)
        #expect(read.recordCount == 2 && read.deadBytes == 0)
        #expect(try read.lookup(S.key("c"), in: LogSource(bytes: bytes, base: 0), scratch: scratch) == .found(Data("three".utf8)))
    }
}
