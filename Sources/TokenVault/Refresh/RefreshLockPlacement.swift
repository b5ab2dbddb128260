// Owns: what a store tells the refresh flight about where its refreshes meet.
import FoundationEssentials

/// Where the refreshes of a store's entries meet, so that one refresh happens per expiry: a
/// requirement of ``CredentialStore`` (``CredentialStore/refreshLockPlacement()``).
///
/// Tasks of one process that reach the same storage share one refresh per key; processes meet on
/// a per-key lock file (`flock`), or on the store's own lock when the store spans hosts
/// (PostgreSQL's advisory locks). The refresh flight (``Vault/freshToken(for:leeway:timeout:client:)``)
/// and every compare-and-write that must not interleave with it (the git credential helper) take
/// the lock this placement names; nothing asks which backend the store is.
public struct RefreshLockPlacement: Sendable {
    /// The lock that keeps processes apart.
    enum Lock: Sendable {
        /// None: only this process can see the store.
        case none
        /// A `flock`ed file per key in this directory.
        case files(RefreshLockDirectory)
        /// The store's own lock, held across hosts.
        case store(any StoreRefreshLocking)
    }

    /// What makes two store instances the same storage, for the single flight within a process.
    let identity: RefreshStoreIdentity
    let lock: Lock

    /// Whether the lock keeps refreshes of other processes out (every placement but
    /// ``thisProcessOnly(_:)``).
    public var spansProcesses: Bool {
        if case .none = lock { return false }
        return true
    }

    /// Whether the lock also keeps out processes on other hosts that share the store.
    public var spansHosts: Bool {
        if case .store = lock { return true }
        return false
    }

    /// For a store that only this process can see (``MemoryStore``): tasks share one refresh per
    /// key, and no lock file is needed.
    public static func thisProcessOnly(_ store: AnyObject) -> RefreshLockPlacement {
        RefreshLockPlacement(identity: .object(store), lock: .none)
    }

    /// For a store that several processes of this host may share: a lock file per key in the
    /// user's runtime directory (`$XDG_RUNTIME_DIR/token-vault/locks/`, `0700`), its names
    /// hashed with `scope`.
    ///
    /// - Parameters:
    ///   - scope: separates this store's lock files from other stores' (the backend's name, say).
    ///   - identity: a name that every instance reaching the same storage shares, so that tasks
    ///     of this process meet too; `nil` keeps in-process flights per instance (`instance`).
    ///   - instance: the store, when it is a class or an actor and `identity` is `nil`.
    /// - Throws: ``VaultError`` `io` when no private runtime directory can be made.
    public static func runtimeLockFiles(
        scope: String, identity: String? = nil, instance: AnyObject? = nil
    ) throws -> RefreshLockPlacement {
        let directory = try RefreshLockDirectory.forRuntime(scope: scope)
        let storeIdentity: RefreshStoreIdentity =
            if let identity { .named(identity) } else if let instance { .object(instance) } else { .none }
        return RefreshLockPlacement(identity: storeIdentity, lock: .files(directory))
    }

    /// Lock files beside the vault file at `path` (`tokens.vault.locks/`), so that every path that
    /// reaches one vault meets at the same locks.
    static func besideVaultFile(_ path: String) throws -> RefreshLockPlacement {
        RefreshLockPlacement(
            identity: .named("file:\(PathText.standardized(path))"), lock: .files(try .forVaultFile(path)))
    }

    /// The store's own lock, which spans hosts.
    package static func storeLock(_ store: any StoreRefreshLocking) -> RefreshLockPlacement {
        RefreshLockPlacement(identity: .named(store.refreshIdentity), lock: .store(store))
    }
}
