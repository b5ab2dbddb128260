// The TokenVault side of Scripts/bench. Not a product and not installed: Benchmarks/bench.py runs
// it, one fresh process per measurement, and reads the one JSON object it prints on stdout.
//
//   tokenvault-bench w1 --backend file|secret-service --n N --service S --template T
//                       [--file PATH --key-file PATH]
//       W1: set N, get all in random order, overwrite all, delete all. For the Secret Service,
//       prints {"unavailable": message} when SecretServiceStore cannot be made.
//   tokenvault-bench scale-fill --file PATH --key-file PATH --n N --batch B --template T
//       writes N entries with saveAll in batches of B.
//   tokenvault-bench scale-measure --file PATH --key-file PATH --n N --gets G --sets S --template T
//       open time, G warm gets, S durable sets of new keys, file size and peak RSS.
//   tokenvault-bench decrypt-floor --file PATH --key-file PATH [--passes 3]
//       the crypto floor of an open: only authenticate and decrypt every record, already in memory.
//   tokenvault-bench floor --dir DIR --key-file PATH --blocks B --per-block K --template T [--size 600]
//       append + fdatasync and append + fsync latency on DIR's filesystem, interleaved in blocks
//       with durable sets into a file vault in DIR.
//   tokenvault-bench mp-writer --file PATH --key-file PATH --writer W --count C --template T
//       one of several writer processes: "ready", waits for a line on stdin, C durable sets.
//   tokenvault-bench count --file PATH --key-file PATH
//       the number of entries.
//   tokenvault-bench agent-load --socket PATH --clients C --seconds S --service X --account Y
//       C threads, each on one persistent connection to a running `vault agent`, get X/Y in a
//       loop for S seconds: gets per second and p50/p99 of one request (issue 30).
//   tokenvault-bench dpop --file PATH --key-file PATH --url URL --token-url URL --dpop-user NAME --rounds N [--seconds S]
//       (a Bearer token response on stdin) DPoP proofs/s in process, and a resource call with a
//       DPoP-bound token through each adapter (URLSession, AsyncHTTPClient) against the same with a
//       Bearer token (issue 32)
//   tokenvault-bench authorized --file PATH --key-file PATH --url URL --token-url URL --rounds N [--warmup W]
//       (a token response on stdin) an authorized request through the URLSession adapter against
//       the same request with the header set by hand (from freshToken each time, and from a token
//       read once), interleaved in one process (Benchmarks/refresh.py).
import Foundation
import TokenVault

/// `--name value` pairs after the command.
struct Options {
    private var values: [String: String] = [:]

    init(_ arguments: ArraySlice<String>) {
        var rest = arguments
        while let name = rest.popFirst() {
            guard name.hasPrefix("--"), let value = rest.popFirst() else { fail("expected --option value, got \(name)") }
            values[String(name.dropFirst(2))] = value
        }
    }

    func string(_ name: String) -> String {
        guard let value = values[name] else { fail("missing --\(name)") }
        return value
    }

    func int(_ name: String, default fallback: Int? = nil) -> Int {
        guard let text = values[name] else {
            guard let fallback else { fail("missing --\(name)") }
            return fallback
        }
        guard let value = Int(text), value >= 0 else { fail("--\(name) must be a count, not \(text)") }
        return value
    }

    var payloads: Payloads { Payloads(templatePath: string("template")) }
}

/// The message of an error, for the "unavailable" line: VaultError messages never hold secrets.
func message(of error: any Error) -> String {
    (error as? VaultError)?.message ?? String(describing: error)
}

let arguments = CommandLine.arguments
guard arguments.count >= 2 else { fail("usage: tokenvault-bench w1|scale-fill|scale-measure|decrypt-floor|floor|mp-writer|count …") }
let options = Options(arguments.dropFirst(2))

do {
    switch arguments[1] {
    case "w1":
        let store: any CredentialStore
        switch options.string("backend") {
        case "file":
            store = try await EncryptedFileStore.open(path: options.string("file"), keySource: .keyFile(options.string("key-file")))
        case "secret-service":
            do {
                store = try await SecretServiceStore.open()
            } catch {
                emitJSON(["unavailable": message(of: error)])
                exit(0)
            }
        case let other:
            fail("unknown backend \(other)")
        }
        emitJSON(try await Workloads.w1(store: store, service: options.string("service"), count: options.int("n"), payloads: options.payloads))
    case "scale-fill":
        emitJSON(try await Workloads.scaleFill(
            path: options.string("file"), keyFile: options.string("key-file"), count: options.int("n"),
            batch: max(1, options.int("batch")), payloads: options.payloads))
    case "scale-measure":
        emitJSON(try await Workloads.scaleMeasure(
            path: options.string("file"), keyFile: options.string("key-file"), count: options.int("n"),
            gets: options.int("gets"), sets: options.int("sets"), payloads: options.payloads))
    case "decrypt-floor":
        emitJSON(try Workloads.decryptFloor(
            path: options.string("file"), keyFile: options.string("key-file"), passes: options.int("passes", default: 3)))
    case "floor":
        emitJSON(try await Workloads.floor(
            directory: options.string("dir"), keyFile: options.string("key-file"), blocks: options.int("blocks"),
            perBlock: options.int("per-block"), size: options.int("size", default: 600), payloads: options.payloads))
    case "mp-writer":
        emitJSON(try await Workloads.multiProcessWriter(
            path: options.string("file"), keyFile: options.string("key-file"), writer: options.string("writer"),
            count: options.int("count"), payloads: options.payloads))
    case "authorized":
        guard let url = URL(string: options.string("url")), let tokenURL = URL(string: options.string("token-url")) else {
            fail("--url and --token-url must be URLs")
        }
        emitJSON(try await Authorized.run(
            path: options.string("file"), keyFile: options.string("key-file"), url: url,
            tokenResponse: FileHandle.standardInput.readDataToEndOfFile(), tokenEndpoint: tokenURL,
            rounds: options.int("rounds"), warmup: options.int("warmup", default: 20)))
    case "dpop":
        guard let url = URL(string: options.string("url")), let tokenURL = URL(string: options.string("token-url")) else {
            fail("--url and --token-url must be URLs")
        }
        emitJSON(try await DPoPBench.run(
            path: options.string("file"), keyFile: options.string("key-file"), url: url, tokenEndpoint: tokenURL,
            dpopUser: options.string("dpop-user"), bearerResponse: FileHandle.standardInput.readDataToEndOfFile(),
            rounds: options.int("rounds"), warmup: options.int("warmup", default: 20),
            seconds: Double(options.string("seconds")) ?? 2))
    case "count":
        emitJSON(try await Workloads.count(path: options.string("file"), keyFile: options.string("key-file")))
    case "agent-load":
        emitJSON(try AgentLoad.run(
            socket: options.string("socket"), clients: options.int("clients"), seconds: Double(options.string("seconds")) ?? 5,
            service: options.string("service"), account: options.string("account")))
    case let other:
        fail("unknown command \(other)")
    }
} catch {
    fail(message(of: error))
}
