import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

import Glibc

/// Real child processes (`vault-file-stress`), real `kill -9`, real file size limits.
@Suite(.serialized) struct EncryptedFileProcessTests {
    typealias S = FileTestSupport

    /// A writer is killed with SIGKILL at random moments, 50 times over the same vault. Every
    /// write it acknowledged survives, with the right value, and the file always opens.
    @Test func killNineLosesNoAcknowledgedWrite() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        var totalAcknowledged = 0
        for round in 0..<50 {
            let service = "crash-\(round)"
            let (process, output) = try S.helper(["write", vault, key, service, "-1"])
            // Anywhere from before the vault is open to well into the write loop.
            try await Task.sleep(for: .microseconds(Int.random(in: 0...60_000)))
            kill(process.processIdentifier, SIGKILL)
            await process.exited()
            #expect(process.terminationReason == .uncaughtSignal, "round \(round): the helper was not killed")
            let acknowledged = await LineReader(output).remainingLines().compactMap { line in
                line.hasPrefix("ack ") ? Int(line.dropFirst(4)) : nil
            }
            #expect(acknowledged == Array(0..<acknowledged.count), "round \(round): acknowledgements out of order")
            totalAcknowledged += acknowledged.count

            guard FileManager.default.fileExists(atPath: vault) else {
                #expect(acknowledged.isEmpty, "round \(round): acknowledged writes but no vault file")
                continue
            }
            let store = try await S.open(vault, .keyFile(key))
            let stored = try await store.keys(service: service)
            // The write in flight may or may not have landed; nothing acknowledged may be missing.
            #expect(stored.count >= acknowledged.count && stored.count <= acknowledged.count + 1, "round \(round)")
            for index in acknowledged {
                let value = try await store.load(S.key("\(index)", service: service))
                #expect(value == S.helperValue(service: service, index: index), "round \(round): write \(index) lost or wrong")
            }
        }
        #expect(totalAcknowledged > 0, "the helper never got to write before being killed")
    }

    /// The same, with a writer that overwrites 20 keys and compacts every few writes, so that
    /// kills land during compactions too. Each key holds its last acknowledged value, or the
    /// value of the write in flight.
    @Test func killNineDuringOverwritesAndCompactions() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let service = "cycle"
        let slots = 20
        var next = 0  // values are numbered across rounds, so a stale value shows
        var known: [Int: Data] = [:]  // what each slot held after the previous round
        for round in 0..<30 {
            let (process, output) = try S.helper(["cycle", vault, key, service, "\(slots)", "\(next)"])
            // The kill is timed from the helper's first acknowledged write, not from its start: a
            // helper that takes longer than the delay to start (a sanitized build, a busy machine)
            // would otherwise be killed before it writes in every round.
            let lines = LineReader(output)
            let first = await lines.nextLine()
            try await Task.sleep(for: .microseconds(Int.random(in: 20_000...80_000)))
            kill(process.processIdentifier, SIGKILL)
            await process.exited()
            let rest = await lines.remainingLines()
            let acknowledged = ([first].compactMap { $0 } + rest).compactMap { line in
                line.hasPrefix("ack ") ? Int(line.dropFirst(4)) : nil
            }
            #expect(acknowledged == Array(next..<next + acknowledged.count), "round \(round)")
            let inFlight = next + acknowledged.count
            next = inFlight + 1
            guard FileManager.default.fileExists(atPath: vault) else { continue }
            let store = try await S.open(vault, .keyFile(key))
            for slot in 0..<slots {
                let stored = try await store.load(S.key("\(slot)", service: service))
                var allowed: [Data?] = []
                if let lastAcked = acknowledged.last(where: { $0 % slots == slot }) {
                    allowed.append(S.helperValue(service: service, index: lastAcked))
                } else {
                    allowed.append(known[slot])
                }
                if inFlight % slots == slot { allowed.append(S.helperValue(service: service, index: inFlight)) }
                #expect(allowed.contains(stored), "round \(round): slot \(slot) lost its acknowledged value")
                known[slot] = stored
            }
            #expect(try await store.keys(service: service).count <= slots)
        }
        #expect(try S.read(vault).count < 200 * 1024, "compaction ran")
    }

    /// Four processes write 250 distinct keys each into one vault at the same time, while a fifth
    /// process that opened the vault before them waits to see all 1,000 without reopening.
    @Test func fourWritersAndAReader() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        // Create the vault first, so that the reader has something to open.
        _ = try await S.open(vault, .keyFile(key))
        let services = (0..<4).map { "writer-\($0)" }
        let (reader, readerOutput) = try S.helper(["wait-for", vault, key, services.joined(separator: ","), "250"])
        let readerLines = LineReader(readerOutput)
        let opened = await readerLines.nextLine()
        #expect(opened == "opened")
        let writers = try services.map { try S.helper(["write", vault, key, $0, "250"]) }
        for (process, output) in writers {
            let lines = await LineReader(output).remainingLines()
            await process.exited()
            #expect(process.terminationStatus == 0)
            #expect(lines.count == 250)
        }
        let seen = await readerLines.remainingLines()
        await reader.exited()
        #expect(reader.terminationStatus == 0)
        #expect(seen == ["seen 250"])

        let store = try await S.open(vault, .keyFile(key))
        #expect(try await store.keys().count == 1000)
        for service in services {
            for index in 0..<250 {
                #expect(try await store.load(S.key("\(index)", service: service)) == S.helperValue(service: service, index: index))
            }
        }
    }

    /// RLIMIT_FSIZE makes the disk "full" for the child without root: the failing write throws
    /// `diskFull`, and the vault still opens with every earlier write.
    @Test func fileSizeLimitActsAsDiskFull() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let limit = 48 * 1024
        let (process, output) = try S.helper(["fill", vault, key, "\(limit)"])
        let lines = await LineReader(output).remainingLines()
        await process.exited()
        #expect(process.terminationStatus == 0)
        #expect(lines.last == "error disk-full")
        let acknowledged = lines.filter { $0.hasPrefix("ack ") }.count
        #expect(acknowledged > 10)
        #expect(try S.read(vault).count <= limit)

        let store = try await S.open(vault, .keyFile(key))
        #expect(try await store.keys(service: "fill").count == acknowledged, "nothing half-written became current")
        for index in 0..<acknowledged {
            #expect(try await store.load(S.key("\(index)", service: "fill")) == S.helperValue(service: "fill", index: index))
        }
        // With space again, writing goes on.
        try await store.save(Data("more".utf8), for: S.key("more"))
        #expect(try await S.open(vault, .keyFile(key)).load(S.key("more")) == Data("more".utf8))
    }

    /// A real full file system (a 256 KiB tmpfs). Needs root to mount, so it is not run for
    /// other users; as root (as in CI) a mount that fails is a failure, not a silent pass.
    @Test(.enabled(if: getuid() == 0, "mounting a tmpfs needs root"))
    func fullTmpfsGivesDiskFull() async throws {
        let dir = try TemporaryDirectory()
        let mountPoint = dir.file("small")
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: false)
        guard Self.run("/bin/mount", ["-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", mountPoint]) else {
            Issue.record(
                "Running as root but could not mount a tmpfs at \(mountPoint) (no CAP_SYS_ADMIN?), so the full-disk test did not run."
            )
            return
        }
        defer { _ = Self.run("/bin/umount", [mountPoint]) }
        let key = try S.keyFile(in: dir)
        let vault = mountPoint + "/vault"
        let store = try await S.open(vault, .keyFile(key))
        var written = 0
        var failure: VaultError?
        while failure == nil && written < 10_000 {
            do {
                try await store.save(Data(repeating: UInt8(written & 0xFF), count: 4000), for: S.key("\(written)"))
                written += 1
            } catch let error as VaultError {
                failure = error
            }
        }
        #expect(failure?.code == .diskFull)
        #expect(written > 10)
        #expect(try await store.keys().count == written)
        let reopened = try await S.open(vault, .keyFile(key))
        #expect(try await reopened.keys().count == written)
        #expect(try await reopened.load(S.key("\(written - 1)")) == Data(repeating: UInt8((written - 1) & 0xFF), count: 4000))
        // Compaction needs room for a second copy: it fails cleanly and the vault stays as it was.
        let compactError = await S.errorCode { try await reopened.compact() }
        #expect(compactError?.code == .diskFull)
        #expect(try await S.open(vault, .keyFile(key)).keys().count == written)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: mountPoint).filter { $0.contains(".tmp-") }
        #expect(leftovers.isEmpty, "a failed compaction leaves no temporary file")
    }

    static func run(_ tool: String, _ arguments: [String]) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.standardError = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            return false
        }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }
}
