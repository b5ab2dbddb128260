import FoundationEssentials
internal import TokenVaultSystem
internal import CLibSecret

extension SecretServiceStore.Connection {
    /// The default collection's path and whether it is locked; `nil` when no collection has the
    /// alias `default`. The path is read once and then kept, while it answers.
    func defaultCollectionState(
        _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
    ) throws -> (path: String, locked: Bool)? {
        for attempt in 0..<2 {
            let path: String
            if let cached = defaultCollectionCache {
                path = cached
            } else {
                path = try defaultCollectionPath(cancellable, action: action)
                guard path != "/" else { return nil }
                defaultCollectionCache = path
            }
            var locked: gboolean = 0
            var error: UnsafeMutablePointer<GError>?
            if tv_collection_is_locked(connection, path, -1, cancellable, &locked, &error) != 0 {
                return (path, locked != 0)
            }
            let failure = GLibError.take(error, while: action)
            defaultCollectionCache = nil
            // A collection deleted or renamed since it was read: read the alias again.
            guard attempt == 0, failure.code == .notFound || failure.code == .io else { throw failure }
        }
        return nil
    }

    /// The default collection's path if it is locked.
    func lockedDefaultCollection(_ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> String? {
        guard let state = try defaultCollectionState(cancellable, action: action), state.locked else { return nil }
        return state.path
    }

    static func noDefaultCollection(_ key: CredentialKey) -> VaultError {
        VaultError(
            .backendUnavailable,
            "The Secret Service has no default collection to keep \(key) in. Create a keyring and make it "
                + "the default (for example in Seahorse), or use the encrypted file backend.")
    }

    /// Several items match one key: another program of the user made the others (an item with
    /// TokenVault's attributes plus one more matches the same search). Which one a read would take
    /// is up to the provider, so none is taken: the caller is told, as for other damage.
    static func severalItems(_ key: CredentialKey, count: Int) -> VaultError {
        VaultError(
            .integrityFailure,
            "The Secret Service holds \(count) items for \(key), where TokenVault keeps one; another program made the others, and any of them could be the one read. Nothing was read. See them with `secret-tool search --all service \(key.displayService) account \(key.displayAccount)`; saving the entry again keeps only the new value, deleting it removes them all.")
    }

    /// A secret value holding a copy of `secret` (in libsecret's non-pageable memory).
    static func value(_ secret: Data, contentType: String, action: String) throws -> OpaquePointer {
        let value = secret.withUnsafeBytes { bytes -> OpaquePointer? in
            if let base = bytes.baseAddress, bytes.count > 0 {
                return secret_value_new(base.assumingMemoryBound(to: gchar.self), gssize(bytes.count), contentType)
            }
            return secret_value_new("", 0, contentType)
        }
        guard let value else {
            throw VaultError(.io, "libsecret could not hold the secret while \(action).")
        }
        return value
    }

    /// An item's proxy, with its attributes and label loaded (one round trip).
    func openItem(
        _ path: String, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
    ) throws -> UnsafeMutablePointer<SecretItem> {
        var error: UnsafeMutablePointer<GError>?
        guard let item = secret_item_new_for_dbus_path_sync(service, path, SECRET_ITEM_NONE, cancellable, &error) else {
            throw GLibError.take(error, while: action)
        }
        return item
    }

    func setSecret(
        _ item: UnsafeMutablePointer<SecretItem>, _ value: OpaquePointer,
        _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
    ) throws {
        var error: UnsafeMutablePointer<GError>?
        guard secret_item_set_secret_sync(item, value, cancellable, &error) != 0 else {
            throw GLibError.take(error, while: action)
        }
    }

    /// Sets `item`'s label to `label` unless it already is.
    func setLabel(
        _ item: UnsafeMutablePointer<SecretItem>, _ label: String,
        _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
    ) throws {
        guard Self.label(of: item) != label else { return }
        var error: UnsafeMutablePointer<GError>?
        guard secret_item_set_label_sync(item, label, cancellable, &error) != 0 else {
            throw GLibError.take(error, while: action)
        }
    }

    /// An item's secret value; the caller unrefs it.
    func readValue(_ path: String, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> OpaquePointer {
        var error: UnsafeMutablePointer<GError>?
        guard let value = secret_service_get_secret_for_dbus_path_sync(service, path, cancellable, &error) else {
            guard error != nil else { throw try noSecretWithoutError(cancellable, action: action) }
            throw GLibError.take(error, while: action)
        }
        return value
    }

    /// GetSecrets answered no secret and no error for an item that a search had just listed as
    /// unlocked. Either the collection was locked in between (`locked`), or the provider dropped
    /// this connection's transfer session, as kwalletd5 5.103 now and then does while other
    /// clients open and close theirs (it then answers every GetSecrets of the session with
    /// nothing). The second marks the connection stale and is `io`, so the store's `call` runs the
    /// operation once more on a new connection with a new session.
    func noSecretWithoutError(_ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> VaultError {
        if try lockedDefaultCollection(cancellable, action: action) != nil {
            return VaultError(.locked, "The Secret Service item became locked while \(action).")
        }
        sessionLost = true
        return VaultError(
            .io, "The Secret Service answered no secret for an unlocked item while \(action), as a provider does whose transfer session is gone.")
    }

    static func schema(of item: UnsafeMutablePointer<SecretItem>) -> String? {
        guard let attributes = secret_item_get_attributes(item) else { return nil }
        defer { g_hash_table_unref(attributes) }
        return attribute(attributes, "xdg:schema")
    }

    static func label(of item: UnsafeMutablePointer<SecretItem>) -> String? {
        guard let label = secret_item_get_label(item) else { return nil }
        defer { g_free(label) }
        return String(cString: label)
    }

    func search(
        _ key: CredentialKey, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
    ) throws -> (unlocked: [String], locked: [String]) {
        let attributes = Self.attributes(key, schema: nil)
        defer { g_hash_table_unref(attributes) }
        return try search(attributes, schema: true, cancellable, action: action)
    }

    func search(
        _ attributes: OpaquePointer, schema: Bool, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
    ) throws -> (unlocked: [String], locked: [String]) {
        var unlocked: UnsafeMutablePointer<UnsafeMutablePointer<gchar>?>?
        var locked: UnsafeMutablePointer<UnsafeMutablePointer<gchar>?>?
        var error: UnsafeMutablePointer<GError>?
        searches += 1
        let ok = secret_service_search_for_dbus_paths_sync(
            service, schema ? tv_schema() : nil, attributes, cancellable, &unlocked, &locked, &error)
        let result = (Self.strings(unlocked), Self.strings(locked))
        guard ok != 0 else { throw GLibError.take(error, while: action) }
        return result
    }

    /// Deletes one item; `false` if it was already gone.
    @discardableResult
    func deleteItem(_ path: String, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> Bool {
        var error: UnsafeMutablePointer<GError>?
        if secret_service_delete_item_dbus_path_sync(service, path, cancellable, &error) != 0 {
            return true
        }
        let failure = GLibError.take(error, while: action)
        if failure.code == .notFound { return false }
        throw failure
    }

    /// The path the alias `default` names, or "/" when no collection has it.
    ///
    /// gnome-keyring answers "/" whenever its own lookup of the aliased collection fails at that
    /// instant, which the probe met once in a few hundred reads and the conformance suite's
    /// concurrent writers once (a save failed with "no default collection"); a provider that
    /// really has none answers "/" every time. So "/" is asked again twice, 50 ms apart, as the
    /// probe does. (This runs on the Secret Service thread, whose calls are synchronous.)
    func defaultCollectionPath(_ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> String {
        var path = "/"
        for attempt in 0..<3 {
            if attempt > 0 { SystemCall.sleep(seconds: 0.05) }
            var error: UnsafeMutablePointer<GError>?
            guard let read = tv_read_alias(connection, "default", -1, cancellable, &error) else {
                throw GLibError.take(error, while: action)
            }
            path = String(cString: read)
            g_free(read)
            if path != "/" { break }
        }
        return path
    }

    static func attributes(_ key: CredentialKey, schema: String?) -> OpaquePointer {
        let attributes = tv_attributes_new()!
        tv_attributes_set(attributes, "service", key.service)
        tv_attributes_set(attributes, "account", key.account)
        if let schema { tv_attributes_set(attributes, "xdg:schema", schema) }
        return attributes
    }

    static func attribute(_ attributes: OpaquePointer, _ name: String) -> String? {
        guard let value = g_hash_table_lookup(attributes, name) else { return nil }
        return String(cString: value.assumingMemoryBound(to: CChar.self))
    }

    /// Copies the secret out of libsecret's memory. The caller unrefs the value at once.
    static func copy(_ value: OpaquePointer) -> Data {
        var length: gsize = 0
        guard let bytes = secret_value_get(value, &length), length > 0 else { return Data() }
        return Data(bytes: bytes, count: Int(length))
    }

    /// Converts and frees a `NULL`-terminated string array.
    static func strings(_ array: UnsafeMutablePointer<UnsafeMutablePointer<gchar>?>?) -> [String] {
        guard let array else { return [] }
        defer { g_strfreev(array) }
        var result: [String] = []
        var index = 0
        while let element = array[index] {
            result.append(String(cString: element))
            index += 1
        }
        return result
    }
}
