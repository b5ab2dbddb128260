// The vault's compact index against a Dictionary doing the same things: random puts, overwrites
// and removals over key sets small enough that probe runs collide and wrap, and large enough
// that the table grows many times; copies that must not see each other's changes.
import Foundation
import Testing
@testable import TokenVault

@Suite struct RecordIndexTests {
    static func key(_ number: Int) -> CredentialKey {
        try! CredentialKey(service: number % 3 == 0 ? "other" : "svc", account: "user-\(number)")
    }

    static func record(_ number: Int) -> SealedRecord {
        SealedRecord(sequence: UInt64(number), offset: Int64(number) * 7, count: UInt32(number % 1000))
    }

    /// Every key of `reference` is found with its record, no other key of `universe` is, and the
    /// entries are exactly the reference's.
    static func expectSame(_ index: RecordIndex, _ reference: [CredentialKey: SealedRecord], universe: Range<Int>) {
        #expect(index.count == reference.count && index.isEmpty == reference.isEmpty)
        for number in universe {
            let key = key(number)
            #expect(index[key]?.sequence == reference[key]?.sequence, "key \(number)")
        }
        #expect(Set(index.keys) == Set(reference.keys))
        for entry in index.entries { #expect(reference[entry.key]?.sequence == entry.record.sequence) }
    }

    @Test(arguments: [8, 40, 300, 5000])
    func randomOperationsAgreeWithADictionary(keySpace: Int) {
        var index = RecordIndex()
        var reference: [CredentialKey: SealedRecord] = [:]
        for step in 0..<(keySpace * 20) {
            // Keys scattered by a multiplicative hash of the step; a third of the steps remove.
            let number = Int(UInt64(step) &* 0x9E37_79B9_7F4A_7C15 >> 40) % keySpace
            let key = Self.key(number)
            if (step / 7 + number) % 3 == 0 {
                #expect(index.removeValue(forKey: key)?.sequence == reference.removeValue(forKey: key)?.sequence)
            } else {
                let record = Self.record(step)
                #expect(index.updateValue(record, forKey: key)?.sequence == reference.updateValue(record, forKey: key)?.sequence)
            }
            if step % max(1, keySpace / 2) == 0 { Self.expectSame(index, reference, universe: 0..<keySpace) }
        }
        Self.expectSame(index, reference, universe: 0..<keySpace)
        // Emptied one key at a time, in another order than they went in.
        for number in (0..<keySpace).reversed() {
            #expect(index.removeValue(forKey: Self.key(number))?.sequence == reference.removeValue(forKey: Self.key(number))?.sequence)
        }
        Self.expectSame(index, reference, universe: 0..<keySpace)
    }

    @Test func reservedCapacityHoldsWhatWasReservedAndMore() {
        var index = RecordIndex()
        index.reserveCapacity(1000)
        var reference: [CredentialKey: SealedRecord] = [:]
        for number in 0..<2500 {
            index.updateValue(Self.record(number), forKey: Self.key(number))
            reference[Self.key(number)] = Self.record(number)
        }
        Self.expectSame(index, reference, universe: 0..<2600)
    }

    @Test func aCopyIsIndependent() {
        var original = RecordIndex()
        for number in 0..<100 { original.updateValue(Self.record(number), forKey: Self.key(number)) }
        var copy = original
        copy.removeValue(forKey: Self.key(5))
        copy.updateValue(Self.record(999), forKey: Self.key(6))
        copy.updateValue(Self.record(1000), forKey: Self.key(500))
        #expect(original.count == 100 && original[Self.key(5)]?.sequence == 5 && original[Self.key(6)]?.sequence == 6)
        #expect(original[Self.key(500)] == nil)
        #expect(copy.count == 100 && copy[Self.key(5)] == nil && copy[Self.key(6)]?.sequence == 999)
    }
}
