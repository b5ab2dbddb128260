// Owns: the seam through which a store whose refresh writes commit with its lock writes the
// refresh journal apart from them.
package import FoundationEssentials

/// The view a ``StoreRefreshLocking`` store gives under its lock, when what that view saves is
/// committed only with the lock's release (PostgreSQL: one transaction holding
/// `pg_advisory_xact_lock`). The refresh journal ("this refresh token is being presented") must
/// outlive a process killed during the token request, so it cannot be one of those writes: the
/// view commits it at once, apart from its transaction, where every host sees it.
package protocol RefreshJournalWriting: CredentialStore {
    /// Commits `entry` (a ``StoredEntry``'s stored form holding the journal) for `key` now, before
    /// the token request leaves, and durably: visible to every process and host, whatever becomes
    /// of the lock's transaction. It is fenced: it replaces only the row the view read under its
    /// lock (never a newer token another writer saved since), and only while the lock is still
    /// held. Later saves through the view replace it as usual.
    ///
    /// - Throws: ``VaultError``, and then nothing was written and the request must not leave.
    func commitJournal(_ entry: Data, for key: CredentialKey) async throws
}
