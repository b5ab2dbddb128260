import Foundation
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

    /// The session bus, connected: a reference to GIO's shared connection, with exit-on-close
    /// turned off.
    final class SessionBusReference: @unchecked Sendable {
        let connection: OpaquePointer

        /// Connects. Blocking, bounded by `cancellable`; run it on ``GLibWorker/shared``, whose
        /// context then receives the connection's callbacks.
        init(cancellable: UnsafeMutablePointer<GCancellable>) throws {
            var error: UnsafeMutablePointer<GError>?
            guard let connection = tv_session_bus(cancellable, &error) else {
                throw GLibError.take(error, while: "connecting to the session bus")
            }
            self.connection = connection
        }

        deinit {
            g_object_unref(UnsafeMutableRawPointer(connection))
        }
    }

    /// The C side of the store: a `SecretService` proxy of its own on the session bus, with an
    /// open transfer session. It is released in `deinit`.
    ///
    /// Every method blocks and must run on ``GLibWorker/shared``; each takes the call's
    /// `GCancellable`. Each `GError` is fresh (`nil` before the call) and freed by
    /// ``GLibError/take(_:while:)``.
    final class Connection: @unchecked Sendable {
        private let bus: SessionBusReference
        private let service: UnsafeMutablePointer<SecretService>
        private var connection: OpaquePointer { bus.connection }
        /// The unique bus name of the provider this connection's transfer session belongs to.
        private let owner: String?
        /// The default collection's object path, once read; read again when it stops answering.
        private var defaultCollectionCache: String?

        /// The default collection, through its alias path, as CreateItem accepts it.
        private static let defaultCollection = "/org/freedesktop/secrets/aliases/default"

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
        }

        deinit {
            g_object_unref(UnsafeMutableRawPointer(service))
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
            if g_dbus_connection_is_closed(connection) != 0 { return true }
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
            if let locked = try lockedDefaultCollection(cancellable, action: action) { return .locked([locked]) }
            // Two rounds: an item can vanish between the search and the read.
            for _ in 0..<2 {
                let found = try search(key, cancellable, action: action)
                guard let path = found.unlocked.first else {
                    return found.locked.isEmpty ? .absent : .locked(found.locked)
                }
                var error: UnsafeMutablePointer<GError>?
                if let value = secret_service_get_secret_for_dbus_path_sync(service, path, cancellable, &error) {
                    defer { secret_value_unref(UnsafeMutableRawPointer(value)) }
                    return .value(Self.copy(value))
                }
                guard error != nil else { return .locked([path]) }
                let failure = GLibError.take(error, while: action)
                switch failure.code {
                case .notFound: continue
                case .locked: return .locked([path])
                default: throw failure
                }
            }
            return .absent
        }

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
        ) throws -> StoreOutcome {
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
                if Self.label(of: item) != label {
                    var error: UnsafeMutablePointer<GError>?
                    guard secret_item_set_label_sync(item, label, cancellable, &error) != 0 else {
                        throw GLibError.take(error, while: action)
                    }
                }
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

        private enum Creation {
            case created(String)
            case locked([String])
        }

        private func createItem(
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
        private func verify(
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

        func remove(
            _ key: CredentialKey, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
        ) throws -> (deleted: Bool, locked: [String]?) {
            // The lock first, as in lookup: KeePassXC hides or prompts for a locked collection's items.
            if let locked = try lockedDefaultCollection(cancellable, action: action) { return (false, [locked]) }
            let found = try search(key, cancellable, action: action)
            var deleted = false
            for path in found.unlocked {
                deleted = try deleteItem(path, cancellable, action: action) || deleted
            }
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
            let strings = paths.map { strdup($0) }
            defer { strings.forEach { free($0) } }
            var array: [UnsafePointer<gchar>?] = strings.map { UnsafePointer($0) } + [nil]
            var unlocked: UnsafeMutablePointer<UnsafeMutablePointer<gchar>?>?
            var error: UnsafeMutablePointer<GError>?
            let count = array.withUnsafeMutableBufferPointer { buffer in
                secret_service_unlock_dbus_paths_sync(service, buffer.baseAddress, cancellable, &unlocked, &error)
            }
            _ = Self.strings(unlocked)
            if count < 0 || (count == 0 && error != nil) {
                throw GLibError.take(error, while: action)
            }
            if error != nil { g_error_free(error) }
            return Int(count)
        }

        // MARK: Helpers

        /// The default collection's path and whether it is locked; `nil` when no collection has the
        /// alias `default`. The path is read once and then kept, while it answers.
        private func defaultCollectionState(
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
        private func lockedDefaultCollection(_ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> String? {
            guard let state = try defaultCollectionState(cancellable, action: action), state.locked else { return nil }
            return state.path
        }

        private static func noDefaultCollection(_ key: CredentialKey) -> VaultError {
            VaultError(
                .backendUnavailable,
                "The Secret Service has no default collection to keep \(key) in. Create a keyring and make it "
                    + "the default (for example in Seahorse), or use the encrypted file backend.")
        }

        /// A secret value holding a copy of `secret` (in libsecret's non-pageable memory).
        private static func value(_ secret: Data, contentType: String, action: String) throws -> OpaquePointer {
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
        private func openItem(
            _ path: String, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
        ) throws -> UnsafeMutablePointer<SecretItem> {
            var error: UnsafeMutablePointer<GError>?
            guard let item = secret_item_new_for_dbus_path_sync(service, path, SECRET_ITEM_NONE, cancellable, &error) else {
                throw GLibError.take(error, while: action)
            }
            return item
        }

        private func setSecret(
            _ item: UnsafeMutablePointer<SecretItem>, _ value: OpaquePointer,
            _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
        ) throws {
            var error: UnsafeMutablePointer<GError>?
            guard secret_item_set_secret_sync(item, value, cancellable, &error) != 0 else {
                throw GLibError.take(error, while: action)
            }
        }

        /// An item's secret value; the caller unrefs it.
        private func readValue(_ path: String, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> OpaquePointer {
            var error: UnsafeMutablePointer<GError>?
            guard let value = secret_service_get_secret_for_dbus_path_sync(service, path, cancellable, &error) else {
                guard error != nil else {
                    throw VaultError(.locked, "The Secret Service item became locked while \(action).")
                }
                throw GLibError.take(error, while: action)
            }
            return value
        }

        private static func schema(of item: UnsafeMutablePointer<SecretItem>) -> String? {
            guard let attributes = secret_item_get_attributes(item) else { return nil }
            defer { g_hash_table_unref(attributes) }
            return attribute(attributes, "xdg:schema")
        }

        private static func label(of item: UnsafeMutablePointer<SecretItem>) -> String? {
            guard let label = secret_item_get_label(item) else { return nil }
            defer { g_free(label) }
            return String(cString: label)
        }

        private func search(
            _ key: CredentialKey, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
        ) throws -> (unlocked: [String], locked: [String]) {
            let attributes = Self.attributes(key, schema: nil)
            defer { g_hash_table_unref(attributes) }
            return try search(attributes, schema: true, cancellable, action: action)
        }

        private func search(
            _ attributes: OpaquePointer, schema: Bool, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
        ) throws -> (unlocked: [String], locked: [String]) {
            var unlocked: UnsafeMutablePointer<UnsafeMutablePointer<gchar>?>?
            var locked: UnsafeMutablePointer<UnsafeMutablePointer<gchar>?>?
            var error: UnsafeMutablePointer<GError>?
            let ok = secret_service_search_for_dbus_paths_sync(
                service, schema ? tv_schema() : nil, attributes, cancellable, &unlocked, &locked, &error)
            let result = (Self.strings(unlocked), Self.strings(locked))
            guard ok != 0 else { throw GLibError.take(error, while: action) }
            return result
        }

        /// Deletes one item; `false` if it was already gone.
        @discardableResult
        private func deleteItem(_ path: String, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> Bool {
            var error: UnsafeMutablePointer<GError>?
            if secret_service_delete_item_dbus_path_sync(service, path, cancellable, &error) != 0 {
                return true
            }
            let failure = GLibError.take(error, while: action)
            if failure.code == .notFound { return false }
            throw failure
        }

        private func defaultCollectionPath(_ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> String {
            var error: UnsafeMutablePointer<GError>?
            guard let path = tv_read_alias(connection, "default", -1, cancellable, &error) else {
                throw GLibError.take(error, while: action)
            }
            defer { g_free(path) }
            return String(cString: path)
        }

        private static func attributes(_ key: CredentialKey, schema: String?) -> OpaquePointer {
            let attributes = tv_attributes_new()!
            tv_attributes_set(attributes, "service", key.service)
            tv_attributes_set(attributes, "account", key.account)
            if let schema { tv_attributes_set(attributes, "xdg:schema", schema) }
            return attributes
        }

        private static func attribute(_ attributes: OpaquePointer, _ name: String) -> String? {
            guard let value = g_hash_table_lookup(attributes, name) else { return nil }
            return String(cString: value.assumingMemoryBound(to: CChar.self))
        }

        /// Copies the secret out of libsecret's memory. The caller unrefs the value at once.
        private static func copy(_ value: OpaquePointer) -> Data {
            var length: gsize = 0
            guard let bytes = secret_value_get(value, &length), length > 0 else { return Data() }
            return Data(bytes: bytes, count: Int(length))
        }

        /// Converts and frees a `NULL`-terminated string array.
        private static func strings(_ array: UnsafeMutablePointer<UnsafeMutablePointer<gchar>?>?) -> [String] {
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
}
