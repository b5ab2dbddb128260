public import FoundationEssentials
public import Logging
internal import CLibSecret

/// A ``CredentialStore`` in the desktop Secret Service (GNOME Keyring, KeePassXC, KWallet ≥ 5.97),
/// through libsecret.
///
/// **Items.** Each entry is one item in the default collection:
///
/// | | |
/// |---|---|
/// | schema (`xdg:schema` attribute) | `dev.tokenvault.Credential`, matched with `SECRET_SCHEMA_DONT_MATCH_NAME` |
/// | attributes | `service` and `account`: the ``CredentialKey``, in Unicode NFC |
/// | label | `"<service> token for <account>"` (`"<service> secret for <account>"` for opaque secrets) |
/// | secret | the stored bytes; content type `text/plain` for tokens and text, `application/octet-stream` otherwise |
///
/// Lookups match on `service` and `account` only, so the store and `secret-tool` interoperate:
///
/// ```sh
/// secret-tool lookup service github account octocat            # reads what TokenVault stored
/// secret-tool store --label=GitHub service github account octocat   # TokenVault can read it
/// ```
///
/// A save keeps exactly one item per key: it overwrites the secret of this schema's item for the
/// key (`Item.SetSecret`) or creates one, and then deletes any other unlocked item for the same
/// service and account (such as one that `secret-tool store` made under its own schema), so that
/// every reader sees the new value. Every save is read back: a provider that altered or refused the
/// secret (KeePassXC expands `{USERNAME}`-style placeholders and refuses `{REF:…}`) is an
/// `integrityFailure`, and the item is put back as it was. On gnome-keyring, which stores the bytes
/// it is given, never interprets them, and replaces an item without a dialog, a save has no
/// read-back: an overwrite is one search, the item's properties and one `SetSecret`, a new entry
/// one search, the lock and one `CreateItem` with replace; a get is one search and one read, a
/// delete one search and one `Delete`.
/// Listing is a search by schema: it finds this schema's items (an item `secret-tool store` made
/// joins them once TokenVault saves it, or if it was stored with
/// `xdg:schema dev.tokenvault.Credential`), and reads attributes only, never a secret. A locked
/// default collection is `locked` for every operation, listing included: KeePassXC hides the items
/// of a locked database from a search, so "absent" is never answered before the lock is checked.
/// Attributes and labels are not secret: any program of the same user can read them.
///
/// **Time bounds.** Every call has a deadline (``Options/timeout``, 10 s by default) and runs on
/// a thread of its own, never on Swift's cooperative pool. The store never triggers an unlock
/// prompt by surprise: when an item or the collection is locked, it asks the provider to unlock
/// only if ``Options/unlockPrompt`` allows it (by default: when a display is present), and then
/// waits up to ``Options/promptTimeout`` (2 minutes), long enough to type a password. Otherwise
/// it throws `locked` at once.
///
/// **Connections.** The store opens its own connection to the session bus and one encrypted
/// transfer session, once; each operation then costs about one D-Bus round trip per step (a
/// get is a search plus a read). It never autolaunches a bus and never exits the process when
/// the bus goes away, unlike GIO's shared session-bus connection. When the provider or the bus
/// restarts, the next call reconnects by itself: a long-running process needs no new store.
public final class SecretServiceStore: CredentialStore, @unchecked Sendable {  // GLib handles, used on GLibWorker's thread only
    /// How the store talks to the Secret Service.
    public struct Options: Sendable {
        /// The deadline of every call that does not wait for a person. Default 10 s.
        public var timeout: Duration
        /// Whether a locked collection may be unlocked by a prompt the provider shows. Default:
        /// only when a display is present (`DISPLAY` or `WAYLAND_DISPLAY` is set).
        public var unlockPrompt: Bool
        /// How long to wait for a person to answer an unlock prompt. Default 2 minutes.
        public var promptTimeout: Duration
        /// Whether the store, on gnome-keyring, subscribes to the provider's item signals once its
        /// first operation has finished, so that later operations skip the search for a key it
        /// knows. On by default; a short-lived program that makes an operation or two (the `vault`
        /// command) turns it off: the subscription costs two calls to the bus it would never
        /// recoup.
        public var watchesChanges: Bool

        public init(
            timeout: Duration = .seconds(10), unlockPrompt: Bool? = nil, promptTimeout: Duration = .seconds(120),
            watchesChanges: Bool = true
        ) {
            self.timeout = timeout
            self.unlockPrompt = unlockPrompt ?? SessionBus.displayPresentInProcess
            self.promptTimeout = promptTimeout
            self.watchesChanges = watchesChanges
        }
    }

    /// The schema name recorded in each item's `xdg:schema` attribute.
    package static let schemaName = TV_SCHEMA_NAME

    /// The largest secret this store accepts, 16 MiB. Larger secrets are refused with `tooLarge`
    /// before anything is sent.
    ///
    /// Measured against gnome-keyring 42: 16 MiB round-trips (about 2 s each way, as the secret
    /// is encrypted for the transfer and gnome-keyring rewrites its whole keyring file). A 64 MiB
    /// secret makes a bus with dbus-daemon's default 32 MiB message limit drop the connection.
    /// Tokens are a few kilobytes at most.
    public static let maximumSecretSize = 16 * 1024 * 1024

    public var backend: BackendKind { .secretService }

    /// One Secret Service per user session: its processes meet in the runtime directory.
    public func refreshLockPlacement() throws -> RefreshLockPlacement {
        try .runtimeLockFiles(scope: "secret-service", identity: "secret-service")
    }

    private let link: Link
    private let options: Options
    private let logger: Logger

    private init(connection: Connection, options: Options, logger: Logger) {
        self.link = Link(connection, watchesChanges: options.watchesChanges)
        self.options = options
        self.logger = logger
    }

    /// The store's connection, replaced when it goes stale (the provider or the bus restarted).
    /// Read and replaced only on ``GLibWorker/shared``'s thread, one job at a time.
    private final class Link: @unchecked Sendable {  // replaced only on GLibWorker's thread
        var connection: Connection?
        /// ``Options/watchesChanges``, for every connection the link makes.
        let watchesChanges: Bool
        init(_ connection: Connection, watchesChanges: Bool) {
            self.connection = connection
            self.watchesChanges = watchesChanges
        }
    }

    /// Connects to the Secret Service on the session bus and opens a transfer session.
    ///
    /// The session bus is the process's own (`DBUS_SESSION_BUS_ADDRESS`, or `$XDG_RUNTIME_DIR/bus`);
    /// none is ever autolaunched.
    /// - Throws: `backendUnavailable` when there is no session bus or no provider on it;
    ///   `timeout` when the bus or the provider does not answer within ``Options/timeout``.
    public static func open(options: Options = Options(), logger: Logger = Vault.noopLogger) async throws -> SecretServiceStore {
        if case .none(let reason) = SessionBus.resolve(environment: ProcessInfo.processInfo.environment) {
            throw VaultError(.backendUnavailable, "The Secret Service cannot be used: there is no D-Bus session bus (\(reason)).")
        }
        let timeout = options.timeout
        let watchesChanges = options.watchesChanges
        let onTimeout = { @Sendable in
            VaultError(.timeout, "The Secret Service did not answer within \(timeout) while connecting.")
        }
        // Connecting runs on the Secret Service thread, bounded by the deadline and its cancellable,
        // so that GIO queues the connection's callbacks (such as "closed", when the bus goes away)
        // on that thread's context, which is drained around every call. Queued on a context nobody
        // runs, they would keep a dead connection alive, and a restarted bus could never be reached.
        let connection = try await GLibWorker.shared.run(timeout: timeout, onTimeout: onTimeout) { cancellable in
            let connection = try Connection(bus: SessionBusReference(cancellable: cancellable.pointer), cancellable: cancellable.pointer)
            connection.watchesChanges = watchesChanges
            return connection
        }
        logger.debug("connected to the Secret Service")
        return SecretServiceStore(connection: connection, options: options, logger: logger)
    }

    // MARK: CredentialStore

    public func load(_ key: CredentialKey) async throws -> Data? {
        let action = "reading \(key)"
        for attempt in 0..<2 {
            switch try await call(action, { try $0.lookup(key, $1, action: action) }) {
            case .value(let secret):
                return secret
            case .absent:
                return nil
            case .locked(let paths):
                guard attempt == 0 else { break }
                try await unlock(paths, action: action)
            }
        }
        throw Self.stillLocked(action)
    }

    public func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) async throws {
        try await save(secret, for: key, contentType: contentType, wireContentType: Self.wireContentType(contentType))
    }

    /// The content type sent with a secret. Tokens (JSON) and text go as `text/plain`, which every
    /// provider hands back as text: KWallet returns a content type unchanged, and `secret-tool
    /// lookup` prints only `text/plain` secrets. Other bytes go as `application/octet-stream`,
    /// which KeePassXC keeps as an attachment, byte for byte. Reading never looks at the content
    /// type, so items stored earlier as `application/json` read as before.
    static func wireContentType(_ contentType: SecretContentType) -> String {
        contentType == .json || contentType == .text ? SecretContentType.text.rawValue : contentType.rawValue
    }

    /// ``save(_:for:contentType:)`` with the content type on the wire given as is (for tests that
    /// make items as earlier releases did).
    func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType, wireContentType: String) async throws {
        guard secret.count <= Self.maximumSecretSize else {
            throw VaultError(
                .tooLarge,
                "The secret for \(key) is \(secret.count) bytes; the Secret Service store takes at most \(Self.maximumSecretSize)."
            )
        }
        let action = "saving \(key)"
        let label = "\(key.service) \(contentType == .json ? "token" : "secret") for \(key.account)"
        for attempt in 0..<2 {
            switch try await call(action, { try $0.store(secret, key, label: label, wireContentType: wireContentType, $1, action: action) }) {
            case .saved:
                logger.debug("saved to the Secret Service", metadata: ["key": "\(key)"])
                return
            case .locked(let paths):
                guard attempt == 0 else { break }
                try await unlock(paths, action: action)
            }
        }
        throw Self.stillLocked(action)
    }

    @discardableResult
    public func delete(_ key: CredentialKey) async throws -> Bool {
        let action = "deleting \(key)"
        var deleted = false
        for attempt in 0..<2 {
            let outcome = try await call(action, { try $0.remove(key, $1, action: action) })
            deleted = deleted || outcome.deleted
            guard let locked = outcome.locked else { return deleted }
            guard attempt == 0 else { break }
            try await unlock(locked, action: action)
        }
        throw Self.stillLocked(action)
    }

    public func keys(service: String?) async throws -> [CredentialKey] {
        let action = service.map { "listing the entries of \($0)" } ?? "listing the entries"
        var paths: [String] = []
        for attempt in 0...2 {
            guard attempt < 2 else { throw Self.stillLocked(action) }
            let found = try await call(action, { try $0.listPaths(service: service, $1, action: action) })
            guard let locked = found.locked else {
                paths = found.paths
                break
            }
            guard attempt == 0 else { continue }
            try await unlock(locked, action: action)
        }
        var keys = Set<CredentialKey>()
        // Attributes are read one item at a time (the Secret Service has no bulk read), in
        // batches, so that each call's deadline covers a bounded amount of work.
        var start = paths.startIndex
        while start < paths.endIndex {
            let batch = Array(paths[start..<min(start + 256, paths.endIndex)])
            start += batch.count
            let found = try await call(action, { try $0.readKeys(batch, $1, action: action) })
            for entry in found {
                if let service, entry.service != service { continue }
                do {
                    keys.insert(try CredentialKey(storedService: entry.service, account: entry.account))
                } catch {
                    // Another program's item that cannot be a key (an empty or control-character
                    // name). It is not ours to list, and listing must not fail because of it.
                    logger.debug("skipped an item that is not a valid key", metadata: ["path": "\(entry.path)"])
                }
            }
        }
        return keys.sorted()
    }

    // MARK: Calls

    /// Runs `body` on the Secret Service thread, bounded by ``Options/timeout``.
    ///
    /// A connection that went stale (the provider restarted, so its transfer session is gone, or
    /// the bus itself restarted) is replaced first, within the same deadline; a call that fails as
    /// its connection goes stale is run once more on a new one. A long-running process therefore
    /// never needs a new store.
    private func call<Value: Sendable>(
        _ action: String,
        timeout: Duration? = nil,
        _ body: @escaping @Sendable (Connection, UnsafeMutablePointer<GCancellable>) throws -> Value
    ) async throws -> Value {
        let link = self.link
        let logger = self.logger
        let limit = timeout ?? options.timeout
        return try await GLibWorker.shared.run(
            timeout: limit,
            onTimeout: { VaultError(.timeout, "The Secret Service did not answer within \(limit) while \(action).") }
        ) { cancellable in
            do {
                let connection = try Self.current(link, cancellable.pointer, logger: logger)
                do {
                    return try body(connection, cancellable.pointer)
                } catch let error as VaultError {
                    // kwalletd5 5.103 now and then drops a client's transfer session while other
                    // clients open and close theirs, and then answers "Can't find session …":
                    // a new connection opens a new session (Backends.md).
                    if error.message.contains("Can't find session") { connection.sessionLost = true }
                    guard [.backendUnavailable, .io, .notFound].contains(error.code) || connection.sessionLost else {
                        throw error
                    }
                    GLibWorker.dispatchPendingSignals()
                    guard connection.isStale else { throw error }
                }
            }
            return try body(try Self.current(link, cancellable.pointer, logger: logger), cancellable.pointer)
        }
    }

    /// The link's connection, replaced by a new one if it is stale. Runs on the worker's thread.
    private static func current(
        _ link: Link, _ cancellable: UnsafeMutablePointer<GCancellable>, logger: Logger
    ) throws -> Connection {
        if let connection = link.connection, !connection.isStale { return connection }
        link.connection = nil
        // GIO hands out its shared session-bus connection, closed or not, for as long as anything
        // holds it: the old proxy's last references go with callbacks queued on this thread.
        GLibWorker.dispatchPendingSignals()
        let bus = try SessionBusReference(cancellable: cancellable)
        let connection = try Connection(bus: bus, cancellable: cancellable)
        connection.watchesChanges = link.watchesChanges
        link.connection = connection
        logger.debug("reconnected to the Secret Service")
        return connection
    }

    // MARK: For tests

    /// How many `SearchItems` calls this store's current connection has made, and how many changes
    /// of other clients it has been told of (``ItemPathCache/foreignChanges``).
    func searchCounters() async throws -> (searches: Int, foreignChanges: Int) {
        try await call("counting searches", { connection, _ in (connection.searches, connection.itemCache.foreignChanges) })
    }

    /// Gives every unlocked item of `key` the attributes of `newKey` in this store's schema, as
    /// another program might rename an item.
    func renameItems(of key: CredentialKey, to newKey: CredentialKey) async throws {
        let action = "renaming \(key)"
        try await call(action) { connection, cancellable in
            let attributes = Connection.attributes(newKey, schema: Self.schemaName)
            defer { g_hash_table_unref(attributes) }
            for path in try connection.search(key, cancellable, action: action).unlocked {
                var error: UnsafeMutablePointer<GError>?
                guard tv_item_set_attributes(connection.connection, path, attributes, -1, cancellable, &error) != 0 else {
                    throw GLibError.take(error, while: action)
                }
            }
        }
    }

    /// Asks the provider to unlock `paths`, which shows a prompt, if the options allow it.
    private func unlock(_ paths: [String], action: String) async throws {
        guard options.unlockPrompt else {
            throw VaultError(
                .locked,
                "The Secret Service collection is locked, so TokenVault could not finish \(action), and no unlock "
                    + "prompt can be shown here (no display). Unlock your keyring, for example by logging in to the "
                    + "desktop, or use the encrypted file backend.")
        }
        logger.debug("asking the Secret Service to unlock", metadata: ["items": "\(paths.count)"])
        let unlocked = try await call(
            "\(action) (waiting for the unlock prompt)", timeout: options.promptTimeout,
            { try $0.unlock(paths, $1, action: action) })
        guard unlocked > 0 else {
            throw VaultError(
                .locked,
                "The Secret Service collection stayed locked, so TokenVault could not finish \(action): "
                    + "the unlock prompt was dismissed or could not be shown.")
        }
    }

    private static func stillLocked(_ action: String) -> VaultError {
        VaultError(.locked, "The Secret Service collection was locked again before TokenVault could finish \(action).")
    }
}
