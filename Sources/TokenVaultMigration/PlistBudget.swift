import TokenVault
import Foundation

/// Bounds the work a property list can cause before Foundation parses it.
///
/// A binary plist refers to its objects by index, so an array can hold the same object twice,
/// and that array can be held twice by the next one: 24 levels of that are 345 bytes, and
/// Foundation expands them into 2^24 objects (944 MB). So a binary plist's object table is
/// walked first, without building anything, to count what it expands to; an XML or OpenStep
/// plist has no references, and its tags are counted. A plist is refused if it expands to more
/// than ``maximumObjects`` objects or ``maximumBytes`` bytes of strings and data, nests deeper
/// than ``maximumDepth`` levels, or refers to itself. Defaults plists hold hundreds of objects.
enum PlistBudget {
    /// The most objects (keys and values) a plist may expand to.
    static let maximumObjects = 1_000_000
    /// The most bytes of strings and data a plist may expand to.
    static let maximumBytes = 64 << 20
    /// The deepest nesting of arrays and dictionaries accepted.
    static let maximumDepth = 512

    /// Why a plist was refused.
    enum Refusal: Error, Equatable {
        case tooManyObjects
        case tooManyBytes
        case tooDeep
        case cyclic
        case damaged

        var reason: String {
            switch self {
            case .tooManyObjects:
                "it would expand to more than 1,000,000 objects (counting an object once for every array or dictionary that refers to it)"
            case .tooManyBytes:
                "its strings and data would expand to more than \(maximumBytes >> 20) MiB (counting them once for every reference)"
            case .tooDeep: "it nests arrays or dictionaries more than \(maximumDepth) levels deep"
            case .cyclic: "an array or dictionary in it contains itself"
            case .damaged: "its object table is damaged"
            }
        }
    }

    /// Throws a ``Refusal`` if parsing `data` would do more work than the budget allows.
    static func check(_ data: Data) throws(Refusal) {
        if data.starts(with: Array("bplist0".utf8)) {
            try checkBinary(data)
        } else {
            try checkText(data)
        }
    }

    // MARK: Binary

    /// Walks the object graph of a binary plist (`bplist00`) from its top object, iteratively,
    /// counting each object as often as it is referred to (as Foundation will build it).
    static func checkBinary(_ data: Data) throws(Refusal) {
        let result: Result<Void, Refusal> = data.withUnsafeBytes { all in
            do throws(Refusal) {
                var walker = BinaryPlistWalker(all)
                try walker.walk()
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        try result.get()
    }

    private struct BinaryPlistWalker {
        let all: UnsafeRawBufferPointer
        var offsetSize = 0
        var refSize = 0
        var objectCount = 0
        var topObject = 0
        var tableOffset = 0

        init(_ all: UnsafeRawBufferPointer) { self.all = all }

        func readBE(at offset: Int, size: Int) throws(Refusal) -> UInt64 {
            guard offset >= 0, size >= 0, size <= 8, offset <= all.count - size else { throw .damaged }
            var value: UInt64 = 0
            for index in 0..<size { value = value << 8 | UInt64(all[offset + index]) }
            return value
        }

        func int(_ value: UInt64, below limit: Int) throws(Refusal) -> Int {
            guard value < UInt64(limit) else { throw .damaged }
            return Int(value)
        }

        /// The file offset of object `index`.
        func offset(of index: Int) throws(Refusal) -> Int {
            try int(readBE(at: tableOffset + index * offsetSize, size: offsetSize), below: all.count)
        }

        /// The count in a marker's low nibble, or the integer that follows it, and where the
        /// object's contents start.
        func count(at offset: Int) throws(Refusal) -> (count: Int, start: Int) {
            let nibble = Int(all[offset] & 0x0F)
            guard nibble == 0x0F else { return (nibble, offset + 1) }
            guard offset + 1 < all.count else { throw .damaged }
            let marker = all[offset + 1]
            guard marker & 0xF0 == 0x10 else { throw .damaged }
            let size = 1 << Int(marker & 0x0F)
            guard size <= 8 else { throw .damaged }
            let value = try int(readBE(at: offset + 2, size: size), below: all.count)
            return (value, offset + 2 + size)
        }

        /// Where the references of object `index` are (for arrays, sets and dictionaries: their
        /// start and count, read one at a time so that nothing is built), and its own bytes.
        func children(of index: Int) throws(Refusal) -> (refs: Refs, bytes: Int) {
            let offset = try offset(of: index)
            let marker = all[offset]
            switch marker & 0xF0 {
            case 0x40:  // data
                return (Refs(start: 0, count: 0), try count(at: offset).count)
            case 0x50:  // ASCII string
                return (Refs(start: 0, count: 0), try count(at: offset).count)
            case 0x60, 0x70:  // UTF-16 string, UTF-8 string
                return (Refs(start: 0, count: 0), try count(at: offset).count * 2)
            case 0xA0, 0xC0, 0xD0:  // array, set, dictionary
                let (count, start) = try count(at: offset)
                let total = marker & 0xF0 == 0xD0 ? count * 2 : count
                guard total <= (all.count - start) / refSize else { throw .damaged }
                return (Refs(start: start, count: total), 0)
            default:
                return (Refs(start: 0, count: 0), 0)
            }
        }

        struct Refs {
            var start: Int
            var count: Int
        }

        /// The `position`th reference of `refs`.
        func ref(_ refs: Refs, _ position: Int) throws(Refusal) -> Int {
            try int(readBE(at: refs.start + position * refSize, size: refSize), below: objectCount)
        }

        mutating func walk() throws(Refusal) {
            // Trailer (32 bytes): 6 unused, offset size, ref size, object count, top object,
            // table offset (each u64 big-endian).
            let trailer = all.count - 32
            guard trailer >= 8 else { throw .damaged }
            offsetSize = Int(all[trailer + 6])
            refSize = Int(all[trailer + 7])
            guard (1...8).contains(offsetSize), (1...8).contains(refSize) else { throw .damaged }
            tableOffset = try int(readBE(at: trailer + 24, size: 8), below: trailer + 1)
            objectCount = try int(readBE(at: trailer + 8, size: 8), below: Int.max)
            guard tableOffset >= 8, objectCount <= (trailer - tableOffset) / offsetSize else { throw .damaged }
            // More objects than the budget: refused before anything is sized by the count.
            guard objectCount <= maximumObjects else { throw .tooManyObjects }
            topObject = try int(readBE(at: trailer + 16, size: 8), below: objectCount)

            // Each object's expanded size (objects, bytes), computed once, saturating at the
            // budget. Post-order over an explicit stack: no recursion, so no stack overflow.
            var objects = [Int](repeating: 0, count: objectCount)
            var bytes = [Int](repeating: 0, count: objectCount)
            enum State: UInt8 { case unseen, open, done }
            var state = [State](repeating: .unseen, count: objectCount)
            var stack: [(index: Int, refs: Refs, next: Int)] = []

            func open(_ index: Int) throws(Refusal) {
                switch state[index] {
                case .done: return
                case .open: throw .cyclic
                case .unseen:
                    guard stack.count < maximumDepth else { throw .tooDeep }
                    let (refs, own) = try children(of: index)
                    state[index] = .open
                    objects[index] = 1
                    bytes[index] = own
                    stack.append((index, refs, 0))
                }
            }
            try open(topObject)
            while let top = stack.last {
                if top.next < top.refs.count {
                    stack[stack.count - 1].next += 1
                    try open(ref(top.refs, top.next))
                    continue
                }
                stack.removeLast()
                var count = 1
                var size = bytes[top.index]
                for position in 0..<top.refs.count {
                    let child = try ref(top.refs, position)
                    count += objects[child]
                    size += bytes[child]
                    guard count <= maximumObjects else { throw .tooManyObjects }
                    guard size <= maximumBytes else { throw .tooManyBytes }
                }
                objects[top.index] = count
                bytes[top.index] = size
                state[top.index] = .done
            }
            guard bytes[topObject] <= maximumBytes else { throw .tooManyBytes }
        }
    }

    // MARK: Text

    /// An XML or OpenStep plist has no references: each object is written out. Counts its
    /// elements (a tag that opens: `<` then a letter) and tracks its nesting (`<array>`,
    /// `<dict>`, or `(`/`{` in OpenStep) without parsing.
    static func checkText(_ data: Data) throws(Refusal) {
        let isXML = TokenDetector.startsLikeAPlist(data)
        let result: Result<Void, Refusal> = data.withUnsafeBytes { raw in
            let bytes = raw.bindMemory(to: UInt8.self)
            do throws(Refusal) {
                if isXML { try checkXML(bytes) } else { try checkOpenStep(bytes) }
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        try result.get()
    }

    private static func checkXML(_ bytes: UnsafeBufferPointer<UInt8>) throws(Refusal) {
        func matches(_ word: StaticString, at index: Int) -> Bool {
            word.withUTF8Buffer { wordBytes in
                index + wordBytes.count <= bytes.count && (0..<wordBytes.count).allSatisfy { bytes[index + $0] == wordBytes[$0] }
            }
        }
        var elements = 0
        var depth = 0
        var index = 0
        let end = bytes.count
        while index + 1 < end {
            guard bytes[index] == UInt8(ascii: "<") else {
                index += 1
                continue
            }
            let next = bytes[index + 1]
            if next == UInt8(ascii: "/") {
                if matches("array", at: index + 2) || matches("dict", at: index + 2) { depth -= 1 }
            } else if (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(next | 0x20) {
                elements += 1
                guard elements <= maximumObjects else { throw .tooManyObjects }
                if (next == UInt8(ascii: "a") && matches("array", at: index + 1))
                    || (next == UInt8(ascii: "d") && matches("dict", at: index + 1))
                {
                    // `<array/>` opens and closes at once.
                    var close = index + 1
                    while close < end, bytes[close] != UInt8(ascii: ">") { close += 1 }
                    if close < end, bytes[close - 1] != UInt8(ascii: "/") {
                        depth += 1
                        guard depth <= maximumDepth else { throw .tooDeep }
                    }
                    index = close
                    continue
                }
            }
            index += 2
        }
    }

    private static func checkOpenStep(_ bytes: UnsafeBufferPointer<UInt8>) throws(Refusal) {
        var elements = 0
        var depth = 0
        var quoted = false
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if quoted {
                if byte == UInt8(ascii: "\\") {
                    index += 1
                } else if byte == UInt8(ascii: "\"") {
                    quoted = false
                }
            } else {
                switch byte {
                case UInt8(ascii: "\""):
                    quoted = true
                case UInt8(ascii: "("), UInt8(ascii: "{"):
                    elements += 1
                    depth += 1
                    guard elements <= maximumObjects else { throw .tooManyObjects }
                    guard depth <= maximumDepth else { throw .tooDeep }
                case UInt8(ascii: ")"), UInt8(ascii: "}"):
                    depth -= 1
                case UInt8(ascii: ","), UInt8(ascii: ";"), UInt8(ascii: "="):
                    elements += 1
                    guard elements <= maximumObjects else { throw .tooManyObjects }
                default:
                    break
                }
            }
            index += 1
        }
    }
}
