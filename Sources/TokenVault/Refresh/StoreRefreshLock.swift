// Owns: the seam through which a store shared by several hosts gives refreshes a lock of its own.

/// A store whose entries are shared by processes on several hosts, so that a host-local `flock`
/// cannot make refreshes single-flight: the store offers a lock of its own instead (PostgreSQL's
/// `pg_advisory_xact_lock`).
///
/// ``Vault`` runs the refresh flight's locked part (read again, refresh only if still needed,
/// write) inside ``withRefreshLock(on:timeout:_:)``, reading and writing through the store that
/// the closure receives, so that the re-read and the write happen under the lock and are
/// committed together with its release.
package protocol StoreRefreshLocking: CredentialStore {
    /// What makes two instances the same storage (for the in-process single flight): for example
    /// `postgres:<vault id>`.
    var refreshIdentity: String { get }

    /// Takes the cross-host lock on `key`, waiting at most `timeout` (then `timeout`), and runs
    /// `body` with a view of the store whose loads and saves run under that lock. What `body`
    /// saved is committed when `body` returns or throws (a stored refusal verdict must outlive the
    /// error it comes with), and the lock is released with the commit, or with the connection if
    /// this process dies.
    func withRefreshLock<Result: Sendable>(
        on key: CredentialKey, timeout: Duration, _ body: (any CredentialStore) async throws -> Result
    ) async throws -> Result
}
