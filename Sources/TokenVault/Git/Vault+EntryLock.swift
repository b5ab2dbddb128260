import Foundation

extension Vault {
    /// Runs `body` holding `key`'s refresh lock, the one that ``freshToken(for:leeway:timeout:client:)``
    /// takes, so that a compare-and-write cannot interleave with another process's refresh.
    ///
    /// The lock files are where the refresh flight puts them (``refreshLockPlacement()``): next to
    /// the vault file for the file backend, under the runtime directory otherwise; a
    /// ``MemoryStore`` needs none.
    func withEntryLock<Result: Sendable>(
        _ key: CredentialKey, timeout: Duration, _ body: () async throws -> Result
    ) async throws -> Result {
        if let shared = store as? any StoreRefreshLocking {
            // The cross-host lock of the store's refreshes; body reads and writes as usual.
            return try await shared.withRefreshLock(on: key, timeout: timeout) { _ in try await body() }
        }
        let directory = try refreshLockPlacement().lockDirectory
        var lock: RefreshLock?
        if let directory {
            lock = try await RefreshLock.acquire(path: directory.lockFilePath(for: key), timeout: timeout)
        }
        defer { lock?.release() }
        return try await body()
    }
}
