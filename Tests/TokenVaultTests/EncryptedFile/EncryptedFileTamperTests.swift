import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

/// Damage and tampering, byte by byte, on real files.
@Suite struct EncryptedFileTamperTests {
    typealias S = FileTestSupport

    /// A small vault with four records, one per save, and what it holds after each record.
    struct Fixture {
        let dir: TemporaryDirectory
        let vault: String
        let key: String
        let bytes: [UInt8]
        /// The byte ranges of the records, in order.
        let records: [Range<Int>]
        /// The contents after the first n records, for n in 0...4.
        let states: [[CredentialKey: Data]]
    }

    static func makeFixture() async throws -> Fixture {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let store = try await S.open(vault, .keyFile(key))
        var state: [CredentialKey: Data] = [:]
        var states = [state]
        let steps: [(String, Data?)] = [("a", Data("alpha".utf8)), ("b", Data("bravo".utf8)), ("a", nil), ("c", Data("charlie".utf8))]
        for (account, value) in steps {
            if let value {
                try await store.save(value, for: S.key(account))
                state[S.key(account)] = value
            } else {
                try await store.delete(S.key(account))
                state[S.key(account)] = nil
            }
            states.append(state)
        }
        let bytes = try S.read(vault)
        return Fixture(dir: dir, vault: vault, key: key, bytes: bytes, records: recordRanges(bytes), states: states)
    }

    /// Splits a vault file into its record frames using the length fields.
    static func recordRanges(_ bytes: [UInt8]) -> [Range<Int>] {
        var ranges: [Range<Int>] = []
        var position = VaultHeader.length
        while position + 8 <= bytes.count {
            let length = Int(bytes.readLE(UInt32.self, at: position))
            ranges.append(position..<position + 8 + length)
            position += 8 + length
        }
        return ranges
    }

    static func open(_ fixture: Fixture, _ bytes: [UInt8]) async throws -> [CredentialKey: Data] {
        try S.write(bytes, to: fixture.vault)
        return try await S.contents(S.open(fixture.vault, .keyFile(fixture.key)))
    }

    @Test func flipEveryByte() async throws {
        let fixture = try await Self.makeFixture()
        #expect(fixture.records.count == 4)
        #expect(fixture.records.last?.upperBound == fixture.bytes.count)
        let lastRecord = fixture.records[3]
        for position in fixture.bytes.indices {
            for mask: UInt8 in [0x01, 0x80, 0xFF] {
                var damaged = fixture.bytes
                damaged[position] ^= mask
                do {
                    let contents = try await Self.open(fixture, damaged)
                    // Opening is allowed only when the flip hit the last record, which is then
                    // dropped as a torn tail: every earlier write is still there.
                    #expect(
                        lastRecord.contains(position) && position >= lastRecord.lowerBound + 8 && contents == fixture.states[3],
                        "a flip at byte \(position) (mask \(mask)) went unnoticed")
                } catch let error as VaultError {
                    let allowed: [VaultError.Code] =
                        position < 8 ? [.notAVault] : [.integrityFailure, .authenticationFailed]
                    #expect(allowed.contains(error.code), "flip at byte \(position): \(error.code) \(error.message)")
                }
            }
        }
    }

    @Test func swappedRecordsAreDetected() async throws {
        let fixture = try await Self.makeFixture()
        for (i, j) in [(0, 1), (1, 2), (0, 3), (2, 3)] {
            let first = fixture.records[i]
            let second = fixture.records[j]
            var swapped = Array(fixture.bytes[..<first.lowerBound])
            swapped += fixture.bytes[second]
            swapped += fixture.bytes[first.upperBound..<second.lowerBound]
            swapped += fixture.bytes[first]
            swapped += fixture.bytes[second.upperBound...]
            let error = await S.errorCode { _ = try await Self.open(fixture, swapped) }
            #expect(error?.code == .integrityFailure, "swap of records \(i) and \(j)")
        }
        // Dropping a record from the middle shifts every later one: detected too.
        var dropped = Array(fixture.bytes[..<fixture.records[1].lowerBound])
        dropped += fixture.bytes[fixture.records[1].upperBound...]
        let error = await S.errorCode { _ = try await Self.open(fixture, dropped) }
        #expect(error?.code == .integrityFailure)
    }

    @Test func recordSplicedFromAnotherVaultIsDetected() async throws {
        let fixture = try await Self.makeFixture()
        // Another vault under the same key file, with a record at the same place.
        let otherPath = fixture.dir.file("other")
        let other = try await S.open(otherPath, .keyFile(fixture.key))
        try await other.save(Data("mallory".utf8), for: S.key("a"))
        try await other.save(Data("mallory".utf8), for: S.key("b"))
        let otherBytes = try S.read(otherPath)
        let foreign = Self.recordRanges(otherBytes)
        for index in 0..<2 {
            var spliced = Array(fixture.bytes[..<fixture.records[index].lowerBound])
            spliced += otherBytes[foreign[index]]
            spliced += fixture.bytes[fixture.records[index].upperBound...]
            let error = await S.errorCode { _ = try await Self.open(fixture, spliced) }
            #expect(error?.code == .integrityFailure, "spliced record \(index)")
        }
        // Appended at the end, a foreign record is never accepted: it is the torn tail, and the
        // next write replaces it.
        let appended = fixture.bytes + otherBytes[foreign[1]]
        #expect(try await Self.open(fixture, appended) == fixture.states[4])
        let store = try await S.open(fixture.vault, .keyFile(fixture.key))
        try await store.save(Data("delta".utf8), for: S.key("d"))
        var expected = fixture.states[4]
        expected[S.key("d")] = Data("delta".utf8)
        #expect(try await S.contents(S.open(fixture.vault, .keyFile(fixture.key))) == expected)
        #expect(try S.read(fixture.vault).count < appended.count + 100)
    }

    /// The whole header of another vault (same key file) in front of our records.
    @Test func headerFromAnotherVaultIsDetected() async throws {
        let fixture = try await Self.makeFixture()
        let otherPath = fixture.dir.file("other")
        _ = try await S.open(otherPath, .keyFile(fixture.key))
        let otherHeader = try S.read(otherPath)[..<VaultHeader.length]
        let mixed = Array(otherHeader) + fixture.bytes[VaultHeader.length...]
        let error = await S.errorCode { _ = try await Self.open(fixture, mixed) }
        #expect(error?.code == .integrityFailure)
    }

    @Test func truncateAtEveryLength() async throws {
        let fixture = try await Self.makeFixture()
        for length in 0..<fixture.bytes.count {
            let cut = Array(fixture.bytes[..<length])
            do {
                let contents = try await Self.open(fixture, cut)
                #expect(length >= VaultHeader.length, "a cut header at \(length) opened")
                let complete = fixture.records.filter { $0.upperBound <= length }.count
                #expect(contents == fixture.states[complete], "cut at \(length)")
            } catch let error as VaultError {
                let expected: VaultError.Code = length == 0 ? .emptyFile : .truncated
                #expect(error.code == expected && length < VaultHeader.length, "cut at \(length): \(error.code): \(error.message)")
            }
        }
    }

    @Test func tornTailIsRepairedByTheNextWrite() async throws {
        let fixture = try await Self.makeFixture()
        let cut = fixture.records[3].lowerBound + 20
        try S.write(Array(fixture.bytes[..<cut]), to: fixture.vault)
        let store = try await S.open(fixture.vault, .keyFile(fixture.key))
        #expect(try await S.contents(store) == fixture.states[3])
        try await store.save(Data("delta".utf8), for: S.key("d"))
        let repaired = try S.read(fixture.vault)
        #expect(Array(repaired[..<fixture.records[3].lowerBound]) == Array(fixture.bytes[..<fixture.records[3].lowerBound]))
        var expected = fixture.states[3]
        expected[S.key("d")] = Data("delta".utf8)
        #expect(try await S.contents(S.open(fixture.vault, .keyFile(fixture.key))) == expected)
    }

    @Test func zeroFilledTailIsTorn() async throws {
        let fixture = try await Self.makeFixture()
        // What a power loss can leave: the size grew, the data never arrived.
        let contents = try await Self.open(fixture, fixture.bytes + [UInt8](repeating: 0, count: 4096))
        #expect(contents == fixture.states[4])
        // Zeros in the middle, followed by a record, are damage.
        var middle = fixture.bytes
        middle.replaceSubrange(fixture.records[1], with: repeatElement(0, count: fixture.records[1].count))
        let error = await S.errorCode { _ = try await Self.open(fixture, middle) }
        #expect(error?.code == .integrityFailure)
    }

    /// Damage that appears while a store is open is reported, never read as an empty vault.
    @Test func damageSeenByAnOpenStore() async throws {
        let fixture = try await Self.makeFixture()
        let store = try await S.open(fixture.vault, .keyFile(fixture.key))
        #expect(try await store.keys().count == 2)
        let appendedBy = try await S.open(fixture.vault, .keyFile(fixture.key))
        try await appendedBy.save(Data("echo".utf8), for: S.key("e"))
        try await appendedBy.save(Data("foxtrot".utf8), for: S.key("f"))
        var bytes = try S.read(fixture.vault)
        let ranges = Self.recordRanges(bytes)
        bytes[ranges[4].lowerBound + 40] ^= 0x01
        try S.write(bytes, to: fixture.vault)
        let error = await S.errorCode { _ = try await store.load(S.key("e")) }
        #expect(error?.code == .integrityFailure)
        let again = await S.errorCode { _ = try await store.keys() }
        #expect(again?.code == .integrityFailure, "the error persists; it is not skipped")
        let write = await S.errorCode { try await store.save(Data("x".utf8), for: S.key("x")) }
        #expect(write?.code == .integrityFailure, "no write lands on a damaged vault")
    }
}
