import FoundationEssentials
internal import CLibSecret

extension SecretServiceStore {
    /// What a lookup found.
    enum Lookup: Sendable {
        case value(Data)
        case absent
        /// Only locked items match; unlocking these paths may reveal the value.
        case locked([String])
    }

    /// What a save did.
    enum StoreOutcome: Sendable {
        case saved
        /// The target collection is locked; unlocking these paths may let the save through.
        case locked([String])
    }

    /// An item's key, read from its attributes.
    struct FoundKey: Sendable {
        let path: String
        let service: String
        let account: String
    }

    /// The C side of the store: a `SecretService` proxy of its own on the session bus, with an
    /// open transfer session. It is released in `deinit`.
    ///
    /// Every method blocks and must run on ``GLibWorker/shared``; each takes the call's
    /// `GCancellable`. Each `GError` is fresh (`nil` before the call) and freed by
    /// ``GLibError/take(_:while:)``.
    final class Connection: @unchecked Sendable {  // GLib handles, used on GLibWorker's thread only
        private let bus: SessionBusReference
        let service: UnsafeMutablePointer<SecretService>
        var connection: OpaquePointer { bus.connection }
        /// The unique bus name of the provider this connection's transfer session belongs to.
        private let owner: String?
        /// The default collection's object path, once read; read again when it stops answering.
        var defaultCollectionCache: String?
        /// Set when the provider answered as if it had dropped this connection's transfer session
        /// (see ``noSecretWithoutError(_:action:)``): the connection is then stale.
        var sessionLost = false
        /// Whether the provider is gnome-keyring-daemon: the process that owns
        /// `org.freedesktop.secrets` also owns `org.gnome.keyring` (its daemon interface), which
        /// no other provider claims. Read once, from the bus daemon (no provider round trip).
        ///
        /// gnome-keyring lets each operation take fewer round trips, for two reasons measured and
        /// tested on it: its `SearchItems` never prompts and lists the items of a locked collection
        /// as locked (so the lock need not be read before a search), and it stores a secret's
        /// bytes as given, never interpreting them (so a save needs no read-back, and no old value
        /// is kept to put back). Any other provider, or a failed check, takes the careful path.
        let isGnomeKeyring: Bool
        /// On gnome-keyring, which item holds each key this connection has seen (see
        /// ``ItemPathCache``); unused with other providers.
        let itemCache = ItemPathCache()
        /// Whether an operation has finished: the next one subscribes ``itemCache`` to signals.
        private var finishedAnOperation = false
        /// Whether to subscribe at all (`SecretServiceStore.Options.watchesChanges`).
        var watchesChanges = true
        /// How many `SearchItems` calls this connection made (tests).
        var searches = 0

        /// The default collection, through its alias path, as CreateItem accepts it.
        static let defaultCollection = "/org/freedesktop/secrets/aliases/default"

        init(bus: SessionBusReference, cancellable: UnsafeMutablePointer<GCancellable>) throws {
            var error: UnsafeMutablePointer<GError>?
            var opened = tv_service_open(cancellable, &error)
            // libsecret sends its Diffie-Hellman public key without leading zero bytes, and
            // kwalletd5 refuses a key shorter than 128 bytes ("Client public key size is invalid"):
            // one session in 256. A fresh key pair is another draw.
            for _ in 0..<3 where opened == nil && Self.isShortKeyRefusal(error) {
                g_error_free(error)
                error = nil
                opened = tv_service_open(cancellable, &error)
            }
            guard let service = opened else {
                let failure = GLibError.take(error, while: "opening a session with the Secret Service")
                if failure.message.contains("createDLGroup") {
                    // kwalletd5 without QCA's OpenSSL plugin cannot make a Diffie-Hellman group,
                    // so it refuses every encrypted session.
                    throw VaultError(
                        .backendUnavailable,
                        "KWallet cannot open an encrypted session with TokenVault: it lacks QCA's OpenSSL plugin "
                            + "(Debian and Ubuntu: install libqca-qt5-2-plugins, then restart kwalletd5). (\(failure.message))")
                }
                if failure.code == .io || failure.code == .notFound {
                    // A bus with no provider answers ServiceUnknown; anything else that is not a
                    // Secret Service answers UnknownMethod or UnknownObject.
                    throw VaultError(.backendUnavailable, failure.message)
                }
                throw failure
            }
            self.bus = bus
            self.service = service
            self.owner = Self.nameOwner(service)
            self.isGnomeKeyring = Self.isGnomeKeyring(tv_service_connection(service), owner: owner, cancellable)
        }

        /// See ``isGnomeKeyring``. A failed question answers `false`: the careful path is correct
        /// for every provider, only slower.
        private static func isGnomeKeyring(
            _ connection: OpaquePointer?, owner: String?, _ cancellable: UnsafeMutablePointer<GCancellable>
        ) -> Bool {
            guard let connection, let owner else { return false }
            var error: UnsafeMutablePointer<GError>?
            guard let daemon = tv_name_owner(connection, "org.gnome.keyring", -1, cancellable, &error) else {
                if error != nil { g_error_free(error) }
                return false
            }
            defer { g_free(daemon) }
            return String(cString: daemon) == owner
        }

        deinit {
            itemCache.stopWatching()
            g_object_unref(UnsafeMutableRawPointer(service))
        }

        /// Begins an operation that may use ``itemCache``: reports the signals that came in since
        /// the last one (other clients' changes) and returns what ``finishCacheOperation(_:)``
        /// compares with.
        ///
        /// The signals are subscribed here, once an earlier operation of this connection has
        /// finished, so that a one-shot `vault get` never subscribes: that cost two `AddMatch`
        /// calls for a cache it would never use. The `vault` command turns watching off
        /// altogether (a `vault set` reads the entry before it writes, two operations). The subscription goes out before this
        /// operation's first call on the same connection, and the bus daemon handles one sender's
        /// messages in order, so every change the provider makes after answering it is reported.
        /// Nothing learned before is remembered (``ItemPathCache`` remembers only while watching).
        func beginCacheOperation() -> (watching: Bool, foreignChanges: Int) {
            if isGnomeKeyring, watchesChanges, finishedAnOperation, !itemCache.isWatching, let owner {
                itemCache.startWatching(connection, sender: owner)
            }
            GLibWorker.dispatchPendingSignals()
            itemCache.endOperation()
            return (itemCache.isWatching, itemCache.foreignChanges)
        }

        /// Ends an operation: dispatches the signals its own calls caused, and returns whether no
        /// other client changed an item since `start`.
        @discardableResult
        func finishCacheOperation(_ start: (watching: Bool, foreignChanges: Int)) -> Bool {
            GLibWorker.dispatchPendingSignals()
            itemCache.endOperation()
            finishedAnOperation = true
            return itemCache.foreignChanges == start.foreignChanges
        }

        private static func isShortKeyRefusal(_ error: UnsafeMutablePointer<GError>?) -> Bool {
            guard let message = error?.pointee.message else { return false }
            return String(cString: message).contains("public key size is invalid")
        }

        /// Whether this connection can no longer reach the provider it was opened with: the bus
        /// connection is closed (the bus went away), or another process (or none) now owns the
        /// Secret Service name, so the transfer session belongs to a provider that is gone. Reads
        /// local state only; signals must have been dispatched on this thread first.
        var isStale: Bool {
            if sessionLost || g_dbus_connection_is_closed(connection) != 0 { return true }
            return Self.nameOwner(service) != owner
        }

        private static func nameOwner(_ service: UnsafeMutablePointer<SecretService>) -> String? {
            let proxy = UnsafeMutableRawPointer(service).assumingMemoryBound(to: GDBusProxy.self)
            guard let name = g_dbus_proxy_get_name_owner(proxy) else { return nil }
            defer { g_free(name) }
            return String(cString: name)
        }

        // MARK: Operations

        func lookup(_ key: CredentialKey, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> Lookup {
            // The lock first: KeePassXC's locked collection answers a search with nothing (so "absent"
            // would prove nothing), or, with its default UnlockBeforeSearch, with an unlock dialog
            // that the search waits on.
            // gnome-keyring's search never prompts and lists a locked collection's items as locked,
            // so there the lock is read only when the search found nothing.
            if !isGnomeKeyring, let locked = try lockedDefaultCollection(cancellable, action: action) {
                return .locked([locked])
            }
            var operation = beginCacheOperation()
            if isGnomeKeyring, let path = itemCache.path(for: key) {
                if let value = readCached(path, key, operation, cancellable, action: action) { return .value(value) }
                operation = beginCacheOperation()
            }
            // Two rounds: an item can vanish between the search and the read.
            for _ in 0..<2 {
                let found = try search(key, cancellable, action: action)
                // A key with one item, found while no other client changed one, is remembered.
                if finishCacheOperation(operation), operation.watching, found.unlocked.count == 1, found.locked.isEmpty {
                    itemCache.remember(found.unlocked[0], for: key)
                }
                // Never pick one of several: an extra item may be another program's shadow.
                if found.unlocked.count + found.locked.count > 1 {
                    throw Self.severalItems(key, count: found.unlocked.count + found.locked.count)
                }
                guard let path = found.unlocked.first else {
                    if !found.locked.isEmpty { return .locked(found.locked) }
                    if isGnomeKeyring, let locked = try lockedDefaultCollection(cancellable, action: action) {
                        return .locked([locked])
                    }
                    return .absent
                }
                var error: UnsafeMutablePointer<GError>?
                if let value = secret_service_get_secret_for_dbus_path_sync(service, path, cancellable, &error) {
                    defer { secret_value_unref(UnsafeMutableRawPointer(value)) }
                    return .value(Self.copy(value))
                }
                guard error != nil else {
                    let failure = try noSecretWithoutError(cancellable, action: action)
                    if failure.code == .locked { return .locked([path]) }
                    throw failure
                }
                let failure = GLibError.take(error, while: action)
                switch failure.code {
                case .notFound: continue
                case .locked: return .locked([path])
                default: throw failure
                }
            }
            return .absent
        }

        /// The secret of `path`, the item ``itemCache`` holds for `key`; `nil` when that may no
        /// longer be so (the read failed, or another client changed an item meanwhile), and the
        /// caller then searches. The entry is dropped in that case.
        private func readCached(
            _ path: String, _ key: CredentialKey, _ operation: (watching: Bool, foreignChanges: Int),
            _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
        ) -> Data? {
            var error: UnsafeMutablePointer<GError>?
            let value = secret_service_get_secret_for_dbus_path_sync(service, path, cancellable, &error)
            if let error { g_error_free(error) }
            let unchanged = finishCacheOperation(operation)
            guard let value else {
                itemCache.forget(key)
                return nil
            }
            defer { secret_value_unref(UnsafeMutableRawPointer(value)) }
            guard unchanged else { return nil }
            return Self.copy(value)
        }


        func remove(
            _ key: CredentialKey, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
        ) throws -> (deleted: Bool, locked: [String]?) {
            // The lock first, as in lookup: KeePassXC hides or prompts for a locked collection's items.
            // On gnome-keyring the lock is read only when the search found nothing, as in lookup.
            if !isGnomeKeyring, let locked = try lockedDefaultCollection(cancellable, action: action) {
                return (false, [locked])
            }
            var operation = beginCacheOperation()
            var deleted = false
            if isGnomeKeyring, let path = itemCache.path(for: key) {
                // The one item the key had, unless another client changed an item meanwhile:
                // then the search below finds whatever else is left. A failed Delete (the item
                // gone or locked, the deadline) is not reported here: the search path reports it.
                itemCache.expect(.deleted, path)
                deleted = (try? deleteItem(path, cancellable, action: action)) ?? false
                if finishCacheOperation(operation), deleted {
                    itemCache.removed(key)
                    return (true, nil)
                }
                itemCache.forget(key)
                operation = beginCacheOperation()
            }
            let found = try search(key, cancellable, action: action)
            if isGnomeKeyring, found.unlocked.isEmpty, found.locked.isEmpty,
                let locked = try lockedDefaultCollection(cancellable, action: action)
            {
                return (false, [locked])
            }
            for path in found.unlocked {
                itemCache.expect(.deleted, path)
                deleted = try deleteItem(path, cancellable, action: action) || deleted
            }
            if finishCacheOperation(operation), found.locked.isEmpty { itemCache.removed(key) }
            return (deleted, found.locked.isEmpty ? nil : found.locked)
        }

        /// The paths of this schema's items (`xdg:schema` = ``SecretServiceStore/schemaName``),
        /// optionally of one service, locked or not.
        ///
        /// Items that `secret-tool store` made without an `xdg:schema` are found by lookups and
        /// deletes (they match on service and account) but not here: gnome-keyring gives such an
        /// item its generic schema only later, when it rewrites the keyring file, so a search for
        /// it misses it at random, and there is no search for "has a service attribute".
        func listPaths(
            service: String?, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
        ) throws -> (paths: [String], locked: [String]?) {
            // A locked KeePassXC collection answers a search with nothing: listing it would say
            // "empty". Every provider's locked collection is therefore `locked`, unless unlocked.
            if let locked = try lockedDefaultCollection(cancellable, action: action) { return ([], [locked]) }
            let attributes: OpaquePointer = tv_attributes_new()
            defer { g_hash_table_unref(attributes) }
            tv_attributes_set(attributes, "xdg:schema", SecretServiceStore.schemaName)
            if let service { tv_attributes_set(attributes, "service", service) }
            let found = try search(attributes, schema: false, cancellable, action: action)
            return (found.unlocked + found.locked, nil)
        }

        /// Reads the `service` and `account` attributes of `paths`; items without both are skipped.
        func readKeys(_ paths: [String], _ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> [FoundKey] {
            var keys: [FoundKey] = []
            for path in paths {
                var error: UnsafeMutablePointer<GError>?
                guard let attributes = tv_item_attributes(connection, path, -1, cancellable, &error) else {
                    let failure = GLibError.take(error, while: action)
                    if failure.code == .notFound { continue }  // deleted since the search
                    throw failure
                }
                defer { g_hash_table_unref(attributes) }
                guard let service = Self.attribute(attributes, "service"),
                    let account = Self.attribute(attributes, "account")
                else { continue }
                keys.append(FoundKey(path: path, service: service, account: account))
            }
            return keys
        }

        /// Asks the provider to unlock `paths`. It may show a prompt. Returns how many were unlocked.
        func unlock(_ paths: [String], _ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> Int {
            var unlocked: UnsafeMutablePointer<UnsafeMutablePointer<gchar>?>?
            var error: UnsafeMutablePointer<GError>?
            let count = withCStrings(paths) { array in
                secret_service_unlock_dbus_paths_sync(service, array, cancellable, &unlocked, &error)
            }
            _ = Self.strings(unlocked)
            if count < 0 || (count == 0 && error != nil) {
                throw GLibError.take(error, while: action)
            }
            if error != nil { g_error_free(error) }
            return Int(count)
        }
    }
}
