import FoundationEssentials

extension Vault {
    /// Runs `body` holding `key`'s refresh lock, the one that ``freshToken(for:leeway:timeout:client:)``
    /// takes, so that a compare-and-write cannot interleave with another process's refresh.
    ///
    /// The lock is the one the store's ``CredentialStore/refreshLockPlacement()`` names: lock files
    /// next to the vault file for the file backend, under the runtime directory for the Secret
    /// Service, the store's own lock for PostgreSQL; a ``MemoryStore`` needs none.
    package func withEntryLock<Result: Sendable>(
        _ key: CredentialKey, timeout: Duration, _ body: () async throws -> Result
    ) async throws -> Result {
        var lock: RefreshLock?
        switch try store.refreshLockPlacement().lock {
        case .store(let shared):
            // The cross-host lock of the store's refreshes; body reads and writes as usual.
            return try await shared.withRefreshLock(on: key, timeout: timeout) { _ in try await body() }
        case .files(let directory):
            lock = try await RefreshLock.acquire(path: directory.lockFilePath(for: key), timeout: timeout)
        case .none:
            break
        }
        defer { lock?.release() }
        return try await body()
    }
}
