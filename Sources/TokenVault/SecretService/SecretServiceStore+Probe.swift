public import FoundationEssentials
internal import TokenVaultSystem
internal import CLibSecret

extension SecretServiceStore {
    /// Finds out, within `timeout`, whether the desktop Secret Service can be used here.
    ///
    /// It tells apart: no session bus (``SecretServiceProbe/Outcome/noSessionBus``), no provider
    /// on the bus (``SecretServiceProbe/Outcome/noProvider``), a provider without a default
    /// collection (``SecretServiceProbe/Outcome/noDefaultCollection``), a locked default
    /// collection (``SecretServiceProbe/Outcome/locked``, with whether a prompt could be shown),
    /// and ``SecretServiceProbe/Outcome/available``.
    ///
    /// It answers within `timeout` in every case, and never hangs:
    /// - it never autolaunches a bus (it uses `DBUS_SESSION_BUS_ADDRESS` or `$XDG_RUNTIME_DIR/bus`);
    /// - it never asks for an unlock, so no prompter is spawned;
    /// - it runs on a thread of its own; when the time is up it answers
    ///   ``SecretServiceProbe/Outcome/timedOut`` at once, whatever the bus is doing.
    ///
    /// A provider that is not running but can be started by D-Bus activation (as GNOME Keyring
    /// usually is) is started, within the same time bound.
    public static func probe(
        timeout: Duration = .seconds(2),
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) async -> SecretServiceProbe {
        let clock = ContinuousClock()
        let start = clock.now
        let canPrompt = SessionBus.displayPresent(environment: environment)
        let address: String
        switch SessionBus.resolve(environment: environment) {
        case .none(let reason):
            return SecretServiceProbe(outcome: .noSessionBus, detail: reason, elapsed: clock.now - start)
        case .address(let found):
            address = found
        }
        let deadline = start.advanced(by: timeout)
        do {
            let (outcome, detail) = try await GLibWorker.detached.run(
                timeout: timeout,
                onTimeout: { VaultError(.timeout, "no answer within \(timeout)") }
            ) { cancellable in
                ProbeSteps(address: address, deadline: deadline, cancellable: cancellable.pointer).run()
            }
            return SecretServiceProbe(
                outcome: outcome, canPrompt: outcome == .locked && canPrompt, detail: detail, elapsed: clock.now - start)
        } catch let error as VaultError where error.code == .timeout {
            return SecretServiceProbe(
                outcome: .timedOut, detail: "no answer from the bus at \(address) within \(timeout)",
                elapsed: clock.now - start)
        } catch {
            return SecretServiceProbe(
                outcome: .timedOut, detail: "the probe was cancelled", elapsed: clock.now - start)
        }
    }
}

/// The probe's D-Bus calls, in order, each bounded by what is left of the deadline.
private struct ProbeSteps {
    let address: String
    let deadline: ContinuousClock.Instant
    let cancellable: UnsafeMutablePointer<GCancellable>

    private static let busName = "org.freedesktop.secrets"

    /// Milliseconds left, at least 1 (GDBus reads 0 as "no timeout" and -1 as "the default").
    private var remaining: Int32 {
        let left = deadline - ContinuousClock().now
        let milliseconds = left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000
        return Int32(clamping: max(1, milliseconds))
    }

    func run() -> (SecretServiceProbe.Outcome, String) {
        var error: UnsafeMutablePointer<GError>?
        guard let connection = tv_bus_connect(address, cancellable, &error) else {
            return (.noSessionBus, "the bus at \(address) does not answer: \(Self.describe(&error))")
        }
        defer {
            g_dbus_connection_close(connection, nil, nil, nil)
            g_object_unref(UnsafeMutableRawPointer(connection))
        }

        var owned: gboolean = 0
        guard tv_name_has_owner(connection, Self.busName, remaining, cancellable, &owned, &error) != 0 else {
            return (.noSessionBus, "the session bus does not answer: \(Self.describe(&error))")
        }
        if owned == 0 {
            var activatable: gboolean = 0
            guard tv_name_is_activatable(connection, Self.busName, remaining, cancellable, &activatable, &error) != 0 else {
                return (.noSessionBus, "the session bus does not answer: \(Self.describe(&error))")
            }
            guard activatable != 0 else {
                return (.noProvider, "nothing owns \(Self.busName), and the bus has no service to start for it")
            }
            guard tv_start_service(connection, Self.busName, remaining, cancellable, &error) != 0 else {
                return (.noProvider, "\(Self.busName) could not be started: \(Self.describe(&error))")
            }
        }

        // gnome-keyring answers "/" whenever its own lookup of the aliased collection fails at that
        // instant, which happened once in a few hundred probes while other clients wrote to the
        // same keyring; a provider that really has no default collection answers "/" every time.
        // So "/" is asked again twice, 50 ms apart, while the deadline allows.
        var collection = "/"
        for attempt in 0..<3 {
            if attempt > 0 {
                guard remaining > 100 else { break }
                SystemCall.sleep(seconds: 0.05)
            }
            guard let aliasPath = tv_read_alias(connection, "default", remaining, cancellable, &error) else {
                return (.noProvider, "\(Self.busName) does not answer as a Secret Service: \(Self.describe(&error))")
            }
            collection = String(cString: aliasPath)
            g_free(aliasPath)
            if collection != "/" { break }
        }
        guard collection != "/" else {
            return (.noDefaultCollection, "no collection has the alias 'default'")
        }

        var locked: gboolean = 0
        guard tv_collection_is_locked(connection, collection, remaining, cancellable, &locked, &error) != 0 else {
            return (.noDefaultCollection, "the default collection \(collection) cannot be read: \(Self.describe(&error))")
        }
        if locked != 0 {
            return (.locked, "the default collection is \(collection)")
        }
        return (.available, "the default collection \(collection) is unlocked")
    }

    /// The error's message, freeing it. GDBus messages name methods and addresses, never secrets.
    private static func describe(_ error: inout UnsafeMutablePointer<GError>?) -> String {
        guard let current = error else { return "no detail" }
        defer {
            g_error_free(current)
            error = nil
        }
        if g_dbus_error_is_remote_error(current) != 0 {
            _ = g_dbus_error_strip_remote_error(current)
        }
        return current.pointee.message.map { String(cString: $0) } ?? "no detail"
    }
}
