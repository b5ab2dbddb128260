import Foundation
import Testing
@testable import TokenVault

#if canImport(Glibc)
import Glibc
#endif

/// A private scratch directory (0700) for one test, removed when the test ends.
final class TemporaryDirectory: @unchecked Sendable {
    let path: String

    init() throws {
        var base = NSTemporaryDirectory()
        while base.count > 1 && base.hasSuffix("/") { base.removeLast() }
        var template = Array((base + "/tokenvault-file-test.XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw VaultError(.io, "mkdtemp failed")
        }
        path = String(cString: made)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)  // cleanup of a scratch dir, not a vault write
    }

    func file(_ name: String) -> String { path + "/" + name }
}

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
        let path = dir.file(name)
        var key = [UInt8](repeating: 0, count: 32)
        for index in key.indices { key[index] = UInt8.random(in: 0...255) }
        try write(key, to: path)
        return path
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

    /// `vault-file-stress`, which `swift build` puts next to the test bundle.
    static var helperPath: String {
        get throws {
            let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            var directory = executable.deletingLastPathComponent()
            // The test bundle may be a directory (…/TokenVaultPackageTests.xctest/…) on some setups.
            for _ in 0..<4 {
                let candidate = directory.appendingPathComponent("vault-file-stress").path
                if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
                directory = directory.deletingLastPathComponent()
            }
            throw VaultError(.io, "vault-file-stress not found near \(executable.path); run `swift build --build-tests` first")
        }
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
}
