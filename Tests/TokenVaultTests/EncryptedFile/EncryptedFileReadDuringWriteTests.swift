import Dispatch
import Foundation
import Synchronization
import Testing
@testable import TokenVault
import TokenVaultSystem
@testable import TokenVaultTestSupport

/// A reader of an open file vault does not wait for this process's own write to reach the disk:
/// while a save holds the exclusive lock (no other process can write) it reads the state as it
/// was, which holds every write acknowledged so far. `vault agent` relies on it: its refresh
/// ahead saves twice (the journal, then the answer), each with an `fdatasync`, and its clients'
/// reads must not queue behind them (issue 30, refresh ahead: max latency 20 ms).
@Suite struct EncryptedFileReadDuringWriteTests {
    typealias S = FileTestSupport

    /// Holds the first `fdatasync` of one file until released (or until `bound` has passed, so
    /// that a failing test ends instead of hanging), and reports when it holds one.
    final class SyncGate: FileOperationHook, Sendable {
        let file: String
        let bound: Duration
        let reached: AsyncStream<Void>
        private let reachedContinuation: AsyncStream<Void>.Continuation
        private let state = Mutex<(held: Bool, used: Bool)>((false, false))
        private let release = DispatchSemaphore(value: 0)

        init(file: String, bound: Duration) {
            self.file = file
            self.bound = bound
            (reached, reachedContinuation) = AsyncStream.makeStream()
        }

        var isHolding: Bool { state.withLock { $0.held } }

        func willPerform(_ operation: FileOperation) -> Errno? {
            guard operation == .sync(path: file) else { return nil }
            let first = state.withLock { state -> Bool in
                guard !state.used else { return false }
                state.used = true
                state.held = true
                return true
            }
            guard first else { return nil }
            reachedContinuation.yield()
            _ = release.wait(timeout: .now() + .milliseconds(Int(bound.components.seconds * 1000)))
            state.withLock { $0.held = false }
            return nil
        }

        func didPerform(_ operation: FileOperation) {}

        func open() { release.signal() }
    }

    @Test func aReadDuringThisProcesssSaveDoesNotWaitForItsSync() async throws {
        let dir = try TemporaryDirectory()
        let store = try await S.open(dir.file("vault"), .keyFile(try S.keyFile(in: dir)))
        let key = S.key("read-during-write")
        let other = S.key("untouched")
        try await store.save(Data("before".utf8), for: key)
        try await store.save(Data("other".utf8), for: other)

        let gate = SyncGate(file: store.path, bound: .seconds(20))
        FileOperationHooks.install(gate, below: (store.path as NSString).deletingLastPathComponent)
        defer { FileOperationHooks.remove(gate) }
        let writer = Task { try await store.save(Data("after".utf8), for: key) }
        var reached = gate.reached.makeAsyncIterator()
        await reached.next()  // the save has appended its record and waits in fdatasync

        // Read while the save is still in its sync: the state before it, at once.
        let during = try await store.load(key)
        let untouched = try await store.load(other)
        let stillSyncing = gate.isHolding
        gate.open()
        try await writer.value
        #expect(stillSyncing, "the read waited for the save's fdatasync")
        #expect(during == Data("before".utf8), "a save that has not returned is not seen")
        #expect(untouched == Data("other".utf8))
        // Once the save has returned, every read sees it.
        #expect(try await store.load(key) == Data("after".utf8))
        let reopened = try await S.open(store.path, .keyFile(dir.file("key")))
        #expect(try await reopened.load(key) == Data("after".utf8))
    }
}
