// Owns: the in-memory index of a vault's log (key → where its latest record lies), as a compact
// hash table. Nothing about files, records' bytes or crypto.
//
// Why not a Dictionary: opening a 100,000-entry vault spent 40 ms of its ~130 ms CPU inserting
// into `[CredentialKey: SealedRecord]`, whose keys and values live in two arrays sized for the
// table (15 MB at that size), each insert a cache and TLB miss in both. Here the table holds
// 8-byte slots (2 MB) that point into one dense array of entries, which inserts only append to.
internal import CPrefetch

/// Where the latest sealed record of each key lies: open addressing with linear probing over
/// 8-byte slots, each a 32-bit hash tag and the position of its entry in a dense array.
///
/// A value type, copied on write like the collections it is built from.
struct RecordIndex {
    struct Entry {
        var key: CredentialKey
        var record: SealedRecord
    }

    /// The entries, in no particular order.
    private(set) var entries: [Entry] = []
    /// `0` for an empty slot, else `tag << 32 | (entry position + 1)`; the tag is the top 32 bits
    /// of the key's hash, and the slot's home is the tag's top `bits` bits.
    private var slots: [UInt64] = []
    /// log2 of `slots.count` (0 while there are no slots).
    private var bits = 0

    init() {}

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }
    var keys: LazyMapSequence<[Entry], CredentialKey> { entries.lazy.map(\.key) }

    /// Makes room for `count` entries without growing the table again.
    mutating func reserveCapacity(_ count: Int) {
        entries.reserveCapacity(count)
        if Self.slotCount(for: count) > slots.count { rehash(slotCount: Self.slotCount(for: count)) }
    }

    subscript(key: CredentialKey) -> SealedRecord? {
        guard let slot = find(key, tag: Self.tag(of: key)).found else { return nil }
        return entries[position(in: slots[slot])].record
    }

    /// Sets the record of `key`; returns the one it replaces.
    @discardableResult
    mutating func updateValue(_ record: SealedRecord, forKey key: CredentialKey) -> SealedRecord? {
        updateValue(record, forKey: key, tag: Self.tag(of: key))
    }

    /// ``updateValue(_:forKey:)`` with the key's ``tag(of:)`` already computed.
    @discardableResult
    mutating func updateValue(_ record: SealedRecord, forKey key: CredentialKey, tag: UInt64) -> SealedRecord? {
        let (found, empty) = find(key, tag: tag)
        if let found {
            let position = position(in: slots[found])
            let old = entries[position].record
            entries[position].record = record
            return old
        }
        guard Self.slotCount(for: entries.count + 1) <= slots.count, let empty else {
            rehash(slotCount: Self.slotCount(for: entries.count + 1))
            return updateValue(record, forKey: key, tag: tag)
        }
        precondition(entries.count < Int(UInt32.max), "a vault index holds fewer than 2^32 entries")
        entries.append(Entry(key: key, record: record))
        slots[empty] = tag << 32 | UInt64(entries.count)
        return nil
    }

    /// Removes `key`; returns its record.
    @discardableResult
    mutating func removeValue(forKey key: CredentialKey) -> SealedRecord? {
        removeValue(forKey: key, tag: Self.tag(of: key))
    }

    /// ``removeValue(forKey:)`` with the key's ``tag(of:)`` already computed.
    @discardableResult
    mutating func removeValue(forKey key: CredentialKey, tag: UInt64) -> SealedRecord? {
        guard let slot = find(key, tag: tag).found else { return nil }
        let position = position(in: slots[slot])
        let removed = entries[position].record
        removeSlot(slot)
        // The last entry moves into the gap; its slot is repointed.
        let last = entries.count - 1
        if position != last {
            let moved = entries[last].key
            guard let movedSlot = find(moved, tag: Self.tag(of: moved)).found else {
                preconditionFailure("every entry has a slot")
            }
            slots[movedSlot] = slots[movedSlot] & 0xFFFF_FFFF_0000_0000 | UInt64(position + 1)
            entries.swapAt(position, last)
        }
        entries.removeLast()
        return removed
    }

    // MARK: The table

    /// A table at most half full: short probe runs.
    private static func slotCount(for count: Int) -> Int {
        count == 0 ? 0 : max(16, 1 << (Int.bitWidth - (2 * count - 1).leadingZeroBitCount))
    }

    /// The part of `key`'s hash that the table keeps (and finds its slot by).
    static func tag(of key: CredentialKey) -> UInt64 {
        UInt64(bitPattern: Int64(key.hashValue)) >> 32
    }

    /// Asks the CPU to bring the first slot that a key with `tag` probes into its cache, so that
    /// a batch of inserts does not wait on each one's cache miss in turn.
    func prefetch(tag: UInt64) {
        guard !slots.isEmpty else { return }
        slots.withUnsafeBufferPointer { tokenvault_prefetch($0.baseAddress! + home(ofTag: tag)) }
    }

    private func home(ofTag tag: UInt64) -> Int { Int(truncatingIfNeeded: tag >> (32 - bits)) }

    private func position(in slot: UInt64) -> Int { Int(truncatingIfNeeded: slot & 0xFFFF_FFFF) - 1 }

    /// The slot that holds `key`, or the empty slot where it would go (both `nil` without slots).
    private func find(_ key: CredentialKey, tag: UInt64) -> (found: Int?, empty: Int?) {
        guard !slots.isEmpty else { return (nil, nil) }
        let mask = slots.count - 1
        var slot = home(ofTag: tag)
        while true {
            let value = slots[slot]
            if value == 0 { return (nil, slot) }
            if value >> 32 == tag, entries[position(in: value)].key == key { return (slot, nil) }
            slot = (slot + 1) & mask
        }
    }

    /// Empties `slot` and moves later slots of its run back, so that no lookup meets a gap
    /// before its key (deletion without tombstones).
    private mutating func removeSlot(_ slot: Int) {
        let mask = slots.count - 1
        var hole = slot
        var next = (slot + 1) & mask
        while slots[next] != 0 {
            let home = home(ofTag: slots[next] >> 32)
            // `next` may fill the hole if its home is not in (hole, next], cyclically.
            if (next - home) & mask >= (next - hole) & mask {
                slots[hole] = slots[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        slots[hole] = 0
    }

    private mutating func rehash(slotCount: Int) {
        precondition(slotCount.nonzeroBitCount == 1 && slotCount <= 1 << 32)
        slots = [UInt64](repeating: 0, count: slotCount)
        bits = slotCount.trailingZeroBitCount
        let mask = slotCount - 1
        for (position, entry) in entries.enumerated() {
            let tag = Self.tag(of: entry.key)
            var slot = home(ofTag: tag)
            while slots[slot] != 0 { slot = (slot + 1) & mask }
            slots[slot] = tag << 32 | UInt64(position + 1)
        }
    }
}
