// A test helper for the Secret Service backend, run as a real child process by
// Tests/TokenVaultTests/SecretService. It is not a product and not installed.
//
// The store always uses the process's own session bus, so a test that needs a keyring in a
// state the shared one must not be put in (locked, frozen, gone, with no default collection)
// starts a private bus and keyring and runs this helper with DBUS_SESSION_BUS_ADDRESS set to it.
//
// It reads one command per line on stdin and answers each with one JSON line on stdout:
//   open <timeout-ms> <prompt 0|1>   opens a SecretServiceStore
//   save <service> <account> <value> | load <service> <account> | delete <service> <account> | keys
//   save-json <service> <account> <value>  saves the value as a token (content type .json)
//   save-size <service> <account> <bytes> | load-size <service> <account> <bytes>
//                                    a patterned secret of that size; load-size reports "matches"
//   starve <service> <account>       four concurrent loads and a 10 ms ticker on the cooperative
//                                    pool; reports the loads' error codes, the ticks and the longest gap between them
//   vault <backend> <file> <key-file>  Vault.open with that backend; reports the backend and why
//   probe <timeout-ms>               SecretServiceStore.probe; reports its outcome and its elapsed time
//   probe-starve <timeout-ms>        eight concurrent probes and the same ticker; reports the
//                                    probes' outcomes, the ticks and the longest gap
// Every answer has "ok" and "elapsed_ms"; a failure has "code" and "message".
import Foundation
import TokenVault

import Glibc

func answer(_ object: [String: Any]) {
    guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else {
        fatalError("unencodable answer")
    }
    FileHandle.standardOutput.write(data + Data("\n".utf8))
}

func milliseconds(_ duration: Duration) -> Int {
    Int(duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)
}

/// Runs `body`, timing it, and answers with its result or its error.
@MainActor
func run(_ body: () async throws -> [String: Any]) async {
    let clock = ContinuousClock()
    let start = clock.now
    do {
        var result = try await body()
        result["ok"] = true
        result["elapsed_ms"] = milliseconds(clock.now - start)
        answer(result)
    } catch let error as VaultError {
        answer(["ok": false, "code": "\(error.code)", "message": error.message, "elapsed_ms": milliseconds(clock.now - start)])
    } catch {
        answer(["ok": false, "code": "unexpected", "message": "\(type(of: error))", "elapsed_ms": milliseconds(clock.now - start)])
    }
}

/// Bytes that differ by position, with NULs and non-UTF-8 among them, so a cut or shifted copy shows.
func pattern(_ count: Int) -> Data {
    Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ ($0 >> 8)) })
}

/// Runs `count` copies of `operation` at once, next to a ticker on the cooperative pool that
/// sleeps 10 ms at a time until every operation has finished. Returns the operations' results,
/// how often the ticker ticked, and the longest time between two ticks (counted from before the
/// operations start): a few tens of milliseconds when nothing blocks the pool, even on a loaded
/// machine, and about the operations' deadline when they hold its threads. The longest gap, not
/// the tick count, is what tests assert: machine load lowers the count but not the gap's order.
func alongsideTicker(
    count: Int, _ operation: @escaping @Sendable () async -> String
) async -> (results: [String], ticks: Int, longestGapMilliseconds: Int) {
    let clock = ContinuousClock()
    let start = clock.now
    let ticker = Task { () -> (Int, Duration) in
        var last = start
        var longest = Duration.zero
        var ticks = 0
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(10))
            let now = clock.now
            longest = max(longest, now - last)
            last = now
            ticks += 1
        }
        return (ticks, longest)
    }
    let results = await withTaskGroup(of: String.self) { group in
        for _ in 0..<count {
            group.addTask { await operation() }
        }
        var results: [String] = []
        for await result in group { results.append(result) }
        return results
    }
    ticker.cancel()
    let (ticks, longest) = await ticker.value
    return (results, ticks, milliseconds(longest))
}

var store: SecretServiceStore?

@MainActor
func requireStore() throws -> SecretServiceStore {
    guard let store else { throw VaultError(.invalidInput, "send 'open' first") }
    return store
}

while let line = readLine() {
    let words = line.split(separator: " ").map(String.init)
    guard let command = words.first else { continue }
    let arguments = Array(words.dropFirst())
    switch (command, arguments.count) {
    case ("open", 2):
        await run {
            let options = SecretServiceStore.Options(
                timeout: .milliseconds(Int(arguments[0]) ?? 10_000), unlockPrompt: arguments[1] == "1")
            store = try await SecretServiceStore.open(options: options)
            return [:]
        }
    case ("save", 3):
        await run {
            try await requireStore().save(Data(arguments[2].utf8), for: CredentialKey(service: arguments[0], account: arguments[1]))
            return [:]
        }
    case ("save-json", 3):
        await run {
            try await requireStore().save(
                Data(arguments[2].utf8), for: CredentialKey(service: arguments[0], account: arguments[1]), contentType: .json)
            return [:]
        }
    case ("save-size", 3):
        let secret = pattern(Int(arguments[2]) ?? 0)  // made before the clock starts
        await run {
            try await requireStore().save(secret, for: CredentialKey(service: arguments[0], account: arguments[1]))
            return [:]
        }
    case ("load-size", 3):
        await run {
            let value = try await requireStore().load(CredentialKey(service: arguments[0], account: arguments[1]))
            return ["matches": value == pattern(Int(arguments[2]) ?? 0), "bytes": value?.count ?? -1]
        }
    case ("load", 2):
        await run {
            let value = try await requireStore().load(CredentialKey(service: arguments[0], account: arguments[1]))
            return ["value": value.map { String(decoding: $0, as: UTF8.self) as Any } ?? NSNull()]
        }
    case ("delete", 2):
        await run {
            ["deleted": try await requireStore().delete(CredentialKey(service: arguments[0], account: arguments[1]))]
        }
    case ("keys", 0):
        await run {
            ["keys": try await requireStore().keys().map(\.description)]
        }
    case ("starve", 2):
        await run {
            let store = try requireStore()
            let key = try CredentialKey(service: arguments[0], account: arguments[1])
            let (codes, ticks, longestGap) = await alongsideTicker(count: 4) {
                do {
                    _ = try await store.load(key)
                    return "ok"
                } catch let error as VaultError {
                    return "\(error.code)"
                } catch {
                    return "unexpected"
                }
            }
            return ["codes": codes, "ticks": ticks, "longest_gap_ms": longestGap]
        }
    case ("probe", 1):
        await run {
            let probe = await SecretServiceStore.probe(timeout: .milliseconds(Int(arguments[0]) ?? 2000))
            return ["outcome": probe.outcome.rawValue, "can_prompt": probe.canPrompt, "detail": probe.detail,
                    "probe_ms": milliseconds(probe.elapsed)]
        }
    case ("probe-starve", 1):
        await run {
            let timeout = Duration.milliseconds(Int(arguments[0]) ?? 2000)
            let (outcomes, ticks, longestGap) = await alongsideTicker(count: 8) {
                await SecretServiceStore.probe(timeout: timeout).outcome.rawValue
            }
            return ["outcomes": outcomes, "ticks": ticks, "longest_gap_ms": longestGap]
        }
    case ("vault", 3):
        await run {
            guard let backend = VaultConfiguration.Backend(rawValue: arguments[0]) else {
                throw VaultError(.invalidInput, "unknown backend \(arguments[0])")
            }
            let vault = try await Vault.open(VaultConfiguration(
                backend: backend, filePath: arguments[1], keySource: .keyFile(arguments[2])))
            return [
                "backend": vault.selection.backend.rawValue, "reason": vault.selection.reason,
                "probe": vault.selection.probe.map { $0.outcome.rawValue as Any } ?? NSNull(),
            ]
        }
    default:
        answer(["ok": false, "code": "usage", "message": "unknown command: \(line)", "elapsed_ms": 0])
    }
}
