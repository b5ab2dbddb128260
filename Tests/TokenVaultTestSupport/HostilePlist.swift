// Hostile plists for the migration tests (library and CLI): a few hundred bytes that would make a
// naive parser build millions of objects.
import Foundation

enum HostilePlist {
    /// A binary plist `{"k": a}` where `a` is an array holding the same array twice, `levels`
    /// deep: `levels` + 4 objects on disk, 2^levels leaves once expanded.
    static func sharedReferences(levels: Int) -> Data {
        func be(_ value: Int, _ size: Int) -> [UInt8] { (0..<size).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }
        var objects: [[UInt8]] = [[0x51, UInt8(ascii: "k")], [0x51, UInt8(ascii: "x")]]
        for level in 0..<levels {
            let child = level == 0 ? 1 : level + 1
            objects.append([0xA2] + be(child, 2) + be(child, 2))
        }
        let top = objects.count
        objects.append([0xD1] + be(0, 2) + be(levels + 1, 2))
        var bytes = Array("bplist00".utf8)
        var offsets: [Int] = []
        for object in objects {
            offsets.append(bytes.count)
            bytes += object
        }
        let table = bytes.count
        for offset in offsets { bytes += be(offset, 4) }
        bytes += [0, 0, 0, 0, 0, 0, 4, 2] + be(objects.count, 8) + be(top, 8) + be(table, 8)
        return Data(bytes)
    }
}
