import FoundationEssentials
internal import CLibSecret

extension SecretServiceStore.Connection {
    /// Saves `secret` under `key` in the default collection, keeping exactly one item per key, and
    /// reads it back: a provider that stores something else (KeePassXC expands placeholders such
    /// as `{USERNAME}` on read and refuses `{REF:…}` on write) is an `integrityFailure`, and the
    /// item is put back as it was.
    ///
    /// An item of this schema that already exists is overwritten in place with `Item.SetSecret`:
    /// KeePassXC 2.7.4 asks for a confirmation, on a dialog, when another process replaces an
    /// item through `CreateItem` with replace, but not for `SetSecret`.
    func store(
        _ secret: Data, _ key: CredentialKey, label: String, wireContentType: String,
        _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
    ) throws -> SecretServiceStore.StoreOutcome {
        if isGnomeKeyring {
            return try storeReplacing(secret, key, label: label, wireContentType: wireContentType, cancellable, action: action)
        }
        // The lock first, as in lookup: on a locked KeePassXC a search or CreateItem would wait
        // on an unlock dialog.
        guard let collection = try defaultCollectionState(cancellable, action: action) else {
            throw Self.noDefaultCollection(key)
        }
        if collection.locked { return .locked([collection.path]) }
        let found = try search(key, cancellable, action: action)
        let value = try Self.value(secret, contentType: wireContentType, action: action)
        defer { secret_value_unref(UnsafeMutableRawPointer(value)) }

        var target: String?
        var previous: OpaquePointer?
        defer { if let previous { secret_value_unref(UnsafeMutableRawPointer(previous)) } }
        for path in found.unlocked {
            let item = try openItem(path, cancellable, action: action)
            defer { g_object_unref(UnsafeMutableRawPointer(item)) }
            guard Self.schema(of: item) == SecretServiceStore.schemaName else { continue }
            // Kept so that a value the provider alters can be put back.
            previous = try readValue(path, cancellable, action: action)
            do {
                try setSecret(item, value, cancellable, action: action)
            } catch let error as VaultError where error.code == .io {
                // KeePassXC refuses a secret that holds {REF:…} with an error and no message.
                throw VaultError(
                    .integrityFailure,
                    "The Secret Service provider refused the new secret for \(key) (\(error.message)); the stored "
                        + "value is unchanged. KeePassXC, for one, refuses secrets that hold {REF:…}. Use the encrypted "
                        + "file backend for such a secret.")
            }
            try setLabel(item, label, cancellable, action: action)
            target = path
            break
        }

        let written: String
        if let target {
            written = target
        } else {
            switch try createItem(value, key, label: label, cancellable, action: action) {
            case .created(let path): written = path
            case .locked(let paths): return .locked(paths)
            }
        }

        try verify(secret, at: written, created: target == nil, previous: previous, key, cancellable, action: action)

        // One item per key: remove the other unlocked items for the same service and account,
        // such as one that `secret-tool store` made under its own schema. Locked duplicates in
        // other collections cannot be touched.
        for path in found.unlocked where path != written {
            try deleteItem(path, cancellable, action: action)
        }
        return .saved
    }

    /// ``store(_:_:label:wireContentType:_:action:)`` on gnome-keyring (``isGnomeKeyring``), in
    /// three round trips when the key has an item (search, the item's properties, `SetSecret`)
    /// and three when it is new (search, the lock, `CreateItem`).
    ///
    /// - An item of this schema for the key is overwritten in place with `SetSecret` (and its
    ///   label set when it differs). gnome-keyring rewrites its keyring file for each change an
    ///   operation makes: `CreateItem` with replace changes the attributes, the label and the
    ///   secret, and took 67 ms against 32 ms for `SetSecret` in a keyring of 1,000 items (its
    ///   search, 4.4 ms, and the properties, under 1 ms, are small beside either).
    /// - A new key is made with `CreateItem` with replace (gnome-keyring matches on every
    ///   attribute given: `service`, `account` and `xdg:schema`), which never shows a dialog.
    /// - No read-back: gnome-keyring stores the bytes it is given and never interprets them
    ///   (placeholders such as `{USERNAME}` or `{REF:…}` included; SecretServiceProviderTests reads
    ///   them back on every provider). The read-back stays for every other provider.
    /// - One item per key, as before: the search, made before the write, lists the other items for
    ///   the same service and account (one of `secret-tool store`, or of this schema in another
    ///   collection), and those that are unlocked are deleted after the write.
    /// - The lock: an unlocked item of the search in the default collection shows that the
    ///   collection is unlocked, as reading its `Locked` property would; otherwise that property is
    ///   read, so that `CreateItem` never meets a locked collection (which would prompt).
    func storeReplacing(
        _ secret: Data, _ key: CredentialKey, label: String, wireContentType: String,
        _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
    ) throws -> SecretServiceStore.StoreOutcome {
        var operation = beginCacheOperation()
        let value = try Self.value(secret, contentType: wireContentType, action: action)
        defer { secret_value_unref(UnsafeMutableRawPointer(value)) }
        if let path = itemCache.path(for: key) {
            // The key's one item, seen by this connection (``ItemPathCache``): overwritten without
            // a search. Any failure (the item gone, locked, not of this schema) takes the search.
            if (try? overwriteInPlace([path], value, label: label, cancellable, action: action)) == path {
                if !finishCacheOperation(operation) { try keepOnly(path, for: key, cancellable, action: action) }
                return .saved
            }
            itemCache.forget(key)
            operation = beginCacheOperation()
        }
        // A new key of a service whose every item this connection knows: made without a search.
        if operation.watching, !itemCache.hasCensus(of: key.service) {
            takeCensus(of: key.service, cancellable, action: action)
        }
        if itemCache.isAbsent(key) {
            if itemCache.defaultUnlocked != true {
                guard let collection = try defaultCollectionState(cancellable, action: action) else {
                    throw Self.noDefaultCollection(key)
                }
                if collection.locked { return .locked([collection.path]) }
                itemCache.lockState(unlocked: true)
            }
            switch try createItem(value, key, label: label, cancellable, action: action) {
            case .created(let path):
                itemCache.expect(.created, path)
                if finishCacheOperation(operation) {
                    itemCache.remember(path, for: key)
                } else {
                    try keepOnly(path, for: key, cancellable, action: action)
                }
                return .saved
            case .locked(let paths):
                return .locked(paths)
            }
        }
        let found = try search(key, cancellable, action: action)
        let written: String
        if let overwritten = try overwriteInPlace(found.unlocked, value, label: label, cancellable, action: action) {
            written = overwritten
        } else {
            let unlockedHere = defaultCollectionCache.map { collection in
                found.unlocked.contains { $0.hasPrefix(collection + "/") }
            } ?? false
            if !unlockedHere {
                guard let collection = try defaultCollectionState(cancellable, action: action) else {
                    throw Self.noDefaultCollection(key)
                }
                if collection.locked { return .locked([collection.path]) }
            }
            switch try createItem(value, key, label: label, cancellable, action: action) {
            case .created(let path):
                written = path
                itemCache.expect(.created, path)
            case .locked(let paths): return .locked(paths)
            }
        }
        try deleteItems(found.unlocked, keeping: written, cancellable, action: action)
        // The key's one item now, unless another client changed an item meanwhile or a locked
        // item for the key remains.
        if finishCacheOperation(operation), operation.watching, found.locked.isEmpty {
            itemCache.remember(written, for: key)
        }
        return .saved
    }

    /// After a write to `path` without a search, during which another client changed an item:
    /// whatever else `key` now has goes, as after a search.
    private func keepOnly(
        _ path: String, for key: CredentialKey, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
    ) throws {
        let operation = beginCacheOperation()
        let found = try search(key, cancellable, action: action)
        try deleteItems(found.unlocked, keeping: path, cancellable, action: action)
        if finishCacheOperation(operation), found.locked.isEmpty { itemCache.remember(path, for: key) }
    }

    /// Deletes each of `paths` but `kept` (the other items of a key that now has `kept`), each
    /// deletion announced to ``itemCache`` as this connection's own.
    private func deleteItems(
        _ paths: [String], keeping kept: String, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
    ) throws {
        for path in paths where path != kept {
            itemCache.expect(.deleted, path)
            try deleteItem(path, cancellable, action: action)
        }
    }

    /// The most items of one service whose attributes a census reads.
    static let censusLimit = 32

    /// Learns every item of `service` (``ItemPathCache/census(of:_:)``): one search by service and
    /// the attributes of what it finds, if that is at most ``censusLimit`` unlocked items. A
    /// service with more, or with a locked item, is searched key by key, and not counted again.
    /// A census that fails (the provider refused a call, or the deadline passed) is not retried;
    /// the save goes on with a search, which reports such a failure itself.
    private func takeCensus(of service: String, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String) {
        let attributes = tv_attributes_new()!
        defer { g_hash_table_unref(attributes) }
        tv_attributes_set(attributes, "service", service)
        do {
            let found = try search(attributes, schema: true, cancellable, action: action)
            guard found.locked.isEmpty, found.unlocked.count <= Self.censusLimit else {
                itemCache.census(of: service, nil)
                return
            }
            var accounts: [String: [String]] = [:]
            for item in try readKeys(found.unlocked, cancellable, action: action) where item.service == service {
                accounts[item.account, default: []].append(item.path)
            }
            itemCache.census(of: service, accounts)
        } catch {
            itemCache.census(of: service, nil)
        }
    }

    /// Writes `value` into the first of `paths` that is an item of this schema, with `label`;
    /// its path, or nil when none is (or each went away since the search).
    private func overwriteInPlace(
        _ paths: [String], _ value: OpaquePointer, label: String,
        _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
    ) throws -> String? {
        for path in paths {
            let item: UnsafeMutablePointer<SecretItem>
            do {
                item = try openItem(path, cancellable, action: action)
            } catch let error as VaultError where error.code == .notFound {
                continue  // deleted since the search
            }
            defer { g_object_unref(UnsafeMutableRawPointer(item)) }
            guard Self.schema(of: item) == SecretServiceStore.schemaName else { continue }
            try setSecret(item, value, cancellable, action: action)
            // gnome-keyring reports a new label (not a new secret) with ItemChanged.
            if Self.label(of: item) != label { itemCache.expect(.changed, path) }
            try setLabel(item, label, cancellable, action: action)
            return path
        }
        return nil
    }

    enum Creation {
        case created(String)
        case locked([String])
    }

    func createItem(
        _ value: OpaquePointer, _ key: CredentialKey, label: String,
        _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
    ) throws -> Creation {
        let attributes = Self.attributes(key, schema: SecretServiceStore.schemaName)
        defer { g_hash_table_unref(attributes) }
        let properties = tv_item_properties_new(label, attributes)
        defer { g_hash_table_unref(properties) }
        var error: UnsafeMutablePointer<GError>?
        guard let created = secret_service_create_item_dbus_path_sync(
            service, Self.defaultCollection, properties, value, SECRET_ITEM_CREATE_REPLACE, cancellable, &error)
        else {
            guard error != nil else {
                // The provider asked for a prompt, and it was dismissed.
                return .locked([try defaultCollectionPath(cancellable, action: action)])
            }
            let failure = GLibError.take(error, while: action)
            switch failure.code {
            case .locked:
                return .locked([try defaultCollectionPath(cancellable, action: action)])
            case .notFound:
                throw Self.noDefaultCollection(key)
            default:
                throw failure
            }
        }
        defer { g_free(created) }
        return .created(String(cString: created))
    }

    /// Reads back what was written to `path`. If it differs, puts the item back as it was (the
    /// previous value, or no item at all) and throws `integrityFailure`.
    func verify(
        _ secret: Data, at path: String, created: Bool, previous: OpaquePointer?, _ key: CredentialKey,
        _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
    ) throws {
        let stored = try readValue(path, cancellable, action: action)
        defer { secret_value_unref(UnsafeMutableRawPointer(stored)) }
        let readBack = Self.copy(stored)
        guard readBack != secret else { return }
        let undone: String
        if created {
            try deleteItem(path, cancellable, action: action)
            undone = "Nothing was saved."
        } else if let previous {
            let item = try openItem(path, cancellable, action: action)
            defer { g_object_unref(UnsafeMutableRawPointer(item)) }
            try setSecret(item, previous, cancellable, action: action)
            undone = "The previous value was put back."
        } else {
            undone = "The item now holds what the provider made of it."
        }
        throw VaultError(
            .integrityFailure,
            "The Secret Service provider did not keep the secret for \(key) as written: it reads back "
                + (readBack.isEmpty ? "empty" : "altered (\(readBack.count) bytes instead of \(secret.count))")
                + ". KeePassXC, for one, expands placeholders such as {USERNAME} or {S:name} when a secret is read, "
                + "and refuses {REF:…}. \(undone) Use the encrypted file backend for such a secret.")
    }
}
