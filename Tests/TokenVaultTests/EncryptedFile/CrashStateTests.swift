// Every write, fsync and rename failing in turn with EIO, ENOSPC and EDQUOT; the recorder of
// file operations that this and the crash-state exploration (CrashStateTests+Exploration.swift)
// share. The file operations are recorded through the POSIX layer's seam (FileOperationHooks),
// so these are the operations the store really makes.
import Foundation
import Synchronization
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault
import TokenVaultSystem

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
        case .exchange: "exchange"
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
            try await store.saveAll(entries.map { CredentialWrite(key: S.key($0.0), secret: Data($0.1.utf8), contentType: .binary) })
        case .delete(let account): try await store.delete(S.key(account))
        case .compact: try await store.compact()
        case .rekey: try await store.rekey(to: .keyFile(newKey))
        }
    }

    static let options = EncryptedFileStore.Options(kdf: .minimum, compactionMinimumDeadBytes: 1)

    // MARK: Crash states: see CrashStateTests+Exploration.swift

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
