import Foundation

import Glibc

/// CLOCK_MONOTONIC in nanoseconds. Python's `time.monotonic_ns()` reads the same clock, so
/// timestamps from several processes can be compared.
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// CPU time of the whole process (every thread: an open runs on the store's queue), in seconds.
/// Beside wall time, it shows what the work costs when the machine is shared and busy.
func processCPUSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

/// Nearest-rank percentile of sorted nanoseconds, in microseconds (as Benchmarks/peers.py does).
func percentile(_ sorted: [UInt64], _ quantile: Double) -> Double? {
    guard !sorted.isEmpty else { return nil }
    let rank = max(1, Int((quantile * Double(sorted.count)).rounded(.up)))
    return Double(sorted[rank - 1]) / 1000
}

/// Runs `operation` once per item, timing each call and the whole phase. The result has the
/// shape every workload prints: count, seconds, p50_us, p99_us.
func phase<Item>(_ items: [Item], _ operation: (Item) async throws -> Void) async rethrows -> [String: Any] {
    var latencies = [UInt64]()
    latencies.reserveCapacity(items.count)
    let start = monotonicNanoseconds()
    for item in items {
        let before = monotonicNanoseconds()
        try await operation(item)
        latencies.append(monotonicNanoseconds() - before)
    }
    let total = monotonicNanoseconds() - start
    return summary(latencies, seconds: Double(total) / 1e9)
}

func summary(_ latencies: [UInt64], seconds: Double) -> [String: Any] {
    let sorted = latencies.sorted()
    return [
        "count": sorted.count,
        "seconds": seconds,
        "p50_us": percentile(sorted, 0.50) ?? NSNull(),
        "p99_us": percentile(sorted, 0.99) ?? NSNull(),
    ]
}

/// The peak resident set size of this process so far, in KiB (`getrusage` `ru_maxrss`).
func peakRSSKiB() -> Int {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return usage.ru_maxrss
}

func fileSize(_ path: String) -> Int {
    var info = stat()
    guard stat(path, &info) == 0 else { return -1 }
    return Int(info.st_size)
}

/// A small deterministic generator (SplitMix64), so every run draws the same random keys.
struct SplitMix64: RandomNumberGenerator {
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

/// Prints one JSON object on stdout: the only thing a bench command writes there.
func emitJSON(_ object: [String: Any]) {
    do {
        var data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        data.append(UInt8(ascii: "\n"))
        FileHandle.standardOutput.write(data)
    } catch {
        fail("cannot encode the result: \(error)")
    }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data(("tokenvault-bench: " + message + "\n").utf8))
    exit(2)
}
