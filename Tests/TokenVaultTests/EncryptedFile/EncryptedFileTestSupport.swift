import Foundation
import Testing
@testable import TokenVault
@testable import TokenVaultTestSupport

import Glibc

enum FileTestSupport {
    /// Cheap Argon2id for tests that do not measure the KDF.
    static let cheap = EncryptedFileStore.Options(kdf: .minimum)

    /// Writes `bytes` to `path` with `mode`.
    static func write(_ bytes: [UInt8], to path: String, mode: Int = 0o600) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
    }

    static func read(_ path: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    /// A fresh random 32-byte key file, raw, at `dir/name`.
    static func keyFile(in dir: TemporaryDirectory, name: String = "key") throws -> String {
        try dir.keyFile(name)
    }

    static func passphraseFile(_ passphrase: String, in dir: TemporaryDirectory, name: String = "passphrase") throws -> String {
        let path = dir.file(name)
        try write(Array((passphrase + "\n").utf8), to: path)
        return path
    }

    static func open(
        _ path: String, _ source: VaultConfiguration.KeySource, options: EncryptedFileStore.Options = cheap
    ) async throws -> EncryptedFileStore {
        try await EncryptedFileStore.open(path: path, keySource: source, options: options)
    }

    static func key(_ account: String, service: String = "svc") -> CredentialKey {
        try! CredentialKey(service: service, account: account)
    }

    /// Every entry of a store, for comparing whole contents.
    static func contents(_ store: EncryptedFileStore) async throws -> [CredentialKey: Data] {
        var result: [CredentialKey: Data] = [:]
        for key in try await store.keys() {
            result[key] = try await store.load(key)
        }
        return result
    }

    /// The code of the VaultError that `body` throws, or nil if it does not throw.
    static func errorCode(_ body: () async throws -> Void) async -> VaultError? {
        do {
            try await body()
            return nil
        } catch let error as VaultError {
            return error
        } catch {
            Issue.record("unexpected error type \(type(of: error))")
            return nil
        }
    }

    static func mode(of path: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        return (attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1
    }

    // MARK: The helper process

    /// `vault-file-stress` (Tests/Helpers), next to the test bundle.
    static var helperPath: String {
        get throws { try Products.executable("vault-file-stress") }
    }

    /// The value the helper writes for `service`/`index` (same formula as the helper).
    static func helperValue(service: String, index: Int) -> Data {
        Data(String(repeating: "\(service):\(index);", count: 600 / (service.count + 8) + 1).utf8.prefix(600))
    }

    static func helper(_ arguments: [String]) throws -> (Process, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try helperPath)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.standardError
        try process.run()
        return (process, output)
    }
}

/// Reads a child's stdout line by line as it arrives.
final class LineReader: @unchecked Sendable {
    private let handle: FileHandle
    private var buffer = Data()

    init(_ pipe: Pipe) { handle = pipe.fileHandleForReading }

    /// The next complete line, or nil at end of file. Blocks.
    func nextLine() -> String? {
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                buffer.removeSubrange(buffer.startIndex...newline)
                return line
            }
            let chunk = handle.availableData
            if chunk.isEmpty { return nil }
            buffer.append(chunk)
        }
    }

    /// All remaining lines until end of file.
    func remainingLines() -> [String] {
        var lines: [String] = []
        while let line = nextLine() { lines.append(line) }
        return lines
    }

    // The same, waiting on a thread of their own: a read blocked on Swift's cooperative pool
    // (two threads on a 2-core machine) stalls every other test of the process, and time-bound
    // tests elsewhere failed for it.

    func nextLine() async -> String? {
        await offPoolNoThrow { self.nextLine() }
    }

    func remainingLines() async -> [String] {
        await offPoolNoThrow { self.remainingLines() }
    }
}

extension Process {
    /// `waitUntilExit()` on a thread of its own (see ``LineReader``).
    func exited() async {
        await offPoolNoThrow { self.waitUntilExit() }
    }
}
