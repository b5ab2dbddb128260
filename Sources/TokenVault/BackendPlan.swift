internal import TokenVaultSystem

/// Which backend a configuration leads to, why, and what the Secret Service probe found: the one
/// place where the backend is chosen.
///
/// ``Vault/open(_:plan:logger:)`` opens what a plan says, and the `vault` command shows the same
/// plan in `vault status` and uses it for every other command, so a vault is always opened the
/// way its status describes. Making a plan opens nothing and creates nothing; it probes the
/// Secret Service when the choice depends on it (`auto`) and looks whether the vault file exists.
/// A Secret Service named explicitly is not probed: opening it connects anyway, and only when
/// that fails does ``Vault/open(_:plan:logger:)`` run the probe, to say why in its words.
///
/// The rules:
/// - A backend named explicitly is used or refused, never replaced by another.
/// - `auto` uses the Secret Service when its default collection is unlocked.
/// - A locked default collection under `auto` is not an absent one: when a prompt can unlock
///   it, the Secret Service is used (and prompts); otherwise the plan is refused with `locked`,
///   because writing to the file then would leave one key's history in two backends unseen.
///   Naming the file backend explicitly is the way to use the file on purpose.
/// - Otherwise (no session bus, no provider, no default collection, no answer in time) `auto`
///   uses the encrypted file. Nothing ever falls back to plain text.
/// - A backend that is not TokenVault's own (PostgreSQL) is used only when the program
///   registered it (``VaultBackends``); otherwise the plan is refused and names it, so
///   that a program can hand the command to one that has it.
public struct BackendPlan: Sendable, CustomStringConvertible {
    /// What the plan comes to.
    public enum Decision: Sendable {
        /// Use this backend.
        case use(BackendKind)
        /// Use none: opening would fail with this error (exit code 6 in the `vault` command).
        case refuse(VaultError)
    }

    /// The backend the configuration asked for.
    package let requested: VaultConfiguration.Backend
    /// The backend to use, or why none can be.
    public let decision: Decision
    /// Why, in words.
    public let reason: String
    /// What the Secret Service probe found, if it ran.
    public let probe: SecretServiceProbe?
    /// The configuration's vault file, whether or not it is used.
    package let filePath: String
    /// Whether something is at ``filePath``. Only a definite "no such file" counts as absent.
    package let fileExists: Bool
    /// Things a person should know, such as a vault file that `auto` leaves unused.
    public let warnings: [String]
    /// Where a registered backend's vault is, as it names it (a database without its password);
    /// `nil` for TokenVault's own backends, whose place is ``filePath`` or the Secret Service.
    package let location: String?
    /// The backend the configuration names that this program has not registered (see
    /// ``VaultBackends``): the plan is refused, and the `vault` command hands itself over to the
    /// program that has it (`vault-full`).
    package let unregisteredBackend: BackendKind?

    /// The backend to use, or `nil` when the plan is refused.
    package var backend: BackendKind? {
        if case .use(let backend) = decision { return backend }
        return nil
    }

    /// Whether the encrypted file will be opened.
    package var usesFile: Bool { backend == .file }

    /// The backend a registered ``VaultBackend`` opens, when the plan uses one.
    package var registeredBackend: (any VaultBackend)? {
        guard let backend, !backend.isBuiltIn else { return nil }
        return VaultBackends.backend(for: backend)
    }

    /// The backend that `configuration` names and this program has not registered, if any,
    /// decided without probing or opening anything: what ``unregisteredBackend`` of its plan
    /// will be. The `vault` command asks this before it reads or writes anything.
    package static func unregisteredBackend(for configuration: VaultConfiguration) -> BackendKind? {
        guard let kind = configuration.backend.kind, !VaultBackends.isAvailable(kind) else { return nil }
        return kind
    }

    /// The error opening would fail with, when the plan is refused.
    package var refusal: VaultError? {
        if case .refuse(let error) = decision { return error }
        return nil
    }

    public var description: String { "\(backend.map(\.rawValue) ?? "none"): \(reason)" }

    /// The plan for `configuration`.
    ///
    /// - Parameters:
    ///   - configuration: the backend, file and key to plan for.
    ///   - known: the `probe` argument: what ``SecretServiceStore/probe(timeout:environment:)``
    ///     already found, if the caller probed (to show it, say); `nil` probes here when the
    ///     choice needs it.
    public static func make(
        for configuration: VaultConfiguration, probe known: SecretServiceProbe? = nil
    ) async -> BackendPlan {
        let path = configuration.resolvedFilePath
        let file = configuration.backend == .memory ? FileState.absent : FileState(path)
        var probe = known
        // Only `auto` needs the probe to choose. A named Secret Service is connected to directly
        // (the probe's second connection and five calls took about a third of a cold `vault get`).
        if probe == nil, configuration.backend == .auto {
            probe = await SecretServiceStore.probe(timeout: configuration.probeTimeout)
        }
        let (decision, reason, location) = decide(configuration, probe: probe)
        var warnings: [String] = []
        if configuration.backend == .auto, case .use(.secretService) = decision, file.holdsData {
            warnings.append(
                "auto uses the Secret Service, but an encrypted file vault also exists at \(path) and is not used; its tokens are reached only with --backend file (TOKEN_VAULT_BACKEND=file). Keep each token in one backend."
            )
        }
        return BackendPlan(
            requested: configuration.backend, decision: decision, reason: reason, probe: probe, filePath: path,
            fileExists: file != .absent, warnings: warnings, location: location,
            unregisteredBackend: unregisteredBackend(for: configuration))
    }

    private static func decide(
        _ configuration: VaultConfiguration, probe: SecretServiceProbe?
    ) -> (Decision, String, location: String?) {
        if case .postgres = configuration.backend {
            return decideRegistered(.postgres, configuration)
        }
        let (decision, reason) = decideBuiltIn(configuration, probe: probe)
        return (decision, reason, nil)
    }

    /// A backend that a program registers: used when it is registered and its configuration says
    /// where its vault is; refused otherwise, never replaced by another.
    private static func decideRegistered(
        _ kind: BackendKind, _ configuration: VaultConfiguration
    ) -> (Decision, String, location: String?) {
        guard let backend = VaultBackends.backend(for: kind) else {
            return (
                .refuse(VaultError(
                    .backendUnavailable,
                    "The \(kind) backend is not part of this program. A program that uses TokenVault opens it once it registers it (import TokenVaultPostgres; VaultBackends.register(PostgresBackend())); the vault command hands such commands to vault-full."
                )),
                "the \(kind) backend was requested and is not registered in this program", nil
            )
        }
        do {
            let location = try backend.location(for: configuration)
            return (.use(kind), "the \(kind) backend was requested (\(location))", location)
        } catch let error as VaultError {
            return (.refuse(error), "the \(kind) backend was requested and is not configured (\(error.message))", nil)
        } catch {
            return (
                .refuse(VaultError(.invalidInput, "The \(kind) backend's configuration could not be read.", underlying: error)),
                "the \(kind) backend was requested and is not configured", nil
            )
        }
    }

    private static func decideBuiltIn(
        _ configuration: VaultConfiguration, probe: SecretServiceProbe?
    ) -> (Decision, String) {
        switch configuration.backend {
        case .postgres:
            preconditionFailure("decideRegistered plans the postgres backend")
        case .memory:
            return (.use(.memory), "the memory backend was requested; nothing persists")
        case .file:
            return (.use(.file), "the encrypted file was requested")
        case .secretService:
            guard let probe else { return (.use(.secretService), "the Secret Service was requested") }
            switch probe.outcome {
            case .available:
                return (.use(.secretService), "the Secret Service was requested and is available")
            case .locked where configuration.secretService.unlockPrompt && probe.canPrompt:
                // Fail closed only when nobody could unlock it: here a prompt can be shown.
                return (
                    .use(.secretService),
                    "the Secret Service was requested; its collection is locked and will be unlocked by a prompt"
                )
            default:
                return (
                    .refuse(probe.unavailableError(requestedExplicitly: true)),
                    "the Secret Service was requested and cannot be used (\(probe.summary))"
                )
            }
        case .auto:
            guard let probe else { return (.use(.file), "auto: the Secret Service was not probed") }
            switch probe.outcome {
            case .available:
                return (.use(.secretService), "auto: the Secret Service is available")
            case .locked where configuration.secretService.unlockPrompt && probe.canPrompt:
                return (
                    .use(.secretService),
                    "auto: the Secret Service's default collection is locked and will be unlocked by a prompt"
                )
            case .locked:
                let reason =
                    "auto: the Secret Service's default collection is locked (\(probe.detail)), and a locked keyring is not an absent one: tokens may be stored there"
                return (
                    .refuse(VaultError(
                        .locked,
                        "The Secret Service's default collection is locked and no unlock prompt can be shown, so auto uses no backend: writing to the encrypted file instead would keep this key's history in two places. Unlock the keyring (log in to the desktop session, or unlock the collection with your keyring tool), or use the encrypted file on purpose with --backend file (TOKEN_VAULT_BACKEND=file)."
                    )),
                    reason
                )
            default:
                return (.use(.file), "auto: the Secret Service is not usable (\(probe.summary))")
            }
        }
    }
}

/// Whether a vault file is there, without opening it.
private enum FileState: Equatable {
    case absent
    case present(size: Int64)
    /// Something is there, or may be (the path cannot be inspected): opening it will tell.
    case unknown

    init(_ path: String) {
        do {
            guard let status = try SystemCall.stat(path) else {
                self = .absent
                return
            }
            self = .present(size: status.size)
        } catch {
            self = error == .notDirectory ? .absent : .unknown
        }
    }

    /// Whether the file may hold entries: anything but an absent or empty file.
    var holdsData: Bool {
        switch self {
        case .absent: false
        case .present(let size): size > 0
        case .unknown: true
        }
    }
}
