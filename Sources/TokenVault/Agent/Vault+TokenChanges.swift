// Owns: watching one entry for a new token that another process (the agent's refresh ahead, a
// `vault get --fresh`, a login) saved.
import FoundationEssentials

extension Vault {
    /// Yields the token stored under `key` each time it changes: refreshed by the agent or by
    /// another process, replaced by a login or `vault set`, or removed (`nil`). The first element
    /// is the token as stored now.
    ///
    /// ```swift
    /// for try await token in vault.tokenChanges(for: key) {
    ///     client.updateAuthorization(token?.accessToken)
    /// }
    /// ```
    ///
    /// The store is read every `interval`: cheap for the file vault (which notices another
    /// process's write with an inotify watch or a `stat`), a D-Bus call for the Secret Service. A
    /// change is a new access token, expiry or refresh state; a read that fails ends the stream
    /// with its error. The stream ends when the task iterating it is cancelled.
    public func tokenChanges(for key: CredentialKey, interval: Duration = .seconds(1)) -> AsyncThrowingStream<OAuthToken?, any Error> {
        let vault = self
        return AsyncThrowingStream { continuation in
            let task = Task {
                var last: (access: String, expiry: Date?)?? = .none
                do {
                    while !Task.isCancelled {
                        let token = try await vault.token(for: key)
                        let seen = token.map { (access: $0.accessToken, expiry: $0.expiresAt) }
                        let changed: Bool
                        switch (last, seen) {
                        case (.none, _): changed = true
                        case (.some(nil), nil): changed = false
                        case (.some(let old?), let new?): changed = old.access != new.access || old.expiry != new.expiry
                        default: changed = true
                        }
                        if changed {
                            continuation.yield(token)
                            last = .some(seen)
                        }
                        try await Task.sleep(for: interval)
                    }
                    continuation.finish()
                } catch is CancellationError {
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}
