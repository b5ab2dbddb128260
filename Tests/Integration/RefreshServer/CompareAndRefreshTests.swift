#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
// @testable only for RefreshLockDirectory: the test holds the documented lock file itself.
@testable import TokenVault

import Glibc

/// A value-type store over one MemoryStore: it has no identity, so every call gets a refresh
/// coordinator of its own and callers meet only at the per-key lock, as separate processes do.
struct SeparateCallersStore: CredentialStore {
    let inner: MemoryStore
    var backend: BackendKind { .custom("compare-test") }
    func load(_ key: CredentialKey) async throws -> Data? { await inner.load(key) }
    func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) async throws {
        await inner.save(secret, for: key, contentType: contentType)
    }
    func delete(_ key: CredentialKey) async throws -> Bool { await inner.delete(key) }
    func keys(service: String?) async throws -> [CredentialKey] { await inner.keys(service: service) }
}

@Suite struct CompareAndRefreshTests {
    /// How many of this process's descriptors have `path` open.
    private func openCount(_ path: String) -> Int {
        let directory = "/proc/self/fd"
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return entries.filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/\($0)")) == path }.count
    }

    @Test func callersThatMeetOnlyAtTheLockRefreshOnceAfterA401() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("compare-lock")
        let vault = Vault(store: SeparateCallersStore(inner: MemoryStore()))
        let key = try CredentialKey(service: uniqueName("tv-compare"), account: "acct")
        let token = try await server.login(user: user)
        try await vault.saveToken(token, for: key, registration: try server.publicClient())

        // Hold the key's lock until all eight callers have passed the first check and wait on it.
        let lockFile = try RefreshLockDirectory.forRuntime(scope: "backend:compare-test").lockFilePath(for: key)
        let descriptor = open(lockFile, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        try #require(descriptor >= 0 && flock(descriptor, LOCK_EX) == 0)
        var released = false
        defer { if !released { close(descriptor) } }
        let callers = Task {
            try await withThrowingTaskGroup(of: OAuthToken.self) { group in
                for _ in 0..<8 {
                    group.addTask { try await vault.refreshAfterRejection(of: token.accessToken, for: key) }
                }
                return try await group.reduce(into: [OAuthToken]()) { $0.append($1) }
            }
        }
        try await eventually("eight callers waiting on the lock") { openCount(lockFile) == 9 }
        close(descriptor)
        released = true
        let results = try await callers.value

        let stored = try #require(try await vault.token(for: key))
        #expect(stored.accessToken != token.accessToken)
        #expect(Set(results.map(\.accessToken)) == [stored.accessToken], "every caller got the one new token")
        #expect(try await server.stats(user: user).refreshRequests == 1, "the re-check under the lock stopped seven refreshes")
    }
}
#endif
