import Foundation

extension Vault {
    /// Runs `body` holding `key`'s refresh lock, the one that ``freshToken(for:leeway:timeout:client:)``
    /// takes, so that a compare-and-write cannot interleave with another process's refresh.
    ///
    /// The lock files are where the refresh flight puts them: next to the vault file for the file
    /// backend, under the runtime directory otherwise; a ``MemoryStore`` needs none. (This repeats
    /// the flight's choice of directory, which is private to it.)
    func withEntryLock<Result: Sendable>(
        _ key: CredentialKey, timeout: Duration, _ body: () async throws -> Result
    ) async throws -> Result {
        let directory: RefreshLockDirectory?
        switch store.backendName {
        case "memory" where store is MemoryStore:
            directory = nil
        case "file":
            guard let path = selection.filePath ?? (store as? EncryptedFileStore)?.path else {
                throw VaultError(.invalidInput, "The vault file's path is unknown; open the vault with Vault.open(_:).")
            }
            directory = try RefreshLockDirectory.forVaultFile(path)
        case "secret-service":
            directory = try RefreshLockDirectory.forRuntime(scope: "secret-service")
        default:
            directory = try RefreshLockDirectory.forRuntime(scope: "backend:\(store.backendName)")
        }
        var lock: RefreshLock?
        if let directory {
            lock = try await RefreshLock.acquire(path: directory.lockFilePath(for: key), timeout: timeout)
        }
        defer { lock?.release() }
        return try await body()
    }
}
