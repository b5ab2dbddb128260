// tokenvault-postgres-bench DATABASE_URL PASSWORD_FILE KEY_FILE [--rows N] [--samples K]
//
// Prints one JSON object: bare postgres-nio SELECT-by-key and upsert floors, PostgresStore get and
// set on the same server, their ratios, and get latency with 1,000 rows and with N rows (default
// 1,000,000; the filler rows are written by SQL, only the measured keys are sealed).
import Foundation
import Logging
import PostgresNIO
import TokenVault
import TokenVaultPostgres

#if canImport(Glibc)
import Glibc
#endif

func now() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

struct Figures {
    var latencies: [UInt64] = []
    var seconds: Double = 0
    var perSecond: Double { Double(latencies.count) / seconds }
    func percentile(_ q: Double) -> Double {
        let sorted = latencies.sorted()
        let rank = max(1, Int((q * Double(sorted.count)).rounded(.up)))
        return Double(sorted[rank - 1]) / 1000
    }
    var json: [String: Any] { ["count": latencies.count, "per_second": perSecond, "p50_us": percentile(0.5), "p99_us": percentile(0.99)] }
}

func measure(_ count: Int, _ body: (Int) async throws -> Void) async throws -> Figures {
    for index in 0..<min(50, count) { try await body(index) }  // warm-up
    var figures = Figures()
    let start = now()
    for index in 0..<count {
        let before = now()
        try await body(index)
        figures.latencies.append(now() - before)
    }
    figures.seconds = Double(now() - start) / 1e9
    return figures
}

let arguments = CommandLine.arguments
guard arguments.count >= 4 else {
    FileHandle.standardError.write(Data("usage: tokenvault-postgres-bench URL PASSWORD_FILE KEY_FILE [--rows N] [--samples K]\n".utf8))
    exit(64)
}
var rows = 1_000_000
var samples = 2_000
if let index = arguments.firstIndex(of: "--rows"), index + 1 < arguments.count { rows = Int(arguments[index + 1]) ?? rows }
if let index = arguments.firstIndex(of: "--samples"), index + 1 < arguments.count { samples = Int(arguments[index + 1]) ?? samples }

let configuration = try PostgresStore.Configuration(url: arguments[1], passwordFile: arguments[2])
let store = try await PostgresStore.open(configuration, keySource: .keyFile(arguments[3]))
var results: [String: Any] = ["server": "\(configuration)", "samples": samples]

// The bare client on the same server, with the same TLS: its own pool.
let password = try String(contentsOfFile: arguments[2], encoding: .utf8).trimmingCharacters(in: .newlines)
var bareConfiguration = PostgresClient.Configuration(
    host: configuration.host ?? "127.0.0.1", port: configuration.port, username: configuration.user, password: password,
    database: configuration.database,
    tls: configuration.tlsMode == .disable ? .disable : .require({
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .none
        return tls
    }()))
bareConfiguration.options.keepAliveBehavior = nil
let bare = PostgresClient(configuration: bareConfiguration)
let runner = Task { await bare.run() }
let logger = Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() })
try await bare.query("CREATE TABLE IF NOT EXISTS bench_bare (k bytea PRIMARY KEY, v bytea NOT NULL)", logger: logger)

let secret = Data(repeating: 0x61, count: 1200)  // about a stored OAuth token
let keys = try (0..<1000).map { try CredentialKey(service: "bench", account: "a\($0)") }
for key in keys { try await store.save(secret, for: key) }
let bareKeys = (0..<1000).map { Data("bench-key-\($0)-padding-to-32-bytes".utf8.prefix(32)) }
let sealedSize = Data(repeating: 0x62, count: secret.count + 60)
for key in bareKeys {
    try await bare.query("INSERT INTO bench_bare VALUES (\(key), \(sealedSize)) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v", logger: logger)
}

let bareSelect = try await measure(samples) { index in
    let rows = try await bare.query("SELECT v FROM bench_bare WHERE k = \(bareKeys[index % 1000])", logger: logger)
    for try await _ in rows {}
}
let storeGet = try await measure(samples) { index in _ = try await store.load(keys[index % 1000]) }
let bareUpsert = try await measure(samples) { index in
    try await bare.query(
        "INSERT INTO bench_bare VALUES (\(bareKeys[index % 1000]), \(sealedSize)) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
        logger: logger)
}
let storeSet = try await measure(samples) { index in try await store.save(secret, for: keys[index % 1000]) }
results["bare_select"] = bareSelect.json
results["get"] = storeGet.json
results["get_vs_bare_select"] = storeGet.perSecond / bareSelect.perSecond
results["bare_upsert"] = bareUpsert.json
results["set"] = storeSet.json
results["set_vs_bare_upsert"] = storeSet.perSecond / bareUpsert.perSecond
results["get_at_1000_rows"] = storeGet.json

// Filler rows up to `rows`, written by SQL: index entries like real ones (32-byte hashes).
let fillerStart = now()
try await bare.query(
    """
    INSERT INTO tokenvault_entries (row_hash, service_hash, version, sealed)
    SELECT decode(md5(i::text) || md5((i + 1)::text), 'hex'), decode(md5('s' || (i % 100)::text) || md5('t'), 'hex'), 1, \(sealedSize)
    FROM generate_series(1, \(max(0, rows - 1000))) AS i
    ON CONFLICT DO NOTHING
    """, logger: logger)
try await bare.query("ANALYZE tokenvault_entries", logger: logger)
results["filler_seconds"] = Double(now() - fillerStart) / 1e9
let bigGet = try await measure(samples) { index in _ = try await store.load(keys[(index * 7919) % 1000]) }
results["rows"] = rows
results["get_at_rows"] = bigGet.json
results["p50_ratio_rows_vs_1000"] = bigGet.percentile(0.5) / storeGet.percentile(0.5)
try await bare.query("DELETE FROM tokenvault_entries WHERE version = 1", logger: logger)
try await bare.query("DROP TABLE bench_bare", logger: logger)

let output = try JSONSerialization.data(withJSONObject: results, options: [.prettyPrinted, .sortedKeys])
FileHandle.standardOutput.write(output + Data("\n".utf8))
store.close()
runner.cancel()
