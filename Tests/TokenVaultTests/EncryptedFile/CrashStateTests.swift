// Every crash state that POSIX allows for set, batch, delete, compaction and rekey (in the
// manner of ALICE and CrashMonkey), and every write, fsync and rename failing in turn with
// EIO, ENOSPC and EDQUOT. The file operations are recorded through the POSIX layer's seam
// (FileOperationHooks), so these are the operations the store really makes.
import Foundation
import Synchronization
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

/// Records the file operations below one directory, and can fail one of them.
final class FileOperationRecorder: FileOperationHook, @unchecked Sendable {  // fields guarded by `lock`
    private let lock = NSLock()
    private var _operations: [FileOperation] = []
    private var counts: [String: Int] = [:]
    /// Fail the `index`-th (from 0) operation of `kind` with `errno`.
    private let failure: (kind: String, index: Int, errno: Errno)?
    private var _injected = false

    init(failing failure: (kind: String, index: Int, errno: Errno)? = nil) {
        self.failure = failure
    }

    static func kind(_ operation: FileOperation) -> String {
        switch operation {
        case .create: "create"
        case .write: "write"
        case .truncate: "truncate"
        case .sync: "sync"
        case .syncDirectory: "syncDirectory"
        case .rename: "rename"
        case .unlink: "unlink"
        case .makeDirectory: "makeDirectory"
        }
    }

    var operations: [FileOperation] { lock.withLock { _operations } }
    var injected: Bool { lock.withLock { _injected } }
    func count(of kind: String) -> Int { lock.withLock { counts[kind] ?? 0 } }

    func willPerform(_ operation: FileOperation) -> Errno? {
        lock.withLock {
            let kind = Self.kind(operation)
            let index = counts[kind, default: 0]
            counts[kind] = index + 1
            if let failure, failure.kind == kind, failure.index == index {
                _injected = true
                return failure.errno
            }
            return nil
        }
    }

    func didPerform(_ operation: FileOperation) {
        lock.withLock { _operations.append(operation) }
    }
}

@Suite(.serialized) struct CrashStateTests {
    typealias S = FileTestSupport
    typealias Model = [CredentialKey: Data]

    /// One step of the workload and what the vault holds once it is acknowledged.
    enum Step {
        case save(String, String)
        case batch([(String, String)])
        case delete(String)
        case compact
        case rekey
    }

    static let workload: [Step] = [
        .save("a", "first value of a"),
        .batch([("b", String(repeating: "b", count: 700)), ("c", "c"), ("d", String(repeating: "d", count: 1500))]),
        .delete("b"),
        .save("a", String(repeating: "second a ", count: 90)),
        .save("c", "c again"),
        .save("d", "d"),  // dead bytes now outweigh live ones: this save compacts
        .compact,
        .save("e", "e"),
        .rekey,
        .save("f", "after the rekey"),
    ]

    static func apply(_ step: Step, to model: inout Model) {
        switch step {
        case .save(let account, let value): model[S.key(account)] = Data(value.utf8)
        case .batch(let entries): for (account, value) in entries { model[S.key(account)] = Data(value.utf8) }
        case .delete(let account): model[S.key(account)] = nil
        case .compact, .rekey: break
        }
    }

    static func run(_ step: Step, on store: EncryptedFileStore, newKey: String) async throws {
        switch step {
        case .save(let account, let value): try await store.save(Data(value.utf8), for: S.key(account))
        case .batch(let entries):
            try await store.saveAll(entries.map { (key: S.key($0.0), secret: Data($0.1.utf8), contentType: .binary) })
        case .delete(let account): try await store.delete(S.key(account))
        case .compact: try await store.compact()
        case .rekey: try await store.rekey(to: .keyFile(newKey))
        }
    }

    static let options = EncryptedFileStore.Options(kdf: .minimum, compactionMinimumDeadBytes: 1)

    // MARK: Crash states

    /// A file system as the recorded operations leave it, and what a crash may keep of it.
    struct Disk {
        struct Inode {
            var durable: [UInt8] = []
            /// Writes and truncations since the last `fsync`, in order.
            var pending: [FileOperation] = []
        }
        var inodes: [Int: Inode] = [:]
        var names: [String: Int] = [:]
        var durableNames: [String: Int] = [:]
        var nextInode = 0

        mutating func apply(_ operation: FileOperation) {
            switch operation {
            case .create(let path):
                if names[path] == nil {
                    names[path] = nextInode
                    inodes[nextInode] = Inode()
                    nextInode += 1
                }
            case .write(let path, _, _), .truncate(let path, _):
                if let inode = names[path] { inodes[inode]?.pending.append(operation) }
            case .sync(let path):
                if let inode = names[path], var node = inodes[inode] {
                    node.durable = Self.content(node.durable, node.pending)
                    node.pending = []
                    inodes[inode] = node
                }
            case .syncDirectory:
                durableNames = names
            case .rename(let from, let to):
                names[to] = names[from]
                names[from] = nil
            case .unlink(let path):
                names[path] = nil
            case .makeDirectory:
                break
            }
        }

        static func content(_ base: [UInt8], _ operations: [FileOperation]) -> [UInt8] {
            var bytes = base
            for operation in operations { apply(operation, to: &bytes) }
            return bytes
        }

        static func apply(_ operation: FileOperation, to bytes: inout [UInt8]) {
            switch operation {
            case .write(_, let offset, let data):
                let end = Int(offset) + data.count
                if bytes.count < end { bytes += [UInt8](repeating: 0, count: end - bytes.count) }
                bytes.replaceSubrange(Int(offset)..<end, with: data)
            case .truncate(_, let size):
                if bytes.count > Int(size) {
                    bytes.removeLast(bytes.count - Int(size))
                } else {
                    bytes += [UInt8](repeating: 0, count: Int(size) - bytes.count)
                }
            default: break
            }
        }

        /// Every content the inode may have after a crash: its durable bytes plus any subset of
        /// its pending operations (in order), the last one applied possibly torn at a 512-byte
        /// boundary, its unwritten part either missing or zero-filled. Subsets are enumerated in
        /// full up to 8 pending operations; beyond that, only prefixes (a bound that our store
        /// never reaches: it syncs after every batch).
        static func crashContents(_ inode: Inode) -> Set<[UInt8]> {
            let pending = inode.pending
            var subsets: [[FileOperation]] = []
            if pending.count <= 8 {
                for mask in 0..<(1 << pending.count) {
                    subsets.append(pending.indices.filter { mask & (1 << $0) != 0 }.map { pending[$0] })
                }
            } else {
                for length in 0...pending.count { subsets.append(Array(pending[..<length])) }
            }
            var results: Set<[UInt8]> = []
            for subset in subsets {
                let before = content(inode.durable, Array(subset.dropLast()))
                results.insert(content(before, subset.suffix(1)))
                guard case .write(_, let offset, let data)? = subset.last else { continue }
                var cut = (Int(offset) / 512 + 1) * 512
                while cut < Int(offset) + data.count {
                    var short = before
                    apply(.write(path: "", offset: offset, bytes: Array(data[..<(cut - Int(offset))])), to: &short)
                    results.insert(short)
                    var zeroFilled = before
                    apply(.write(path: "", offset: offset, bytes: Array(data[..<(cut - Int(offset))]) + [UInt8](repeating: 0, count: Int(offset) + data.count - cut)), to: &zeroFilled)
                    results.insert(zeroFilled)
                    cut += 512
                }
            }
            return results
        }
    }

    /// Records the workload once, then opens every crash state of every prefix of its file
    /// operations, and checks that each holds exactly what was acknowledged before the crash,
    /// or that plus the step in flight; never anything else.
    @Test func everyCrashStateOpensWithEveryAcknowledgedWrite() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let newKey = try S.keyFile(in: dir, name: "new-key")
        let recorder = FileOperationRecorder()
        FileOperationHooks.install(recorder, below: dir.path)
        // After step i is acknowledged: how many operations were made, and what the vault holds.
        var acknowledged: [(operations: Int, model: Model)] = []
        do {
            defer { FileOperationHooks.remove(recorder) }
            let store = try await EncryptedFileStore.open(path: vault, keySource: .keyFile(key), options: Self.options)
            var model: Model = [:]
            acknowledged.append((recorder.operations.count, model))
            for step in Self.workload {
                try await Self.run(step, on: store, newKey: newKey)
                Self.apply(step, to: &model)
                acknowledged.append((recorder.operations.count, model))
            }
        }
        let operations = recorder.operations
        #expect(operations.contains { if case .rename = $0 { true } else { false } }, "no compaction or rekey happened")

        let scratch = try TemporaryDirectory()
        let crashedVault = scratch.file("vault")
        var explored = 0
        var disk = Disk()
        for prefix in 0...operations.count {
            if prefix > 0 { disk.apply(operations[prefix - 1]) }
            // The acknowledged state, and the state of the step in flight (if any).
            let done = acknowledged.lastIndex { $0.operations <= prefix } ?? 0
            var allowed = [acknowledged[done].model]
            if done + 1 < acknowledged.count { allowed.append(acknowledged[done + 1].model) }
            // The directory as last synced, or with every later rename and creation kept.
            var inodes: Set<Int?> = [disk.names[vault], disk.durableNames[vault]]
            if prefix == 0 { inodes = [nil] }
            for inode in inodes {
                let contents: Set<[UInt8]?> = inode.flatMap { disk.inodes[$0] }.map { Set(Disk.crashContents($0).map { Optional($0) }) } ?? [nil]
                for content in contents {
                    explored += 1
                    try? FileManager.default.removeItem(atPath: crashedVault)  // scratch copy, not a vault write
                    try? FileManager.default.removeItem(atPath: crashedVault + ".lock")  // scratch copy, not a vault write
                    if let content { try S.write(content, to: crashedVault) }
                    let found = try await Self.openAny(crashedVault, keys: [key, newKey])
                    #expect(
                        allowed.contains(found), "inode \(inode.map(String.init) ?? "none") of \(disk.names), \(content?.count ?? -1) bytes; operations \(operations[max(0, prefix - 3)..<prefix].map { FileOperationRecorder.kind($0) }); prefix \(prefix)/\(operations.count): the crash state holds \(found.keys.sorted()), not an acknowledged state")
                }
            }
        }
        let kinds = Dictionary(grouping: operations, by: FileOperationRecorder.kind).mapValues(\.count)
        print("\(explored) crash states explored, from \(operations.count) file operations \(kinds.sorted { $0.key < $1.key })")
        #expect(kinds["rename", default: 0] >= 4 && kinds["syncDirectory", default: 0] >= 4, "compactions and rekey were not recorded")
        #expect(explored > operations.count)
    }

    /// Opens `path` with whichever key opens it and returns every entry; an empty or missing
    /// file is an empty vault (the creation of the vault had not happened).
    static func openAny(_ path: String, keys: [String]) async throws -> Model {
        var lastError: (any Error)?
        for key in keys {
            do {
                let store = try await EncryptedFileStore.open(
                    path: path, keySource: .keyFile(key), options: .init(createIfMissing: false, kdf: .minimum))
                return try await S.contents(store)
            } catch let error as VaultError where error.code == .authenticationFailed {
                lastError = error
            } catch let error as VaultError where error.code == .backendUnavailable {
                return [:]  // no vault file: nothing was acknowledged yet
            }
        }
        throw lastError ?? VaultError(.io, "no key")
    }

    // MARK: Fault injection

    /// Every write, fsync and rename of the workload fails in turn with EIO, ENOSPC and
    /// EDQUOT. The call that hits it throws (a compaction that a save starts only logs: the
    /// save is durable), nothing acknowledged is lost, and after a failed fsync the store
    /// refuses every later write until it is opened again.
    @Test func everyWriteSyncAndRenameFailingInTurnLosesNothing() async throws {
        // How many operations of each kind the workload makes.
        let counting = FileOperationRecorder()
        do {
            let dir = try TemporaryDirectory()
            FileOperationHooks.install(counting, below: dir.path)
            defer { FileOperationHooks.remove(counting) }
            let newKey = try S.keyFile(in: dir, name: "new-key")
            let store = try await EncryptedFileStore.open(
                path: dir.file("vault"), keySource: .keyFile(try S.keyFile(in: dir)), options: Self.options)
            for step in Self.workload { try await Self.run(step, on: store, newKey: newKey) }
        }
        var injections = 0
        for kind in ["write", "sync", "rename"] {
            for index in 0..<counting.count(of: kind) {
                for errno in [Errno.ioError, .noSpace, .diskQuotaExceeded] {
                    injections += 1
                    try await Self.injectOne(kind: kind, index: index, errno: errno)
                }
            }
        }
        print("\(injections) injected failures (write, fsync, rename × EIO, ENOSPC, EDQUOT)")
        #expect(injections > 20)
    }

    static func injectOne(kind: String, index: Int, errno: Errno) async throws {
        let label = "\(kind) #\(index) failing with \(errno)"
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let newKey = try S.keyFile(in: dir, name: "new-key")
        let recorder = FileOperationRecorder(failing: (kind, index, errno))
        FileOperationHooks.install(recorder, below: dir.path)
        defer { FileOperationHooks.remove(recorder) }
        var model: Model = [:]
        let store: EncryptedFileStore
        do {
            store = try await EncryptedFileStore.open(path: vault, keySource: .keyFile(key), options: options)
        } catch let error as VaultError {
            #expect(recorder.injected && [.io, .diskFull].contains(error.code), "\(label): open: \(error)")
            return
        }
        var poisoned = false
        for step in workload {
            let injectedBefore = recorder.injected
            do {
                try await run(step, on: store, newKey: newKey)
                var next = model
                apply(step, to: &next)
                // Only a change that writes nothing (a delete of an absent key) may succeed.
                #expect(!poisoned || next == model, "\(label): \(step) succeeded after a failed fsync")
                model = next
            } catch let error as VaultError {
                #expect(
                    (recorder.injected && !injectedBefore && [.io, .diskFull].contains(error.code)) || poisoned,
                    "\(label): \(error)")
                // A failed append fsync (a save, batch or delete) poisons the store; a failed
                // rewrite (compaction, rekey) leaves the old file and the store usable.
                if kind == "sync" && !injectedBefore && recorder.injected {
                    switch step {
                    case .save, .batch, .delete: poisoned = true
                    case .compact, .rekey: break
                    }
                }
            }
            // Nothing acknowledged is lost, and nothing unacknowledged appears, for a fresh reader.
            let found = try await openAny(vault, keys: [key, newKey])
            #expect(found == model, "\(label): after \(step) the vault holds \(found.keys.sorted())")
        }
        #expect(recorder.injected, "\(label): never reached")
        if poisoned {
            // Opened again, the vault takes writes again.
            var candidateStore: EncryptedFileStore?
            for candidate in [key, newKey] where candidateStore == nil {
                do {
                    candidateStore = try await EncryptedFileStore.open(path: vault, keySource: .keyFile(candidate), options: options)
                } catch let error as VaultError where error.code == .authenticationFailed {
                    continue
                }
            }
            let reopened = try #require(candidateStore)
            try await reopened.save(Data("after reopening".utf8), for: S.key("z"))
            #expect(try await reopened.load(S.key("z")) == Data("after reopening".utf8), "\(label)")
        }
    }
}
