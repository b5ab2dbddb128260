// Owns: which gnome-keyring item holds each key, as one connection learned it, and when to stop
// trusting that (the provider's item signals). Nothing else: the calls that use it are in
// SecretServiceConnection.
internal import CLibSecret

/// Which item holds each key, learned from this connection's own searches and writes, and
/// trusted only while gnome-keyring's signals show that no other client created, deleted or
/// changed an item since. With it, a get, an overwrite and a delete of a key the connection has
/// seen skip `SearchItems` (on gnome-keyring a search walks every item: 4.4 ms in a keyring of
/// 1,000), and each reader still sees one value per key:
///
/// - gnome-keyring emits `ItemCreated`, `ItemDeleted` or `ItemChanged` (attributes, label) on a
///   collection for every such change, whoever made it; `SetSecret` emits nothing, and changes
///   no attribute, so an item found for a key stays that key's item.
/// - For a service whose items it has all seen (one search by service), it also knows which
///   accounts have no item, so a new key of that service is made without a search; and it keeps
///   the default collection's lock, which gnome-keyring reports with `CollectionChanged`.
/// - A signal that this connection's own call explains (``expect(_:_:)``, registered before the
///   signals are dispatched) is consumed; any other one empties the cache and moves
///   ``foreignChanges``, and an operation that used a cached path and sees it move does what it
///   would have done after a search (see SecretServiceConnection).
/// - Signals are dispatched only between calls, on the Secret Service thread's main context
///   (libsecret's sync calls run a private one). The provider emits a change's signal before it
///   answers the next call it handles, and GDBus queues both in that order, so once a call has
///   returned, every change made before the provider handled it has been reported.
///
/// Used on ``GLibWorker/shared``'s thread only.
final class ItemPathCache: @unchecked Sendable {  // used on GLibWorker's thread only
    enum Change: Int32 {
        case created = 1  // TV_ITEM_CREATED
        case deleted = 2  // TV_ITEM_DELETED
        case changed = 3  // TV_ITEM_CHANGED
        case collection = 4  // TV_COLLECTION_CHANGED: a collection made, deleted, locked or unlocked
    }

    private var paths: [CredentialKey: String] = [:]
    /// Services whose every item this connection knows: each account's item paths (none for an
    /// account without items). A new key of such a service needs no search before it is made.
    private var services: [String: [String: [String]]] = [:]
    /// Services whose items could not all be known (too many, or locked): not asked again.
    private var unknowable: Set<String> = []
    /// Whether the default collection is unlocked, once read while watching.
    private(set) var defaultUnlocked: Bool?
    private var expected: [(change: Change, path: String)] = []
    /// How many changes this connection did not make itself have been reported.
    private(set) var foreignChanges = 0
    /// The two subscriptions (item signals, collection signals); zeros when not watching.
    private var subscriptions: [guint] = [0, 0]
    private var connection: OpaquePointer?

    /// Whether signals are subscribed. Only what was learned after that may be remembered.
    var isWatching: Bool { subscriptions[0] != 0 }

    /// Entries beyond this many are not remembered (a process that walks a huge keyring once
    /// would otherwise keep every path).
    static let capacity = 100_000

    func path(for key: CredentialKey) -> String? {
        if let known = services[key.service]?[key.account] { return known.count == 1 ? known[0] : nil }
        return paths[key]
    }

    /// Whether `key` is known to have no item at all.
    func isAbsent(_ key: CredentialKey) -> Bool {
        services[key.service].map { $0[key.account, default: []].isEmpty } ?? false
    }

    /// Whether every item of `service` is known, or cannot be.
    func hasCensus(of service: String) -> Bool {
        services[service] != nil || unknowable.contains(service)
    }

    /// `path` is now `key`'s only item.
    func remember(_ path: String, for key: CredentialKey) {
        guard isWatching else { return }
        if services[key.service] != nil {
            services[key.service]![key.account] = [path]
        } else if paths.count < Self.capacity || paths[key] != nil {
            paths[key] = path
        }
    }

    /// `key` now has no item.
    func removed(_ key: CredentialKey) {
        paths[key] = nil
        services[key.service]?[key.account] = nil
    }

    /// What `key` holds is no longer known.
    func forget(_ key: CredentialKey) {
        paths[key] = nil
        if services.removeValue(forKey: key.service) != nil { unknowable.insert(key.service) }
    }

    /// Records every item of `service`, by account, as a search by service found them.
    func census(of service: String, _ accounts: [String: [String]]?) {
        guard isWatching else { return }
        if let accounts, services.count < Self.capacity {
            services[service] = accounts
        } else {
            unknowable.insert(service)
        }
    }

    func lockState(unlocked: Bool) {
        guard isWatching else { return }
        defaultUnlocked = unlocked
    }

    /// Announces a signal that this connection's own call is about to cause (or has just caused).
    func expect(_ change: Change, _ path: String) {
        expected.append((change, path))
    }

    /// Ends an operation: expectations its calls did not meet are dropped, so that they cannot
    /// explain away another client's change later.
    func endOperation() {
        expected.removeAll()
    }

    fileprivate func received(_ change: Change?, _ path: String) {
        if let change, let index = expected.firstIndex(where: { $0.change == change && $0.path == path }) {
            expected.remove(at: index)
            return
        }
        foreignChanges += 1
        paths.removeAll()
        services.removeAll()
        unknowable.removeAll()
        defaultUnlocked = nil
    }

    /// Subscribes to the item signals of `sender` (the provider's unique bus name).
    func startWatching(_ connection: OpaquePointer, sender: String) {
        guard !isWatching else { return }
        // GLib holds a reference to this object until it frees the subscriptions.
        let context = Unmanaged.passRetained(self).toOpaque()
        var ids: [guint] = [0, 0]
        let subscribed = tv_watch_items(
            connection, sender,
            { context, change, path in
                guard let context else { return }
                let cache = Unmanaged<ItemPathCache>.fromOpaque(context).takeUnretainedValue()
                cache.received(Change(rawValue: change), path.map { String(cString: $0) } ?? "")
            },
            context,
            { context in
                guard let context else { return }
                Unmanaged<ItemPathCache>.fromOpaque(context).release()
            },
            &ids)
        guard subscribed != 0, ids[0] != 0, ids[1] != 0 else {
            if subscribed == 0 { Unmanaged<ItemPathCache>.fromOpaque(context).release() }
            if ids != [0, 0] { tv_unwatch_items(connection, ids) }  // GLib then releases it
            return
        }
        subscriptions = ids
        self.connection = connection
    }

    /// Unsubscribes (the connection is going away, on whichever thread drops it last: a signal
    /// already queued may still be handled on the Secret Service thread, which is why GLib holds
    /// its own reference, and why this touches nothing else).
    func stopWatching() {
        guard isWatching, let connection else { return }
        tv_unwatch_items(connection, subscriptions)
        subscriptions = [0, 0]
    }
}
