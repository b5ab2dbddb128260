/// What ``SecretServiceStore/probe(timeout:environment:)`` found out about the desktop Secret Service.
public struct SecretServiceProbe: Sendable, CustomStringConvertible {
    /// The finding.
    public enum Outcome: String, Sendable, Hashable, CustomStringConvertible {
        /// `DBUS_SESSION_BUS_ADDRESS` is unset, or the bus does not answer.
        case noSessionBus = "no-session-bus"
        /// The bus answers, but nothing owns `org.freedesktop.secrets`.
        case noProvider = "no-provider"
        /// A provider answers, but it has no default collection.
        case noDefaultCollection = "no-default-collection"
        /// The default collection is locked.
        case locked
        /// The default collection is unlocked and usable.
        case available
        /// The probe did not finish within its timeout.
        case timedOut = "timed-out"

        public var description: String { rawValue }
    }

    /// The finding.
    public let outcome: Outcome
    /// For ``Outcome/locked``: whether an unlock prompt could be shown (a display is present).
    public let canPrompt: Bool
    /// Details in words, such as the bus error.
    public let detail: String
    /// How long the probe took.
    public let elapsed: Duration

    package init(outcome: Outcome, canPrompt: Bool = false, detail: String, elapsed: Duration) {
        self.outcome = outcome
        self.canPrompt = canPrompt
        self.detail = detail
        self.elapsed = elapsed
    }

    /// One line for a person.
    public var summary: String {
        switch outcome {
        case .noSessionBus: "no D-Bus session bus: \(detail)"
        case .noProvider: "no Secret Service provider on the session bus: \(detail)"
        case .noDefaultCollection: "the Secret Service has no default collection: \(detail)"
        case .locked:
            canPrompt
                ? "the default collection is locked (a prompt could be shown): \(detail)"
                : "the default collection is locked and no prompt can be shown: \(detail)"
        case .available: "the Secret Service is available: \(detail)"
        case .timedOut: "the Secret Service did not answer in time: \(detail)"
        }
    }

    public var description: String { summary }

    /// The error that a caller who asked for the Secret Service explicitly gets.
    func unavailableError(requestedExplicitly: Bool) -> VaultError {
        let code: VaultError.Code = outcome == .locked ? .locked : .backendUnavailable
        return VaultError(code, "The Secret Service cannot be used: \(summary).")
    }
}
