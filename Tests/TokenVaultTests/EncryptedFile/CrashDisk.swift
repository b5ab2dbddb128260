// The file system model of the crash-state tests (ALICE's and CrashMonkey's, written down): a
// directory tree replayed from the file operations the real code made, and every state a crash
// at a given point may leave it in.
//
// - File data: what an `fsync` or `fdatasync` covered is durable. The writes and truncations of
//   a file since its last sync persist as any subset of them, in order; each write may be torn:
//   cut at a sector (512-byte) boundary or at a partial point (1 byte, the 8-byte frame header,
//   the middle, all but the last byte), the rest either missing (the file is shorter) or
//   zero-filled (the size reached the disk, the data did not); or with one sector missing in
//   the middle (sectors reaching the disk out of order).
// - Directory entries (create, mkdir, rename, exchange, unlink): durable once their directory is
//   `fsync`ed. Those not yet durable persist as any prefix of them, in order, as a journaling
//   file system commits them. A file whose directory's own entry is not durable is not there.
// - An `fsync` of a file makes its data durable, never its name (POSIX; ext4 often does more).
import Foundation
@testable import TokenVault
import TokenVaultSystem
@testable import TokenVaultTestSupport

import Glibc

struct CrashDisk {
    /// What a name points to.
    enum Node: Hashable {
        case file(Int)
        case directory
    }

    /// A directory operation, with the nodes it moves resolved when it was made.
    enum Link {
        case add(String, Node)
        case rename(from: String, to: String, Node)
        case exchange(String, Node?, String, Node?)
        case remove(String)

        /// The directories whose `fsync` makes it durable.
        var directories: Set<String> {
            switch self {
            case .add(let path, _), .remove(let path): [CrashDisk.parent(path)]
            case .rename(let from, let to, _): [CrashDisk.parent(from), CrashDisk.parent(to)]
            case .exchange(let first, _, let second, _): [CrashDisk.parent(first), CrashDisk.parent(second)]
            }
        }

        func apply(to names: inout [String: Node]) {
            switch self {
            case .add(let path, let node): names[path] = node
            case .rename(let from, let to, let node):
                names[from] = nil
                names[to] = node
            case .exchange(let first, let firstNode, let second, let secondNode):
                names[first] = secondNode
                names[second] = firstNode
            case .remove(let path): names[path] = nil
            }
        }
    }

    struct Inode {
        var durable: [UInt8]
        /// Writes and truncations since the last sync, in order.
        var pending: [FileOperation] = []
        var current: [UInt8] { CrashDisk.content(durable, pending) }
    }

    /// The recorded tree's directory; every path below is relative to it ("" is the directory itself).
    let root: String
    private(set) var inodes: [Inode] = []
    /// The tree as the running program sees it.
    private(set) var names: [String: Node] = ["": .directory]
    /// The tree as far as directory `fsync`s made it durable.
    private(set) var durableNames: [String: Node] = ["": .directory]
    /// Directory operations not yet durable, in order, with the directories still to be synced
    /// for each (both of a rename's, when they differ).
    private(set) var unsynced: [(link: Link, directories: Set<String>)] = []

    /// The tree below `root` as it is now, all of it durable (it was there before the recording).
    init(snapshotOf root: String) throws {
        self.root = root
        let manager = FileManager.default
        for relative in (manager.subpaths(atPath: root) ?? []).sorted() {
            var isDirectory: ObjCBool = false
            guard manager.fileExists(atPath: root + "/" + relative, isDirectory: &isDirectory) else { continue }
            if isDirectory.boolValue {
                names[relative] = .directory
            } else {
                inodes.append(Inode(durable: [UInt8](try Data(contentsOf: URL(fileURLWithPath: root + "/" + relative)))))
                names[relative] = .file(inodes.count - 1)
            }
        }
        durableNames = names
    }

    static func parent(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "" }
        return String(path[..<slash])
    }

    private func relative(_ path: String) -> String? {
        if path == root { return "" }
        guard path.hasPrefix(root + "/") else { return nil }
        return String(path.dropFirst(root.count + 1))
    }

    private func inode(at path: String) -> Int? {
        guard let path = relative(path), case .file(let inode)? = names[path] else { return nil }
        return inode
    }

    private mutating func link(_ link: Link) {
        link.apply(to: &names)
        unsynced.append((link, link.directories))
    }

    /// Replays one recorded operation.
    mutating func apply(_ operation: FileOperation) {
        switch operation {
        case .create(let path):
            guard let path = relative(path), names[path] == nil else { return }  // O_CREAT of an existing file
            inodes.append(Inode(durable: []))
            link(.add(path, .file(inodes.count - 1)))
        case .makeDirectory(let path):
            guard let path = relative(path), names[path] == nil else { return }
            link(.add(path, .directory))
        case .write(let path, _, _), .truncate(let path, _):
            if let inode = inode(at: path) { inodes[inode].pending.append(operation) }
        case .sync(let path):
            if let inode = inode(at: path) {
                inodes[inode].durable = inodes[inode].current
                inodes[inode].pending = []
            }
        case .syncDirectory(let path):
            guard let directory = relative(path) else { return }
            var kept: [(link: Link, directories: Set<String>)] = []
            for var entry in unsynced {
                entry.directories.remove(directory)
                if entry.directories.isEmpty {
                    entry.link.apply(to: &durableNames)
                } else {
                    kept.append(entry)
                }
            }
            unsynced = kept
        case .rename(let from, let to):
            guard let from = relative(from), let to = relative(to), let node = names[from] else { return }
            link(.rename(from: from, to: to, node))
        case .exchange(let first, let second):
            guard let first = relative(first), let second = relative(second) else { return }
            link(.exchange(first, names[first], second, names[second]))
        case .unlink(let path):
            guard let path = relative(path), names[path] != nil else { return }
            link(.remove(path))
        }
    }

    // MARK: Contents

    static func content(_ base: [UInt8], _ operations: [FileOperation]) -> [UInt8] {
        var bytes = base
        for operation in operations { apply(operation, to: &bytes) }
        return bytes
    }

    static func apply(_ operation: FileOperation, to bytes: inout [UInt8]) {
        switch operation {
        case .write(_, let offset, let data):
            write(data, at: Int(offset), to: &bytes)
        case .truncate(_, let size):
            if bytes.count > Int(size) {
                bytes.removeLast(bytes.count - Int(size))
            } else {
                bytes += [UInt8](repeating: 0, count: Int(size) - bytes.count)
            }
        default: break
        }
    }

    static func write(_ data: some Collection<UInt8>, at offset: Int, to bytes: inout [UInt8]) {
        let end = offset + data.count
        if bytes.count < end { bytes += [UInt8](repeating: 0, count: end - bytes.count) }
        bytes.replaceSubrange(offset..<end, with: data)
    }

    /// One way a pending operation may have reached the disk.
    enum Fate: Hashable {
        case lost
        case whole
        /// Written up to `cut` (a file offset); the rest missing, or zero-filled to the write's end.
        case torn(cut: Int, zeroFilled: Bool)
        /// Every sector but the one at `sector` (a file offset).
        case hole(sector: Int)
    }

    static let sector = 512

    static func fates(of operation: FileOperation) -> [Fate] {
        guard case .write(_, let offset, let data) = operation, data.count > 1 else { return [.lost, .whole] }
        let start = Int(offset)
        let end = start + data.count
        var cuts: [Int] = []
        var boundary = (start / sector + 1) * sector
        while boundary < end {
            cuts.append(boundary)
            boundary += sector
        }
        var fates: [Fate] = [.lost, .whole]
        let partial = [start + 1, start + 8, start + data.count / 2, end - 1]
        for cut in Set(cuts + partial).filter({ $0 > start && $0 < end }).sorted() {
            fates.append(.torn(cut: cut, zeroFilled: false))
            fates.append(.torn(cut: cut, zeroFilled: true))
        }
        // Sectors out of order: one missing (the first, or one between) while a later one arrived.
        if !cuts.isEmpty {
            for hole in [start] + cuts.dropLast() { fates.append(.hole(sector: hole)) }
        }
        var seen: Set<Fate> = []
        return fates.filter { seen.insert($0).inserted }
    }

    static func apply(_ operation: FileOperation, _ fate: Fate, to bytes: inout [UInt8]) {
        switch fate {
        case .lost: return
        case .whole: apply(operation, to: &bytes)
        case .torn(let cut, let zeroFilled):
            guard case .write(_, let offset, let data) = operation else { return apply(operation, to: &bytes) }
            let start = Int(offset)
            let end = start + data.count
            write(data.prefix(cut - start), at: start, to: &bytes)
            if zeroFilled && bytes.count < end { bytes += [UInt8](repeating: 0, count: end - bytes.count) }
        case .hole(let hole):
            guard case .write(_, let offset, let data) = operation else { return apply(operation, to: &bytes) }
            let start = Int(offset)
            let holeEnd = min((hole / sector + 1) * sector, start + data.count)
            let before = bytes
            write(data, at: start, to: &bytes)
            for index in hole..<holeEnd { bytes[index] = index < before.count ? before[index] : 0 }
        }
    }

    // MARK: Crash states

    /// A crash state: every file and directory of the tree (relative path → bytes, `nil` for a directory).
    typealias State = [String: [UInt8]?]

    /// Up to about `limit` states a crash now may leave, enumerated in full when there are no
    /// more, otherwise sampled with `random` (the state with nothing lost since the last syncs,
    /// and the one with everything kept, always among them).
    ///
    /// `outOfOrder` says whether some write's sectors reached the disk out of order in it.
    func crashStates(limit: Int, random: inout some RandomNumberGenerator) -> [(state: State, outOfOrder: Bool)] {
        var states: [(state: State, outOfOrder: Bool)] = []
        let prefixes = unsynced.count + 1
        for kept in 0...unsynced.count {
            var tree = durableNames
            for entry in unsynced[..<kept] { entry.link.apply(to: &tree) }
            // A name whose directory did not survive is gone with it.
            let visible = tree.filter { entry in
                var directory = entry.key
                while !directory.isEmpty {
                    directory = Self.parent(directory)
                    guard tree[directory] == .directory else { return false }
                }
                return true
            }
            var files: [(path: String, inode: Inode)] = []
            var state: State = [:]
            for (path, node) in visible {
                switch node {
                case .directory: state[path] = .some(nil)
                case .file(let inode): files.append((path, inodes[inode]))
                }
            }
            files.sort { $0.path < $1.path }
            // Per file, per pending operation, its fates.
            let choices = files.map { file in file.inode.pending.map(Self.fates) }
            let flat = choices.flatMap { $0 }
            let total = flat.reduce(1.0) { $0 * Double($1.count) }
            let budget = max(2, limit / prefixes)
            func materialise(_ picks: [Int]) -> (state: State, outOfOrder: Bool) {
                var result = state
                var outOfOrder = false
                var position = 0
                for (index, file) in files.enumerated() {
                    var bytes = file.inode.durable
                    for (operation, fates) in zip(file.inode.pending, choices[index]) {
                        Self.apply(operation, fates[picks[position]], to: &bytes)
                        if case .hole = fates[picks[position]] { outOfOrder = true }
                        position += 1
                    }
                    result[file.path] = .some(bytes)
                }
                return (result, outOfOrder)
            }
            if total <= Double(budget) {
                var picks = [Int](repeating: 0, count: flat.count)
                while true {
                    states.append(materialise(picks))
                    var digit = 0
                    while digit < picks.count {
                        picks[digit] += 1
                        if picks[digit] < flat[digit].count { break }
                        picks[digit] = 0
                        digit += 1
                    }
                    if digit == picks.count { break }
                }
            } else {
                states.append(materialise(flat.map { _ in 0 }))  // every pending operation lost
                states.append(materialise(flat.map { _ in 1 }))  // every one whole
                for _ in 0..<(budget - 2) {
                    states.append(materialise(flat.map { Int.random(in: 0..<$0.count, using: &random) }))
                }
            }
        }
        return states
    }

    /// The state with everything done so far on disk: what `kill -9` now would leave.
    var cleanState: State {
        var state: State = [:]
        for (path, node) in names {
            switch node {
            case .directory: state[path] = .some(nil)
            case .file(let inode): state[path] = .some(inodes[inode].current)
            }
        }
        return state
    }

    /// Writes `state` below `directory` (which exists and is empty): directories `0700`, files
    /// `0600`, with plain `open` and `write` (Foundation's writes are slower, and these copies
    /// need no durability).
    static func materialise(_ state: State, in directory: String) throws {
        for path in state.keys.sorted() where !path.isEmpty {
            let full = directory + "/" + path
            if let bytes = state[path]!.flatMap({ $0 }) {
                let fd = Glibc.open(full, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
                guard fd >= 0 else { throw SetupFailure("cannot create \(full)") }
                defer { Glibc.close(fd) }
                let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
                guard written == bytes.count else { throw SetupFailure("cannot write \(full)") }
            } else {
                guard Glibc.mkdir(full, 0o700) == 0 else { throw SetupFailure("cannot create \(full)") }
            }
        }
    }

    /// A hash of a state's names and bytes: distinct states are counted by it. With
    /// `dataOnly`, lock files (empty, never read: only `flock`ed) and their directories are left
    /// out, so that states differing only in which lock files survived count once.
    static func digest(_ state: State, dataOnly: Bool = false) -> Int {
        var hasher = Hasher()
        for path in state.keys.sorted() where !dataOnly || !isLock(path) {
            hasher.combine(path)
            hasher.combine(state[path]!)
        }
        return hasher.finalize()
    }

    static func isLock(_ path: String) -> Bool {
        path.hasSuffix(".lock") || path.hasSuffix(".locks")
    }
}

/// SplitMix64: a fixed seed gives the same sample on every run.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
