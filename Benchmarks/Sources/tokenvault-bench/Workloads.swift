import Foundation
@_spi(Benchmarks) import TokenVault

import Glibc

/// The workloads of issue 7, each driving the library through its public API only.
enum Workloads {
    /// W1: set N entries, get all in random order, overwrite all, delete all.
    static func w1(store: any CredentialStore, service: String, count: Int, payloads: Payloads) async throws -> [String: Any] {
        let keys = try (0..<count).map { try Payloads.key(service: service, index: $0) }
        let values = (0..<count).map { payloads.payload($0) }
        let indices = Array(0..<count)
        // The same fixed order for every run; Benchmarks/peers.py uses its own fixed seed.
        var generator = SplitMix64(seed: 20_240_607)
        let shuffled = indices.shuffled(using: &generator)

        var result: [String: Any] = ["n": count]
        result["set"] = try await phase(indices) { try await store.save(values[$0], for: keys[$0], contentType: .json) }
        result["get"] = try await phase(shuffled) { index in
            guard try await store.load(keys[index]) == values[index] else { fail("wrong value for \(keys[index])") }
        }
        result["overwrite"] = try await phase(indices) { try await store.save(values[$0], for: keys[$0], contentType: .json) }
        result["delete"] = try await phase(indices) { index in
            guard try await store.delete(keys[index]) else { fail("\(keys[index]) was missing at delete") }
        }
        guard try await store.keys(service: service).isEmpty else { fail("entries left after W1 on \(service)") }
        return result
    }

    /// Scale, first process: a vault of N entries, written in batches of `batch` with `saveAll`
    /// (one append and one fdatasync per batch).
    static func scaleFill(path: String, keyFile: String, count: Int, batch: Int, payloads: Payloads) async throws -> [String: Any] {
        let store = try await EncryptedFileStore.open(path: path, keySource: .keyFile(keyFile))
        var batchLatencies = [UInt64]()
        let start = monotonicNanoseconds()
        var next = 0
        while next < count {
            let end = min(count, next + batch)
            let entries = try (next..<end).map {
                CredentialWrite(key: try Payloads.key(service: "scale", index: $0), secret: payloads.payload($0), contentType: .json)
            }
            let before = monotonicNanoseconds()
            try await store.saveAll(entries)
            batchLatencies.append(monotonicNanoseconds() - before)
            next = end
        }
        let seconds = Double(monotonicNanoseconds() - start) / 1e9
        return [
            "n": count,
            "batch_size": batch,
            "fill": summary(batchLatencies, seconds: seconds),
            "file_bytes": fileSize(path),
        ]
    }

    /// Scale, second process (fresh, so that open time and peak RSS belong to this N): open,
    /// `gets` warm gets of random existing keys, `sets` durable sets of new keys.
    static func scaleMeasure(path: String, keyFile: String, count: Int, gets: Int, sets: Int, payloads: Payloads) async throws -> [String: Any] {
        // Everything the timed loops need is made before the vault is opened, so that the RSS
        // growth across the open is the vault's own.
        let keys = try (0..<count).map { try Payloads.key(service: "scale", index: $0) }
        var generator = SplitMix64(seed: 7)
        let draws = (0..<gets).map { _ in Int.random(in: 0..<count, using: &generator) }
        let newKeys = try (count..<(count + sets)).map { try Payloads.key(service: "scale", index: $0) }
        let newValues = (count..<(count + sets)).map { payloads.payload($0) }
        let expectedLength = payloads.payload(0).count
        let fileBytes = fileSize(path)
        let rssBeforeOpen = peakRSSKiB()

        let openCPUStart = processCPUSeconds()
        let openStart = monotonicNanoseconds()
        let store = try await EncryptedFileStore.open(path: path, keySource: .keyFile(keyFile))
        let openSeconds = Double(monotonicNanoseconds() - openStart) / 1e9
        let openCPUSeconds = processCPUSeconds() - openCPUStart
        let rssAfterOpen = peakRSSKiB()

        let get = try await phase(draws) { index in
            guard let value = try await store.load(keys[index]), value.count == expectedLength else {
                fail("missing or wrong value for \(keys[index])")
            }
        }
        // A full comparison on a sample, outside the timed loop.
        for index in draws.prefix(100) where try await store.load(keys[index]) != payloads.payload(index) {
            fail("wrong value for \(keys[index])")
        }
        let set = try await phase(Array(0..<sets)) { try await store.save(newValues[$0], for: newKeys[$0], contentType: .json) }
        return [
            "n": count,
            "file_bytes": fileBytes,
            "open_seconds": openSeconds,
            "open_cpu_seconds": openCPUSeconds,
            "get": get,
            "set": set,
            "rss_before_open_kib": rssBeforeOpen,
            "rss_after_open_kib": rssAfterOpen,
            "peak_rss_kib": peakRSSKiB(),
        ]
    }

    /// The crypto floor of an open (issue 17): in a process of its own, the whole vault file read
    /// into memory, then `passes` timed loops that only authenticate and decrypt every record
    /// (the floor), each followed by one that does only the crypto an open does (every
    /// tag, the names). Medians of the passes, wall and CPU time.
    static func decryptFloor(path: String, keyFile: String, passes: Int) throws -> [String: Any] {
        let loop = try DecryptOnlyLoop(path: path, keyFile: keyFile)
        var wall: [Double] = []
        var cpu: [Double] = []
        var namesCPU: [Double] = []
        var records = 0
        for _ in 0..<max(1, passes) {
            let cpuStart = processCPUSeconds()
            let start = monotonicNanoseconds()
            records = try loop.run()
            wall.append(Double(monotonicNanoseconds() - start) / 1e9)
            cpu.append(processCPUSeconds() - cpuStart)
            // Interleaved with the full decrypt: the crypto an open does (tags, names only).
            let namesStart = processCPUSeconds()
            guard try loop.run(namesOnly: true) == records else { fail("the names-only loop read another number of records") }
            namesCPU.append(processCPUSeconds() - namesStart)
        }
        let median = { (values: [Double]) in values.sorted()[values.count / 2] }
        return [
            "records": records,
            "file_bytes": loop.fileBytes,
            "passes": wall.count,
            "seconds": median(wall),
            "cpu_seconds": median(cpu),
            "names_only_cpu_seconds": median(namesCPU),
        ]
    }

    /// The floor, and the file backend against it under the same conditions: in `blocks`
    /// interleaved blocks, `perBlock` appends of `size` bytes + fdatasync (what the file backend
    /// calls), as many + fsync, and as many durable sets of new keys into a fresh vault in the same
    /// directory. Interleaving gives all three the same share of the machine's noise.
    static func floor(directory: String, keyFile: String, blocks: Int, perBlock: Int, size: Int, payloads: Payloads) async throws -> [String: Any] {
        let record = [UInt8](repeating: 0x5A, count: size)
        let store = try await EncryptedFileStore.open(path: directory + "/floor.vault", keySource: .keyFile(keyFile))
        let total = blocks * perBlock
        let keys = try (0..<total).map { try Payloads.key(service: "floor", index: $0) }
        let values = (0..<total).map { payloads.payload($0) }

        var descriptors: [(name: String, fd: Int32, flush: (Int32) -> Int32)] = []
        for (name, flush) in [("fdatasync", { fdatasync($0) }), ("fsync", { fsync($0) })] as [(String, (Int32) -> Int32)] {
            let path = directory + "/floor-\(name).bin"
            let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { fail("cannot create \(path): \(String(cString: strerror(errno)))") }
            descriptors.append((name, descriptor, flush))
        }
        defer {
            for entry in descriptors {
                close(entry.fd)
                unlink(directory + "/floor-\(entry.name).bin")
            }
        }

        var latencies: [String: [UInt64]] = [:]
        var elapsed: [String: UInt64] = [:]
        for block in 0..<blocks {
            for entry in descriptors {
                let start = monotonicNanoseconds()
                for _ in 0..<perBlock {
                    let before = monotonicNanoseconds()
                    let written = record.withUnsafeBytes { write(entry.fd, $0.baseAddress, size) }
                    guard written == size, entry.flush(entry.fd) == 0 else {
                        fail("\(entry.name) failed: \(String(cString: strerror(errno)))")
                    }
                    latencies[entry.name, default: []].append(monotonicNanoseconds() - before)
                }
                elapsed[entry.name, default: 0] += monotonicNanoseconds() - start
            }
            let start = monotonicNanoseconds()
            for index in (block * perBlock)..<((block + 1) * perBlock) {
                let before = monotonicNanoseconds()
                try await store.save(values[index], for: keys[index], contentType: .json)
                latencies["set", default: []].append(monotonicNanoseconds() - before)
            }
            elapsed["set", default: 0] += monotonicNanoseconds() - start
        }
        var result: [String: Any] = ["size": size]
        for (name, values) in latencies {
            result[name] = summary(values, seconds: Double(elapsed[name] ?? 0) / 1e9)
        }
        return result
    }

    /// One of several writer processes on one vault: opens it, says "ready", waits for a line
    /// on stdin, then makes `count` durable sets of its own keys. Reports its start and end on
    /// CLOCK_MONOTONIC so that the parent can compute the rate of all writers together.
    static func multiProcessWriter(path: String, keyFile: String, writer: String, count: Int, payloads: Payloads) async throws -> [String: Any] {
        let store = try await EncryptedFileStore.open(path: path, keySource: .keyFile(keyFile))
        let service = "writer-" + writer
        let keys = try (0..<count).map { try Payloads.key(service: service, index: $0) }
        let values = (0..<count).map { payloads.payload($0) }
        FileHandle.standardOutput.write(Data("ready\n".utf8))
        guard readLine() != nil else { fail("no start signal") }
        let start = monotonicNanoseconds()
        let set = try await phase(Array(0..<count)) { try await store.save(values[$0], for: keys[$0], contentType: .json) }
        let end = monotonicNanoseconds()
        return ["writer": writer, "start_ns": start, "end_ns": end, "set": set]
    }

    /// Counts the entries of a vault, to check that concurrent writers lost nothing.
    static func count(path: String, keyFile: String) async throws -> [String: Any] {
        let store = try await EncryptedFileStore.open(path: path, keySource: .keyFile(keyFile))
        return ["entries": try await store.keys(service: nil).count]
    }
}
