// tokenvault-postgres-bench URL PASSWORD_FILE KEY_FILE --oauth URL [--rows N] [--samples K] [--rounds R] [--json FILE]
// tokenvault-postgres-bench host URL PASSWORD_FILE KEY_FILE --oauth URL --service S --account A --tasks T
//
// Scripts/bench-postgres runs it against a throwaway cluster and the test OAuth server. Side by
// side in one run, on one server, it measures and prints each goal of issue 16 with MET or MISSED:
//   - PostgresStore get (no cache) against a bare postgres-nio SELECT by primary key: ≥ 0.8×;
//   - PostgresStore set against a bare single-row upsert: ≥ 0.8×;
//   - get p50 latency with N rows (default 1,000,000) against 1,000 rows: ≤ 1.5×. The extra rows
//     are real entries: sealed by the store's own keys (sealedRows, SPI) and inserted by SQL in
//     batches, then read back through the store;
//   - warm get with the LISTEN/NOTIFY read cache: ≥ 100,000/s;
//   - one refresh across hosts: from the moment every host asks for the expired token to the
//     moment every process of every host holds the new one, against one token-endpoint round
//     trip + 50 ms. Hosts are child processes (`host` mode) with their own runtime, temporary
//     and home directories; they share nothing but the database.
// Bare and store blocks alternate, so that a busy machine slows both alike.
//
// Every timed loop runs off the main actor, on the cooperative pool, as a server's request
// handlers do: `measure` and `sideBySide` are nonisolated and their bodies are @Sendable closures
// (capturing their values). The top-level code of this file runs on the main actor, and a loop
// there would hop to the pool and back to the main queue around every call of a nonisolated async
// method (PostgresStore.load, PostgresClient.query), tens of microseconds each time: more than a
// cached get itself costs. Bare and store sides are measured the same way.
import Foundation
import Logging
import PostgresNIO
import TokenVault
@_spi(Benchmarks) import TokenVaultPostgres

import Glibc

func now() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("tokenvault-postgres-bench: \(message)\n".utf8))
    exit(1)
}

struct Figures {
    var latencies: [UInt64] = []
    var nanoseconds: UInt64 = 0
    var perSecond: Double { Double(latencies.count) / (Double(nanoseconds) / 1e9) }
    func percentile(_ q: Double) -> Double {
        let sorted = latencies.sorted()
        let rank = max(1, Int((q * Double(sorted.count)).rounded(.up)))
        return Double(sorted[rank - 1]) / 1000
    }
    var summary: String {
        "\(fixed(perSecond, 0))/s, p50 \(fixed(percentile(0.5), 1)) µs, p99 \(fixed(percentile(0.99), 1)) µs (n=\(latencies.count))"
    }
    var json: [String: Any] { ["count": latencies.count, "per_second": perSecond, "p50_us": percentile(0.5), "p99_us": percentile(0.99)] }
    mutating func add(_ other: Figures) {
        latencies += other.latencies
        nanoseconds += other.nanoseconds
    }
}

func fixed(_ value: Double, _ digits: Int) -> String {
    String(format: "%.\(digits)f", value)
}

func measure(_ count: Int, from offset: Int = 0, _ body: @Sendable (Int) async throws -> Void) async throws -> Figures {
    var figures = Figures()
    figures.latencies.reserveCapacity(count)
    let start = now()
    for index in offset..<(offset + count) {
        let before = now()
        try await body(index)
        figures.latencies.append(now() - before)
    }
    figures.nanoseconds = now() - start
    return figures
}

/// `first` and `second` in alternating blocks (after a warm-up of each), summed.
func sideBySide(
    samples: Int, blocks: Int = 5, _ first: @Sendable (Int) async throws -> Void, _ second: @Sendable (Int) async throws -> Void
) async throws -> (Figures, Figures) {
    _ = try await measure(100, first)
    _ = try await measure(100, second)
    var a = Figures()
    var b = Figures()
    let perBlock = max(1, samples / blocks)
    for block in 0..<blocks {
        a.add(try await measure(perBlock, from: block * perBlock, first))
        b.add(try await measure(perBlock, from: block * perBlock, second))
    }
    return (a, b)
}

func option(_ arguments: [String], _ name: String) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

func intOption(_ arguments: [String], _ name: String, _ fallback: Int) -> Int {
    guard let text = option(arguments, name) else { return fallback }
    guard let value = Int(text), value > 0 else { fail("\(name) takes a positive number, not \(text)") }
    return value
}

/// FNV-1a: tells tokens apart in the output without showing them.
func fingerprint(_ text: String) -> String {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in text.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
    return String(hash, radix: 16)
}

/// The token endpoint as a client of the library reaches it: TokenEndpointClient (libcurl, opened
/// on the first request), not URLSession, whose FoundationNetworking needs libcurl's development
/// files to link statically.
func endpoint(_ server: String) -> ClientRegistration {
    guard let url = URL(string: server)?.appendingPathComponent("token"),
        let description = try? ClientRegistration(tokenEndpoint: url, clientID: "tokenvault-example")
    else { fail("bad OAuth server URL") }
    return description
}

/// The refresh grant, as a client would send it (the same request in the hosts and for the round trip).
func refresh(_ stale: OAuthToken, server: String) async throws -> OAuthToken {
    try await TokenEndpointClient(requestTimeout: .seconds(30), maximumAttempts: 1).refresh(stale, using: endpoint(server))
}

func login(_ user: String, server: String) async throws -> OAuthToken {
    try await TokenEndpointClient(requestTimeout: .seconds(30), maximumAttempts: 1).requestToken(
        [("grant_type", "password"), ("username", user), ("password", "test-password")], registration: endpoint(server))
}

func writeLine(_ handle: FileHandle, _ line: String) {
    handle.write(Data((line + "\n").utf8))
}

/// Reads one line from `handle` (blocking), nil at the end.
func readLine(_ handle: FileHandle, buffer: inout Data) -> String? {
    while true {
        if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
            let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
            buffer = Data(buffer[(newline + 1)...])
            return line
        }
        let chunk = handle.availableData
        if chunk.isEmpty { return nil }
        buffer += chunk
    }
}

let arguments = CommandLine.arguments

// MARK: - Host mode: one process of one host of the cross-host refresh

if arguments.count > 1 && arguments[1] == "host" {
    guard arguments.count >= 5, let server = option(arguments, "--oauth"), let service = option(arguments, "--service"),
        let account = option(arguments, "--account")
    else { fail("usage: host URL PASSWORD_FILE KEY_FILE --oauth URL --service S --account A --tasks T") }
    let tasks = intOption(arguments, "--tasks", 2)
    let configuration = try PostgresStore.Configuration(url: arguments[2], passwordFile: arguments[3])
    let store = try await PostgresStore.open(configuration, keySource: .keyFile(arguments[4]))
    let vault = Vault(store: store)
    let key = try CredentialKey(service: service, account: account)
    writeLine(.standardOutput, "ready")
    var buffer = Data()
    while let line = readLine(.standardInput, buffer: &buffer), line == "go" {
        let results = await withTaskGroup(of: String.self) { group in
            for _ in 0..<tasks {
                group.addTask {
                    do {
                        let token = try await vault.freshToken(for: key, leeway: 1, timeout: .seconds(20)) { stale in
                            try await refresh(stale, server: server)
                        }
                        return fingerprint(token.accessToken)
                    } catch let error as VaultError {
                        return "error:\(error.code)"
                    } catch {
                        return "error:other"
                    }
                }
            }
            var all: [String] = []
            for await result in group { all.append(result) }
            return all
        }
        writeLine(.standardOutput, "done \(now()) \(Set(results).sorted().joined(separator: ","))")
    }
    store.close()
    exit(0)
}

// MARK: - The benchmark

guard arguments.count >= 4, let oauth = option(arguments, "--oauth") else {
    fail("usage: tokenvault-postgres-bench URL PASSWORD_FILE KEY_FILE --oauth URL [--rows N] [--samples K] [--rounds R] [--json FILE]")
}
let rows = intOption(arguments, "--rows", 1_000_000)
let samples = intOption(arguments, "--samples", 5_000)
let rounds = intOption(arguments, "--rounds", 7)
let url = arguments[1]
let passwordFile = arguments[2]
let keyFile = arguments[3]

let configuration = try PostgresStore.Configuration(url: url, passwordFile: passwordFile)
let store = try await PostgresStore.open(configuration, keySource: .keyFile(keyFile))
var results: [String: Any] = ["server": "\(configuration)", "samples": samples, "rows": rows]
var report: [String] = []
var allMet = true

@MainActor
func goal(_ name: String, ratio: Double, bound: Double, atLeast: Bool, _ figures: String) {
    let met = atLeast ? ratio >= bound : ratio <= bound
    allMet = allMet && met
    report.append(
        name.padding(toLength: 52, withPad: " ", startingAt: 0)
            + " \(fixed(ratio, 2))× (goal \(atLeast ? "≥" : "≤") \(fixed(bound, 2))×)  \(met ? "MET" : "MISSED")\n      \(figures)")
}

// The bare client on the same server, with TLS: its own pool.
let password = try String(contentsOfFile: passwordFile, encoding: .utf8).trimmingCharacters(in: .newlines)
var bareConfiguration = PostgresClient.Configuration(
    host: configuration.host ?? "127.0.0.1", port: configuration.port, username: configuration.user, password: password,
    database: configuration.database,
    tls: configuration.tlsMode == .disable
        ? .disable
        : .require({
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.certificateVerification = .none
            return tls
        }()))
bareConfiguration.options.keepAliveBehavior = nil
let bare = PostgresClient(configuration: bareConfiguration)
let runner = Task { await bare.run() }
let logger = Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() })
try await bare.query("CREATE TABLE IF NOT EXISTS bench_bare (k bytea PRIMARY KEY, v bytea NOT NULL)", logger: logger)

// MARK: get and set against the round-trip floors, with 1,000 entries

let secret = Data(repeating: 0x61, count: 1200)  // about a stored OAuth token
let keys = try (0..<1000).map { try CredentialKey(service: "bench", account: "a\($0)") }
for key in keys { try await store.save(secret, for: key) }
// The bare rows have the store's sizes: 32-byte keys, values as long as a sealed entry.
let sealedLength = try store.sealedRows([(keys[0], secret)])[0].sealed.count
let bareKeys = (0..<1000).map { index in Data((0..<32).map { UInt8(truncatingIfNeeded: index >> (($0 % 2) * 8) ^ $0) }) }
let bareValue = Data(repeating: 0x62, count: sealedLength)
for key in bareKeys {
    try await bare.query("INSERT INTO bench_bare VALUES (\(key), \(bareValue)) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v", logger: logger)
}
try await bare.query("ANALYZE bench_bare", logger: logger)

let (bareSelect, storeGet) = try await sideBySide(
    samples: samples,
    { [bare, bareKeys, logger] index in
        let rows = try await bare.query("SELECT v FROM bench_bare WHERE k = \(bareKeys[index % 1000])", logger: logger)
        for try await _ in rows {}
    },
    { [store, keys, secret] index in
        guard try await store.load(keys[index % 1000]) == secret else { fail("get read something else") }
    })
results["bare_select"] = bareSelect.json
results["get"] = storeGet.json
goal("get (no cache) vs bare SELECT by key", ratio: storeGet.perSecond / bareSelect.perSecond, bound: 0.8, atLeast: true,
    "get \(storeGet.summary); bare \(bareSelect.summary)")

let (bareUpsert, storeSet) = try await sideBySide(
    samples: samples,
    { [bare, bareKeys, bareValue, logger] index in
        try await bare.query(
            "INSERT INTO bench_bare VALUES (\(bareKeys[index % 1000]), \(bareValue)) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
            logger: logger)
    },
    { [store, keys, secret] index in try await store.save(secret, for: keys[index % 1000]) })
results["bare_upsert"] = bareUpsert.json
results["set"] = storeSet.json
goal("set vs bare upsert", ratio: storeSet.perSecond / bareUpsert.perSecond, bound: 0.8, atLeast: true,
    "set \(storeSet.summary); bare \(bareUpsert.summary)")

// MARK: warm get with the read cache

do {
    var options = PostgresStore.Options()
    options.readCache = true
    let cached = try await PostgresStore.open(configuration, keySource: .keyFile(keyFile), options: options)
    // The cache serves only while its listener is up: wait for it (bounded), then warm every key.
    let deadline = now() + 10_000_000_000
    while !cached.isReadCacheListening {
        guard now() < deadline else { fail("the read cache's listener did not start within 10 s") }
        try await Task.sleep(for: .milliseconds(5))
    }
    for key in keys { _ = try await cached.load(key) }
    let warm = try await measure(max(200_000, samples)) { [keys, secret] index in
        guard try await cached.load(keys[index % 1000]) == secret else { fail("cached get read something else") }
    }
    let hits = cached.readCacheHits
    results["cached_get"] = warm.json
    results["cached_get_hits"] = hits
    goal("warm get with cache, per second / 100,000", ratio: warm.perSecond / 100_000, bound: 1, atLeast: true,
        "cached get \(warm.summary), \(hits) of \(warm.latencies.count + 1000) served from the cache")
    cached.close()
}

// MARK: get latency with `rows` entries against 1,000

let smallGet = try await measure(samples) { [store, keys] index in _ = try await store.load(keys[(index * 7919) % 1000]) }
let fillerStart = now()
let batch = 5_000
var filled = 0
var fillerIndex = 0
while filled + 1000 < rows {
    let count = min(batch, rows - 1000 - filled)
    let entries = try (0..<count).map { offset in
        (key: try CredentialKey(service: "fill\((fillerIndex + offset) % 100)", account: "f\(fillerIndex + offset)"), secret: secret)
    }
    let sealed = try store.sealedRows(entries)
    try await bare.query(
        """
        INSERT INTO tokenvault_entries (row_hash, service_hash, version, sealed)
        SELECT * FROM unnest(\(sealed.map { ByteBuffer(bytes: $0.rowHash) })::bytea[], \(sealed.map { ByteBuffer(bytes: $0.serviceHash) })::bytea[],
                             \(sealed.map { $0.version })::bigint[], \(sealed.map { ByteBuffer(bytes: $0.sealed) })::bytea[])
        """, logger: logger)
    filled += count
    fillerIndex += count
}
try await bare.query("VACUUM ANALYZE tokenvault_entries", logger: logger)
let fillerSeconds = Double(now() - fillerStart) / 1e9
results["filler_seconds"] = fillerSeconds
// Real keys from the whole table, in an order that jumps about: the 1,000 first ones and the filler.
var generator = SystemRandomNumberGenerator()
let bigKeys = try (0..<samples).map { _ -> CredentialKey in
    let pick = Int.random(in: 0..<(filled + 1000), using: &generator)
    return pick < 1000 ? keys[pick] : try CredentialKey(service: "fill\((pick - 1000) % 100)", account: "f\(pick - 1000)")
}
let bigGet = try await measure(samples) { [store, bigKeys, secret] index in
    guard try await store.load(bigKeys[index]) == secret else { fail("a filler row did not read back") }
}
let count = try await store.status().entries
results["get_at_1000_rows"] = smallGet.json
results["get_at_rows"] = bigGet.json
goal("get p50 latency at \(count) rows vs 1,000", ratio: bigGet.percentile(0.5) / smallGet.percentile(0.5), bound: 1.5, atLeast: false,
    "\(count) rows: \(bigGet.summary); 1,000 rows: \(smallGet.summary) (the rows filled by SQL in \(fixed(fillerSeconds, 1)) s)")
try await bare.query("DROP TABLE bench_bare", logger: logger)

// MARK: one refresh across hosts

@MainActor
func spawnHosts(service: String, account: String, hosts: Int, processes: Int, tasks: Int, scratch: URL) throws -> [(Process, FileHandle, FileHandle)] {
    var children: [(Process, FileHandle, FileHandle)] = []
    for host in 0..<hosts {
        let directory = scratch.appendingPathComponent("host\(host)")
        var environment = ["PATH": "/usr/bin:/bin"]
        for sub in ["runtime", "tmp", "home"] {
            let path = directory.appendingPathComponent(sub).path
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            environment[["runtime": "XDG_RUNTIME_DIR", "tmp": "TMPDIR", "home": "HOME"][sub]!] = path
        }
        // A copy of the key per host, as each host would have its own.
        let hostKey = directory.appendingPathComponent("key").path
        try FileManager.default.copyItem(atPath: keyFile, toPath: hostKey)
        for _ in 0..<processes {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            process.arguments = [
                "host", url, passwordFile, hostKey, "--oauth", oauth, "--service", service, "--account", account, "--tasks", String(tasks),
            ]
            process.environment = environment
            let input = Pipe()
            let output = Pipe()
            process.standardInput = input
            process.standardOutput = output
            try process.run()
            children.append((process, input.fileHandleForWriting, output.fileHandleForReading))
        }
    }
    return children
}

do {
    let scratch = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("tv-bench-hosts-\(getpid())")
    defer { try? FileManager.default.removeItem(at: scratch) }
    let key = try CredentialKey(service: "bench-hosts", account: "fleet")
    let vault = Vault(store: store)
    try await vault.saveToken(try await login("bench-fleet", server: oauth), for: key)
    var roundTripToken = try await login("bench-round-trip", server: oauth)
    let hosts = 3
    let processes = 2
    let children = try spawnHosts(service: key.service, account: key.account, hosts: hosts, processes: processes, tasks: 2, scratch: scratch)
    var buffers = Array(repeating: Data(), count: children.count)
    for (index, child) in children.enumerated() {
        guard readLine(child.2, buffer: &buffers[index]) == "ready" else { fail("a host process did not start") }
    }
    var spreads: [Double] = []
    var roundTrips: [Double] = []
    for round in 0...rounds {
        // One bare refresh: the token endpoint's round trip now, with the same client code.
        let before = now()
        roundTripToken = try await refresh(roundTripToken, server: oauth)
        let roundTrip = Double(now() - before) / 1e6
        // The fleet's token expires: every process of every host asks for it at once.
        guard var token = try await vault.token(for: key) else { fail("the fleet's token is gone") }
        token.expiresAt = Date().addingTimeInterval(-5)
        try await vault.saveToken(token, for: key)
        let start = now()
        for child in children { writeLine(child.1, "go") }
        var latest: UInt64 = 0
        var tokens = Set<String>()
        for (index, child) in children.enumerated() {
            guard let line = readLine(child.2, buffer: &buffers[index]) else { fail("a host process ended") }
            let parts = line.split(separator: " ")
            guard parts.count == 3, parts[0] == "done", let at = UInt64(parts[1]) else { fail("a host said: \(line)") }
            latest = max(latest, at)
            tokens.formUnion(parts[2].split(separator: ",").map(String.init))
        }
        guard tokens.count == 1, let only = tokens.first, !only.hasPrefix("error") else { fail("the hosts ended with \(tokens.sorted())") }
        guard let stored = try await vault.token(for: key), fingerprint(stored.accessToken) == only, stored.accessToken != token.accessToken
        else { fail("the hosts do not hold the stored, new token") }
        if round > 0 {  // round 0 warms every process's connections
            spreads.append(Double(latest - start) / 1e6)
            roundTrips.append(roundTrip)
        }
    }
    for child in children {
        try child.1.close()
        child.0.waitUntilExit()
    }
    let medianSpread = spreads.sorted()[spreads.count / 2]
    let medianRoundTrip = roundTrips.sorted()[roundTrips.count / 2]
    results["cross_host_ms"] = spreads
    results["token_round_trip_ms"] = roundTrips
    goal("cross-host refresh vs round trip + 50 ms (median)", ratio: medianSpread / (medianRoundTrip + 50), bound: 1, atLeast: false,
        "\(hosts) hosts × \(processes) processes × 2 tasks, \(rounds) rounds: expiry → every process holds the new token: median \(fixed(medianSpread, 1)) ms, worst \(fixed(spreads.max() ?? 0, 1)) ms; token endpoint round trip: median \(fixed(medianRoundTrip, 1)) ms")
}

print("PostgreSQL backend (issue 16), server \(configuration), \(samples) samples per figure")
for line in report { print("  " + line) }
print(allMet ? "all goals MET" : "some goals MISSED")
if let path = option(arguments, "--json") {
    try JSONSerialization.data(withJSONObject: results, options: [.prettyPrinted, .sortedKeys]).write(to: URL(fileURLWithPath: path))
}
store.close()
runner.cancel()
