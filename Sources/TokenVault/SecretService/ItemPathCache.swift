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
final class ItemPathCache: @unchecked Sendable {
    enum Change: Int32 {
        case created = 1  // TV_ITEM_CREATED
        case deleted = 2  // TV_ITEM_DELETED
        case changed = 3  // TV_ITEM_CHANGED
    }

    private var paths: [CredentialKey: String] = [:]
    private var expected: [(change: Change, path: String)] = []
    /// How many changes this connection did not make itself have been reported.
    private(set) var foreignChanges = 0
    private var subscription: guint = 0
    private var connection: OpaquePointer?

    /// Whether signals are subscribed. Only what was learned after that may be remembered.
    var isWatching: Bool { subscription != 0 }

    /// Entries beyond this many are not remembered (a process that walks a huge keyring once
    /// would otherwise keep every path).
    static let capacity = 100_000

    func path(for key: CredentialKey) -> String? { paths[key] }

    func remember(_ path: String, for key: CredentialKey) {
        guard isWatching, paths.count < Self.capacity || paths[key] != nil else { return }
        paths[key] = path
    }

    func forget(_ key: CredentialKey) {
        paths[key] = nil
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
    }

    /// Subscribes to the item signals of `sender` (the provider's unique bus name).
    func startWatching(_ connection: OpaquePointer, sender: String) {
        guard !isWatching else { return }
        // GLib holds a reference to this object until it frees the subscription.
        let context = Unmanaged.passRetained(self).toOpaque()
        subscription = tv_watch_items(
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
            })
        if subscription == 0 {
            Unmanaged<ItemPathCache>.fromOpaque(context).release()
        } else {
            self.connection = connection
        }
    }

    /// Unsubscribes (the connection is going away, on whichever thread drops it last: a signal
    /// already queued may still be handled on the Secret Service thread, which is why GLib holds
    /// its own reference, and why this touches nothing else).
    func stopWatching() {
        guard isWatching, let connection else { return }
        tv_unwatch_items(connection, subscription)
        subscription = 0
    }
}
