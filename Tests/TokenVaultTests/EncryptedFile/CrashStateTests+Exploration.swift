// Every crash state of the file vault's workloads, in the manner of ALICE and CrashMonkey: the
// real code runs on real files once, its file operations recorded through the POSIX layer's
// seam; then, at every point between two operations, the states a crash may leave (CrashDisk's
// model: any subset of unsynced writes, torn and out-of-order sectors, any prefix of unsynced
// directory operations) are written to a real directory and opened with the real store.
//
// Each state must open (no integrity error: a crash is not damage) and hold what was
// acknowledged before the crash (a call that had returned), or that plus the step in flight,
// or a state the step in flight passes through on purpose (the refresh's journal; the
// migration's entry written before its plist is rewritten); nothing else.
//
// TOKENVAULT_CRASH_STATES=long explores more states at every point and a longer workload.
import Foundation
import Synchronization
import Testing
@testable import TokenVault
import TokenVaultSystem
import TokenVaultGit
import TokenVaultMigration
@testable import TokenVaultTestSupport

extension CrashStateTests {
    static let isLong = ProcessInfo.processInfo.environment["TOKENVAULT_CRASH_STATES"] == "long"

    /// What a reader finds in a tree: the vault's entries and the plist's bytes.
    struct Observed: Hashable {
        var entries: Model
        var plist: [UInt8]?

        var summary: String {
            "entries \(entries.keys.map { "\($0.service)/\($0.account)" }.sorted()), plist \(plist.map { "\($0.count) bytes" } ?? "absent")"
        }
    }

    enum Outcome: Hashable {
        case opened(Observed)
        case failed(String)
    }

    /// A step of the workload once it returned: how many operations were made by then, what a
    /// reader found, and the states the step passes through on purpose.
    struct Acknowledged {
        var name: String
        var operations: Int
        var observed: Observed
        var passesThrough: [Observed] = []
    }

    /// The paths of one recorded tree.
    struct Layout {
        var root: String
        var vault: String { root + "/data/vault" }
        var plist: String { root + "/config/\(CrashStateTests.domain).plist" }
    }

    static let domain = "com.example.crash"

    static func observe(_ layout: Layout, keys: [String]) async -> Outcome {
        do {
            let entries = try await openAny(layout.vault, keys: keys)
            let plist = FileManager.default.contents(atPath: layout.plist).map { [UInt8]($0) }
            return .opened(Observed(entries: entries, plist: plist))
        } catch let error as VaultError {
            return .failed("\(error.code): \(error.message)")
        } catch {
            return .failed("\(error)")
        }
    }

    /// Writes `state` into a new directory below `scratch` and opens what it holds.
    static func check(_ state: CrashDisk.State, in scratch: TemporaryDirectory, name: String, keys: [String]) async throws -> Outcome {
        let directory = scratch.file(name)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }  // scratch copy, not a vault write
        try CrashDisk.materialise(state, in: directory)
        return await observe(Layout(root: directory), keys: keys)
    }

    /// The offset an integrity error names ("the record at byte N").
    static func damagedOffset(_ message: String) -> Int? {
        guard let range = message.range(of: "at byte ") else { return nil }
        return Int(message[range.upperBound...].prefix { $0.isNumber })
    }

    final class JournalBox: @unchecked Sendable {  // guarded by `lock`
        private let lock = NSLock()
        private var _value: Observed?
        var value: Observed? {
            get { lock.withLock { _value } }
            set { lock.withLock { _value = newValue } }
        }
    }

    /// Runs the workloads on real files below `layout.root`, recording their file operations.
    static func record(
        _ layout: Layout, keys: (String, String), recorder: FileOperationRecorder, long: Bool
    ) async throws -> [Acknowledged] {
        var acknowledged: [Acknowledged] = []
        let allKeys = [keys.0, keys.1]
        func step(_ name: String, through: [Observed] = [], _ body: () async throws -> Void) async throws {
            try await body()
            let operations = recorder.operations.count
            guard case .opened(let observed) = await observe(layout, keys: allKeys) else {
                Issue.record("\(name): the live vault does not open")
                return
            }
            acknowledged.append(Acknowledged(name: name, operations: operations, observed: observed, passesThrough: through))
        }
        func value(_ tag: String, _ count: Int) -> Data { Data(String(repeating: tag, count: count).prefix(count).utf8) }

        // Opening creates the vault's directory and the vault.
        let store = try await EncryptedFileStore.open(path: layout.vault, keySource: .keyFile(keys.0), options: options)
        let vault = Vault(store: store)
        try await step("open") {}

        try await step("set") { try await store.save(value("first a;", 40), for: S.key("a")) }
        try await step("batch") {
            try await store.saveAll([
                CredentialWrite(key: S.key("b"), secret: value("b", 700), contentType: .binary),
                CredentialWrite(key: S.key("c"), secret: value("c", 20), contentType: .binary),
                CredentialWrite(key: S.key("d"), secret: value("d", 1500), contentType: .binary),
            ])
        }
        try await step("delete") { try await store.delete(S.key("b")) }
        try await step("set") { try await store.save(value("second a ", 810), for: S.key("a")) }
        try await step("set") { try await store.save(value("c again", 7), for: S.key("c")) }
        // Dead bytes now outweigh live ones: this save compacts.
        try await step("set and compaction") { try await store.save(value("d", 1), for: S.key("d")) }
        try await step("compaction") { try await store.compact() }
        try await step("set") { try await store.save(value("e", 1100), for: S.key("e")) }
        try await step("rekey") { try await store.rekey(to: .keyFile(keys.1)) }
        try await step("set") { try await store.save(value("after the rekey", 30), for: S.key("f")) }

        // The git helper's store: a new entry, then a rotated refresh token merged into it.
        let helper = GitCredentialHelper()
        let request = "protocol=https\nhost=git.example.com\nusername=alice\npassword=gho_crashstatetoken\n"
        try await step("git store") {
            _ = try await helper.store(
                try GitCredentialRequest(parsing: Data((request + "password_expiry_utc=1900000000\noauth_refresh_token=rt-1\n").utf8)),
                in: vault)
        }
        try await step("git store") {
            _ = try await helper.store(
                try GitCredentialRequest(parsing: Data((request + "oauth_refresh_token=rt-2\n").utf8)), in: vault)
        }

        // A refresh commit: the journal saved before the request, then the answer.
        let refreshKey = S.key("refreshed", service: "oauth")
        try await step("set") {
            try await vault.saveToken(
                OAuthToken(accessToken: "at-old", refreshToken: "rt-old", expiresAt: Date().addingTimeInterval(-3600)), for: refreshKey)
        }
        let journal = JournalBox()
        let before = recorder.operations.count
        _ = try await vault.freshToken(for: refreshKey) { _ in
            // The journal is durable now: a state this refresh passes through on purpose.
            if case .opened(let observed) = await observe(layout, keys: allKeys) { journal.value = observed }
            return OAuthToken(accessToken: "at-new", refreshToken: "rt-new", expiresAt: Date().addingTimeInterval(3600))
        }
        #expect(journal.value != nil && recorder.operations.count > before, "the refresh journaled nothing")
        try await step("refresh commit", through: journal.value.map { [$0] } ?? []) {}

        // The migration: the entry is written, then the plist rewritten without the tokens.
        let beforeMigration = acknowledged.last!.observed
        let migrated = try await vault.migrateDefaults(
            plistAt: URL(fileURLWithPath: layout.plist), options: MigrationOptions(removeSource: true))
        #expect(migrated.sourceRewritten)
        let operations = recorder.operations.count
        guard case .opened(let afterMigration) = await observe(layout, keys: allKeys) else {
            Issue.record("the live vault does not open after the migration")
            return acknowledged
        }
        acknowledged.append(
            Acknowledged(
                name: "migration", operations: operations, observed: afterMigration,
                passesThrough: [Observed(entries: afterMigration.entries, plist: beforeMigration.plist)]))

        // The long run: more of the engine's own steps, of sizes and shapes chosen with a fixed seed.
        var random = SeededRandom(seed: 33)
        for round in 0..<(long ? 900 : 90) {
            let account = "r\(Int.random(in: 0..<6, using: &random))"
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<5:
                let size = Int.random(in: 1...2600, using: &random)
                try await step("set") { try await store.save(value("\(round);", size), for: S.key(account)) }
            case 5..<7:
                let entries = (0..<Int.random(in: 2...4, using: &random)).map { index in
                    CredentialWrite(key: S.key("r\((index + round) % 6)"), secret: value("\(round).\(index);", Int.random(in: 1...1200, using: &random)),
                        contentType: .binary)
                }
                try await step("batch") { try await store.saveAll(entries) }
            case 7..<9:
                try await step("delete") { try await store.delete(S.key(account)) }
            default:
                try await step("compaction") { try await store.compact() }
            }
        }
        return acknowledged
    }

    /// Records the workloads once, then opens crash states at every point between two file
    /// operations and checks each one; counts the distinct states (by a hash of their files).
    @Test func everyCrashStateOpensWithEveryAcknowledgedWrite() async throws {
        let started = ContinuousClock.now
        let sandbox = try Sandbox()
        let keyDirectory = try TemporaryDirectory()
        let keys = (try S.keyFile(in: keyDirectory), try S.keyFile(in: keyDirectory, name: "new-key"))
        try Products.writeTutorialDefaults("strings", domain: Self.domain, tokens: FakeTokens(), in: sandbox)
        let layout = Layout(root: try SystemCall.realPath(sandbox.root.path))
        #expect(FileManager.default.fileExists(atPath: layout.plist), "Foundation did not write the plist")

        var disk = try CrashDisk(snapshotOf: layout.root)
        let recorder = FileOperationRecorder()
        FileOperationHooks.install(recorder, below: layout.root)
        let acknowledged: [Acknowledged]
        do {
            defer { FileOperationHooks.remove(recorder) }
            acknowledged = try await Self.record(layout, keys: keys, recorder: recorder, long: Self.isLong)
        }
        let operations = recorder.operations
        let recorded = ContinuousClock.now

        let scratch = try TemporaryDirectory()
        let perPoint = Self.isLong ? 400 : 40
        var random = SeededRandom(seed: 0x7661_756c_74)
        var checked: [Int: Outcome] = [:]
        var distinct: Set<Int> = []
        var explored = 0
        var opening = Duration.zero
        var damageReported = 0
        var failures: [String] = []
        var allowedCache: (step: Int, allowed: Set<Observed>) = (-1, [])
        for prefix in 0...operations.count {
            if prefix > 0 { disk.apply(operations[prefix - 1]) }
            // Before the vault existed, a reader finds nothing (an empty vault), as after "open".
            let done = acknowledged.lastIndex { $0.operations <= prefix } ?? 0
            if allowedCache.step != done {
                var allowed: Set<Observed> = [acknowledged[done].observed]
                if done + 1 < acknowledged.count {
                    allowed.insert(acknowledged[done + 1].observed)
                    allowed.formUnion(acknowledged[done + 1].passesThrough)
                }
                if done == 0 { allowed.insert(Observed(entries: [:], plist: acknowledged[0].observed.plist)) }
                allowedCache = (done, allowed)
            }
            let inFlight = done + 1 < acknowledged.count ? acknowledged[done + 1].name : "none"
            for (state, outOfOrder) in disk.crashStates(limit: perPoint, random: &random) {
                explored += 1
                distinct.insert(CrashDisk.digest(state))
                // Lock files are empty and never read: a state is opened once per content of its other files.
                let digest = CrashDisk.digest(state, dataOnly: true)
                let outcome: Outcome
                if let known = checked[digest] {
                    outcome = known
                } else {
                    let begin = ContinuousClock.now
                    outcome = try await Self.check(state, in: scratch, name: "\(checked.count)", keys: [keys.0, keys.1])
                    opening += ContinuousClock.now - begin
                    checked[digest] = outcome
                }
                if case .opened(let observed) = outcome, allowedCache.allowed.contains(observed) { continue }
                // Sectors of the last write reaching the disk out of order can look like damage to
                // the format (see Docs.docc's crash safety): allowed only as an integrity error
                // about bytes after every acknowledged write, with those bytes cut off holding
                // an acknowledged state.
                if outOfOrder, case .failed(let message) = outcome, message.hasPrefix("\(VaultError.Code.integrityFailure):"),
                    let offset = Self.damagedOffset(message)
                {
                    var cut = state
                    if let bytes = state["data/vault"].flatMap({ $0 }), offset <= bytes.count {
                        cut["data/vault"] = .some(Array(bytes.prefix(offset)))
                    }
                    if case .opened(let observed) = try await Self.check(cut, in: scratch, name: "cut-\(checked.count)", keys: [keys.0, keys.1]),
                        allowedCache.allowed.contains(observed)
                    {
                        damageReported += 1
                        continue
                    }
                }
                if failures.count < 20 {
                    let last = operations[max(0, prefix - 3)..<prefix].map(FileOperationRecorder.kind)
                    let found: String =
                        switch outcome {
                        case .opened(let observed): observed.summary
                        case .failed(let message): "an error: \(message)"
                        }
                    failures.append(
                        "crash after operation \(prefix)/\(operations.count) (last \(last)), during \(inFlight)\(outOfOrder ? ", sectors out of order" : ""): found \(found); allowed \(allowedCache.allowed.map(\.summary)); files \(state.mapValues { $0?.count ?? -1 }.sorted { $0.key < $1.key })"
                    )
                }
            }
        }
        for failure in failures { Issue.record(Comment(rawValue: failure)) }
        let kinds = Dictionary(grouping: operations, by: FileOperationRecorder.kind).mapValues(\.count)
        let steps = Dictionary(grouping: acknowledged.dropFirst(), by: \.name).mapValues(\.count)
        let finished = ContinuousClock.now
        print(
            "\(checked.count) distinct crash states checked (\(distinct.count) counting which empty lock files survived; \(explored) explored, \(Self.isLong ? "long" : "short") run), from \(operations.count) file operations \(kinds.sorted { $0.key < $1.key }) of \(acknowledged.count - 1) steps \(steps.sorted { $0.key < $1.key }); recorded in \(recorded - started), checked in \(finished - recorded) (\(opening) writing and opening them); \(damageReported) with sectors out of order reported as damage after the last acknowledged write"
        )
        #expect(checked.count >= (Self.isLong ? 10_000 : 1_000), "too few distinct crash states")
        #expect(kinds["exchange", default: 0] >= 1, "the migration's plist swap was not recorded")
        #expect(kinds["rename", default: 0] >= 3 && kinds["syncDirectory", default: 0] >= 3, "compactions and rekey were not recorded")
    }
}

// MARK: Regression cases: the states that showed the two durability bugs the exploration found

extension CrashStateTests {
    /// A vault whose directory `open` created: once a save is acknowledged, no crash loses it.
    /// Before the fix the new directory's parent was never synced, so a crash could take the
    /// directory, and every acknowledged write in it, away (`AtomicFile.makeDirectories`).
    @Test func aVaultInADirectoryThatOpenCreatedSurvivesEveryCrash() async throws {
        let dir = try TemporaryDirectory()
        let keyDirectory = try TemporaryDirectory()
        let key = try S.keyFile(in: keyDirectory)
        let root = try SystemCall.realPath(dir.path)
        var disk = try CrashDisk(snapshotOf: root)
        let recorder = FileOperationRecorder()
        FileOperationHooks.install(recorder, below: root)
        do {
            defer { FileOperationHooks.remove(recorder) }
            let store = try await EncryptedFileStore.open(path: root + "/data/vault", keySource: .keyFile(key), options: Self.options)
            try await store.save(Data("acknowledged".utf8), for: S.key("a"))
        }
        for operation in recorder.operations { disk.apply(operation) }
        var random = SeededRandom(seed: 1)
        let states = disk.crashStates(limit: 100, random: &random)
        #expect(states.contains { $0.state["data"] == nil } == false, "a crash state without the vault's directory")
        let scratch = try TemporaryDirectory()
        for (index, (state, _)) in states.enumerated() {
            let outcome = try await Self.check(state, in: scratch, name: "\(index)", keys: [key])
            #expect(outcome == .opened(Observed(entries: [S.key("a"): Data("acknowledged".utf8)], plist: nil)), "\(outcome)")
        }
    }

    /// A crash during an append whose frame header straddles a sector boundary: the sector with
    /// the header's first bytes reached the disk, the next did not, the size did. The vault opens
    /// with every acknowledged entry (it was an integrity error before the fix), and the next
    /// write repairs the tail.
    @Test func aFrameHeaderCutAtASectorBoundaryIsATornTailNotDamage() async throws {
        let dir = try TemporaryDirectory()
        let key = try S.keyFile(in: dir)
        let vault = dir.file("vault")
        let store = try await EncryptedFileStore.open(path: vault, keySource: .keyFile(key), options: Self.options)
        try await store.save(Data("acknowledged".utf8), for: S.key("a"))
        let durable = try S.read(vault)
        let recorder = FileOperationRecorder()
        FileOperationHooks.install(recorder, below: dir.path)
        do {
            defer { FileOperationHooks.remove(recorder) }
            try await store.save(Data(String(repeating: "in flight ", count: 80).utf8), for: S.key("b"))
        }
        let appended = try #require(
            recorder.operations.compactMap { operation -> (Int64, [UInt8])? in
                if case .write(_, let offset, let bytes) = operation { return (offset, bytes) }
                return nil
            }.first)
        #expect(Int(appended.0) == durable.count)
        for kept in 1..<SealedRecord.frameHeaderLength {
            // The header's first `kept` bytes, then zeros to the end of the write.
            let crashed = durable + appended.1.prefix(kept) + [UInt8](repeating: 0, count: appended.1.count - kept)
            try S.write(crashed, to: vault)
            let reopened = try await EncryptedFileStore.open(path: vault, keySource: .keyFile(key), options: Self.options)
            #expect(try await S.contents(reopened) == [S.key("a"): Data("acknowledged".utf8)], "header cut after \(kept) bytes")
            try await reopened.save(Data("next".utf8), for: S.key("c"))
            #expect(try await S.contents(reopened).count == 2)
            try S.write(durable, to: vault)
        }
    }
}
