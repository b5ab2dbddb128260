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

        /// Connects. Blocking; run it on ``GLibWorker/detached``: a bus that accepts the socket but
        /// never answers the handshake would otherwise hold up other calls.
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

        /// The default collection, through its alias path, as CreateItem accepts it.
        private static let defaultCollection = "/org/freedesktop/secrets/aliases/default"

        init(bus: SessionBusReference, cancellable: UnsafeMutablePointer<GCancellable>) throws {
            var error: UnsafeMutablePointer<GError>?
            guard let service = tv_service_open(cancellable, &error) else {
                let failure = GLibError.take(error, while: "opening a session with the Secret Service")
                if failure.code == .io || failure.code == .notFound {
                    // A bus with no provider answers ServiceUnknown; anything else that is not a
                    // Secret Service answers UnknownMethod or UnknownObject.
                    throw VaultError(.backendUnavailable, failure.message)
                }
                throw failure
            }
            self.bus = bus
            self.service = service
        }

        deinit {
            g_object_unref(UnsafeMutableRawPointer(service))
        }

        // MARK: Operations

        func lookup(_ key: CredentialKey, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> Lookup {
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

        func store(
            _ secret: Data, _ key: CredentialKey, label: String, contentType: SecretContentType,
            _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
        ) throws -> StoreOutcome {
            let attributes = Self.attributes(key, schema: SecretServiceStore.schemaName)
            defer { g_hash_table_unref(attributes) }
            let properties = tv_item_properties_new(label, attributes)
            defer { g_hash_table_unref(properties) }
            let value = secret.withUnsafeBytes { bytes -> OpaquePointer? in
                // secret_value_new copies the bytes (into libsecret's non-pageable memory).
                if let base = bytes.baseAddress, bytes.count > 0 {
                    return secret_value_new(base.assumingMemoryBound(to: gchar.self), gssize(bytes.count), contentType.rawValue)
                }
                return secret_value_new("", 0, contentType.rawValue)
            }
            guard let value else {
                throw VaultError(.io, "libsecret could not hold the secret while \(action).")
            }
            defer { secret_value_unref(UnsafeMutableRawPointer(value)) }

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
                    throw VaultError(
                        .backendUnavailable,
                        "The Secret Service has no default collection to keep \(key) in. Create a keyring and make it "
                            + "the default (for example in Seahorse), or use the encrypted file backend.")
                default:
                    throw failure
                }
            }
            let createdPath = String(cString: created)
            g_free(created)

            // One item per key: remove the other unlocked items for the same service and account,
            // such as one that `secret-tool store` made under its own schema, which CreateItem's
            // replace did not match. Locked duplicates in other collections cannot be touched.
            let found = try search(key, cancellable, action: action)
            for path in found.unlocked where path != createdPath {
                try deleteItem(path, cancellable, action: action)
            }
            return .saved
        }

        func remove(
            _ key: CredentialKey, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String
        ) throws -> (deleted: Bool, locked: [String]?) {
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
        func listPaths(service: String?, _ cancellable: UnsafeMutablePointer<GCancellable>, action: String) throws -> [String] {
            let attributes: OpaquePointer = tv_attributes_new()
            defer { g_hash_table_unref(attributes) }
            tv_attributes_set(attributes, "xdg:schema", SecretServiceStore.schemaName)
            if let service { tv_attributes_set(attributes, "service", service) }
            let found = try search(attributes, schema: false, cancellable, action: action)
            return found.unlocked + found.locked
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
