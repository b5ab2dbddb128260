// A test helper for the encrypted file backend, run as a real child process by
// Tests/TokenVaultTests/EncryptedFile. It is not a product and not installed.
//
//   vault-file-stress write <vault> <key-file> <service> <count>   count < 0: forever
//       saves <service>/<i> = value(service, i) for i in 0..<count, printing "ack <i>"
//       after each save has returned (is durable).
//   vault-file-stress cycle <vault> <key-file> <service> <slots> <start>
//       forever, for i from <start>: saves <service>/<i % slots> = value(service, i), printing
//       "ack <i>"; compacts
//       whenever 4 KiB of dead records outweigh the live ones, so a kill can land mid-compaction.
//   vault-file-stress wait-for <vault> <key-file> <service>[,<service>…] <count>
//       opens once, prints "opened", then polls keys(service:) of each service until each lists
//       <count> keys, checks every value, prints "seen <count>".
//   vault-file-stress fill <vault> <key-file> <file-size-limit>
//       sets RLIMIT_FSIZE, ignores SIGXFSZ and saves until a save fails; prints "ack <i>"
//       per save and "error <code>" for the failure.
//   vault-file-stress open-rss <vault> <key-file> <warm-up-vault>
//       opens <warm-up-vault> first (so that libsodium, Dispatch and the runtime are set up), then
//       prints "rss <peak KiB before> <peak KiB after> <entries>" around opening <vault>
//       (VmHWM from /proc/self/status: the peak resident set, as the benchmark's ru_maxrss).
import Foundation
import TokenVault

import Glibc

/// Writes one line to stdout at once, unbuffered, so the parent sees every acknowledgement.
func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func value(service: String, index: Int) -> Data {
    // About 600 bytes, different for every key, so a mixed-up record shows.
    Data(String(repeating: "\(service):\(index);", count: 600 / (service.count + 8) + 1).utf8.prefix(600))
}

/// VmHWM, the peak resident set size of this process, in KiB.
func peakResidentKiB() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
        let kib = Int(line.split(separator: " ").dropFirst().first ?? "")
    else { fail("cannot read VmHWM from /proc/self/status") }
    return kib
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data((message + "\n").utf8))
    exit(2)
}

let arguments = CommandLine.arguments
guard arguments.count >= 4 else { fail("usage: vault-file-stress write|wait-for|fill <vault> <key-file> …") }
let command = arguments[1]
let vaultPath = arguments[2]
let keySource = VaultConfiguration.KeySource.keyFile(arguments[3])

do {
    switch command {
    case "write":
        guard arguments.count == 6, let count = Int(arguments[5]) else { fail("write <vault> <key> <service> <count>") }
        let service = arguments[4]
        let store = try await EncryptedFileStore.open(path: vaultPath, keySource: keySource)
        var index = 0
        while count < 0 || index < count {
            try await store.save(value(service: service, index: index), for: CredentialKey(service: service, account: "\(index)"))
            emit("ack \(index)")
            index += 1
        }
    case "cycle":
        guard arguments.count == 7, let slots = Int(arguments[5]), slots > 0, let start = Int(arguments[6]) else {
            fail("cycle <vault> <key> <service> <slots> <start>")
        }
        let service = arguments[4]
        let store = try await EncryptedFileStore.open(
            path: vaultPath, keySource: keySource, options: .init(compactionMinimumDeadBytes: 4096))
        var index = start
        while true {
            try await store.save(value(service: service, index: index), for: CredentialKey(service: service, account: "\(index % slots)"))
            emit("ack \(index)")
            index += 1
        }
    case "wait-for":
        guard arguments.count == 6, let count = Int(arguments[5]) else { fail("wait-for <vault> <key> <service> <count>") }
        let services = arguments[4].split(separator: ",").map(String.init)
        let store = try await EncryptedFileStore.open(path: vaultPath, keySource: keySource)
        emit("opened")
        let deadline = Date().addingTimeInterval(120)
        for service in services {
            while try await store.keys(service: service).count < count {
                if Date() > deadline { fail("timed out waiting for \(count) keys") }
                try await Task.sleep(for: .milliseconds(5))
            }
            for index in 0..<count {
                let loaded = try await store.load(CredentialKey(service: service, account: "\(index)"))
                guard loaded == value(service: service, index: index) else { fail("wrong value for \(service)/\(index)") }
            }
        }
        emit("seen \(count)")
    case "fill":
        guard arguments.count == 5, let limit = UInt64(arguments[4]) else { fail("fill <vault> <key> <limit>") }
        signal(SIGXFSZ, SIG_IGN)
        var rlim = rlimit(rlim_cur: rlim_t(limit), rlim_max: rlim_t(limit))
        guard setrlimit(Int32(RLIMIT_FSIZE.rawValue), &rlim) == 0 else { fail("setrlimit failed") }
        let store = try await EncryptedFileStore.open(path: vaultPath, keySource: keySource)
        var index = 0
        while true {
            do {
                try await store.save(value(service: "fill", index: index), for: CredentialKey(service: "fill", account: "\(index)"))
            } catch let error as VaultError {
                emit("error \(error.code)")
                FileHandle.standardError.write(Data((error.message + "\n").utf8))
                break
            }
            emit("ack \(index)")
            index += 1
            if index > 100_000 { fail("the file size limit never hit") }
        }
    case "open-rss":
        guard arguments.count == 5 else { fail("open-rss <vault> <key> <warm-up-vault>") }
        let warmUp = try await EncryptedFileStore.open(path: arguments[4], keySource: keySource)
        _ = try await warmUp.keys(service: nil)
        let before = peakResidentKiB()
        let store = try await EncryptedFileStore.open(
            path: vaultPath, keySource: keySource, options: .init(createIfMissing: false))
        let after = peakResidentKiB()
        emit("rss \(before) \(after) \(try await store.keys(service: nil).count)")
    default:
        fail("unknown command \(command)")
    }
} catch let error as VaultError {
    fail("error \(error.code): \(error.message)")
} catch {
    fail("error \(error)")
}
