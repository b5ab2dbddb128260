import Foundation
public import TokenVault

import Glibc

/// The property of FuzzVaultFile: arbitrary bytes as a vault file (see ``VaultFileInput``),
/// opened with a fixed key file through the public API.
///
/// - No input crashes, hangs or allocates without bound.
/// - A file that does not open throws a ``VaultError`` whose code says the file is bad:
///   `emptyFile`, `notAVault`, `truncated`, `unsupportedVersion`, `integrityFailure` or
///   `authenticationFailed`; and `invalidInput` only for a passphrase header whose memlimit is
///   above the process's limit (step 6 of the FileFormat article).
/// - A file that opens can be listed and every listed entry read; a write to it succeeds, and
///   the file then reopens with the old entries plus the new one; a compaction keeps exactly
///   those entries.
public final class VaultFileProperty: Sendable {
    public enum Outcome: Sendable, Equatable {
        /// The file opened and held this many entries.
        case opened(entries: Int)
        case rejected(VaultError.Code)
    }

    public let directory: String
    let vaultPath: String
    let keyPath: String

    static let rejectionCodes: [VaultError.Code] = [
        .emptyFile, .notAVault, .truncated, .unsupportedVersion, .integrityFailure, .authenticationFailed,
    ]
    static let marker = try! CredentialKey(service: "fuzz-harness", account: "marker")
    /// Computed, not stored: LeakSanitizer cannot see a `Data` in a global (its pointer carries
    /// enum tag bits), so a stored one would be reported as a leak.
    static var markerSecret: Data { Data("written after open".utf8) }

    /// Uses `directory` (which must exist and be private) for the vault file, its lock file and
    /// the key file, which it writes now.
    public init(directory: String) throws {
        self.directory = directory
        vaultPath = directory + "/vault"
        keyPath = directory + "/key"
        try Self.write(VaultFileInput.key, to: keyPath)
    }

    /// - Throws: ``PropertyViolation`` only.
    public func check(_ input: [UInt8]) async throws -> Outcome {
        let file = VaultFileInput.fileBytes(input)
        do {
            try Self.write(file, to: vaultPath)
        } catch {
            throw PropertyViolation("the harness could not write the vault file: \(error)")
        }

        let opened: EncryptedFileStore
        do {
            opened = try await open()
        } catch let error as VaultError {
            guard Self.rejectionCodes.contains(error.code)
                || (error.code == .invalidInput && file.count >= 168 && file[16] == 2)
            else {
                throw PropertyViolation("opening threw \(error.code), not a bad-file code: \(error.message)")
            }
            return .rejected(error.code)
        } catch {
            throw PropertyViolation("opening threw \(type(of: error)), not a VaultError")
        }

        // It opened: it must be usable, and keep what it holds.
        let contents = try await step("listing and reading it") { try await Self.contents(of: opened) }
        var expected = contents
        expected[Self.marker] = Self.markerSecret
        try await step("writing to it") {
            try await opened.save(Self.markerSecret, for: Self.marker)
            let held = try await Self.contents(of: opened)
            guard held == expected else { throw PropertyViolation("after a write it holds other entries than before") }
        }
        try await step("reopening it after a write") {
            let held = try await Self.contents(of: open())
            guard held == expected else { throw PropertyViolation("reopened after a write, it holds other entries") }
        }
        try await step("compacting it") {
            let store = try await open()
            try await store.compact()
            guard try await Self.contents(of: store) == expected else {
                throw PropertyViolation("after compaction it holds other entries")
            }
        }
        try await step("reopening it after compaction") {
            let held = try await Self.contents(of: open())
            guard held == expected else { throw PropertyViolation("reopened after compaction, it holds other entries") }
        }
        return .opened(entries: contents.count)
    }

    private func open() async throws -> EncryptedFileStore {
        try await EncryptedFileStore.open(
            path: vaultPath, keySource: .keyFile(keyPath), options: EncryptedFileStore.Options(createIfMissing: false))
    }

    private func step<Value>(_ what: String, _ body: () async throws -> Value) async throws -> Value {
        do {
            return try await body()
        } catch let violation as PropertyViolation {
            throw PropertyViolation("\(what): \(violation.message)")
        } catch let error as VaultError {
            throw PropertyViolation("a vault that opened failed when \(what): \(error.code): \(error.message)")
        } catch {
            throw PropertyViolation("a vault that opened failed when \(what) with \(type(of: error))")
        }
    }

    /// Every entry: each listed key must read back, and listing one service lists a subset.
    static func contents(of store: EncryptedFileStore) async throws -> [CredentialKey: Data] {
        let keys = try await store.keys()
        guard keys == keys.sorted(), Set(keys).count == keys.count else {
            throw PropertyViolation("the keys are not listed sorted and unique")
        }
        var result: [CredentialKey: Data] = [:]
        for key in keys {
            guard let secret = try await store.load(key) else {
                throw PropertyViolation("a listed key reads back as absent")
            }
            result[key] = secret
        }
        if let service = keys.first?.service {
            let some = try await store.keys(service: service)
            guard some == keys.filter({ $0.service == service }) else {
                throw PropertyViolation("listing one service does not give that service's keys")
            }
        }
        return result
    }

    /// Writes `bytes` to `path` (`0600`), replacing what it held.
    static func write(_ bytes: [UInt8], to path: String) throws {
        let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw PropertyViolation("open \(path): errno \(errno)") }
        defer { Glibc.close(fd) }
        guard fchmod(fd, 0o600) == 0 else { throw PropertyViolation("fchmod \(path): errno \(errno)") }
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw PropertyViolation("write \(path): errno \(errno)") }
            written += count
        }
    }
}
