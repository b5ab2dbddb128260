import Foundation
import Testing
@testable import TokenVault

/// The per-key `flock` and where its files live.
@Suite struct RefreshLockTests {
    /// A fresh private directory standing in for a vault's directory.
    private func scratchDirectory() throws -> String {
        let path = (NSTemporaryDirectory() as NSString).appendingPathComponent("tv-refresh-lock-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        return path
    }

    private func mode(_ path: String) throws -> Int {
        try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
    }

    @Test func lockFilesSitNextToTheVaultInAPrivateDirectoryAndHideKeyNames() throws {
        let root = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let directory = try RefreshLockDirectory.forVaultFile((root as NSString).appendingPathComponent("tokens.vault"))

        #expect(directory.path == (root as NSString).appendingPathComponent("tokens.vault.locks"))
        #expect(try mode(directory.path) == 0o700)
        let key = try CredentialKey(service: "github", account: "octocat")
        let path = try directory.lockFilePath(for: key)
        let name = (path as NSString).lastPathComponent
        #expect(name.wholeMatch(of: /[0-9a-f]{32}\.lock/) != nil, "got \(name)")
        #expect(!path.contains("github") && !path.contains("octocat"))
        // Stable across calls and processes, distinct per key.
        #expect(try directory.lockFilePath(for: key) == path)
        #expect(try directory.lockFilePath(for: CredentialKey(service: "github", account: "hubot")) != path)
        #expect(try directory.lockFilePath(for: CredentialKey(service: "githu", account: "boctocat")) != path)
    }

    @Test func aLockDirectoryOthersCanEnterIsRefused() throws {
        let root = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let locks = (root as NSString).appendingPathComponent("tokens.vault.locks")
        try FileManager.default.createDirectory(atPath: locks, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])

        let error = try #require(throws: VaultError.self) {
            try RefreshLockDirectory.forVaultFile((root as NSString).appendingPathComponent("tokens.vault"))
        }
        #expect(error.code == .insecurePermissions)
        #expect(try mode(locks) == 0o755, "an existing directory's mode is reported, never changed silently")
    }

    @Test func aSymbolicLinkInPlaceOfTheLockDirectoryIsRefused() throws {
        let root = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let elsewhere = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: elsewhere) }
        try FileManager.default.createSymbolicLink(
            atPath: (root as NSString).appendingPathComponent("tokens.vault.locks"), withDestinationPath: elsewhere)

        let error = try #require(throws: VaultError.self) {
            try RefreshLockDirectory.forVaultFile((root as NSString).appendingPathComponent("tokens.vault"))
        }
        #expect(error.code == .insecurePermissions)
    }

    @Test func theRuntimeDirectoryIsUsedWhenItIsPrivate() throws {
        let runtime = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: runtime) }

        let directory = try RefreshLockDirectory.forRuntime(scope: "secret-service", environment: ["XDG_RUNTIME_DIR": runtime])

        #expect(directory.path == (runtime as NSString).appendingPathComponent("token-vault/locks"))
        #expect(try mode((runtime as NSString).appendingPathComponent("token-vault")) == 0o700)
        #expect(try mode(directory.path) == 0o700)
    }

    @Test func withoutXDGRuntimeDirTheLoginSessionsRuntimeDirectoryIsShared() throws {
        // A cron job without XDG_RUNTIME_DIR and a desktop process with it must meet at the same
        // lock: both end up under /run/user/<uid> (here a stand-in for it).
        let system = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: system) }
        let withoutVariable = try RefreshLockDirectory.forRuntime(scope: "secret-service", environment: [:], systemRuntime: system)
        let withVariable = try RefreshLockDirectory.forRuntime(
            scope: "secret-service", environment: ["XDG_RUNTIME_DIR": system], systemRuntime: "/nonexistent")
        #expect(withoutVariable.path == (system as NSString).appendingPathComponent("token-vault/locks"))
        #expect(withVariable.path == withoutVariable.path)
        // A runtime directory others can enter is not used.
        #expect(chmod(system, 0o755) == 0)
        let refused = try RefreshLockDirectory.forRuntime(scope: "secret-service", environment: [:], systemRuntime: system)
        #expect(refused.path == "/tmp/token-vault-\(geteuid())/locks")
    }

    @Test func withoutARuntimeDirectoryLocksGoUnderTmpPerUser() throws {
        let directory = try RefreshLockDirectory.forRuntime(
            scope: "secret-service", environment: [:], systemRuntime: "/nonexistent-runtime-\(UUID().uuidString)")
        #expect(directory.path == "/tmp/token-vault-\(geteuid())/locks")
        #expect(try mode("/tmp/token-vault-\(geteuid())") == 0o700)
        #expect(try mode(directory.path) == 0o700)
    }

    @Test func aHeldLockTimesOutAndIsFreeOnceReleased() async throws {
        let root = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let path = (root as NSString).appendingPathComponent("held.lock")

        let holder = try await RefreshLock.acquire(path: path, timeout: .seconds(5))
        #expect(try mode(path) == 0o600)
        let clock = ContinuousClock()
        let start = clock.now
        let error = try await #require(throws: VaultError.self) {
            _ = try await RefreshLock.acquire(path: path, timeout: .milliseconds(300))
        }
        #expect(error.code == .timeout)
        #expect(clock.now - start >= .milliseconds(300))

        holder.release()
        let next = try await RefreshLock.acquire(path: path, timeout: .seconds(5))
        next.release()
    }

    @Test func aLockIsReleasedWhenItsOwnerGoesAway() async throws {
        let root = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let path = (root as NSString).appendingPathComponent("dropped.lock")

        do {
            _ = try await RefreshLock.acquire(path: path, timeout: .seconds(5))
        }
        let next = try await RefreshLock.acquire(path: path, timeout: .seconds(5))
        next.release()
    }

    @Test func aSymbolicLinkAsLockFileIsRefused() async throws {
        let root = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let target = (root as NSString).appendingPathComponent("target")
        try Data().write(to: URL(fileURLWithPath: target))
        let path = (root as NSString).appendingPathComponent("link.lock")
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)

        let error = try await #require(throws: VaultError.self) {
            _ = try await RefreshLock.acquire(path: path, timeout: .seconds(1))
        }
        #expect(error.code == .insecurePermissions)
    }
}
