public import FoundationEssentials

/// The time as TokenVault's refresh and grants see it, and how they wait.
///
/// Inject one in tests to make a token expire, or a device grant's polling interval pass, without
/// waiting for the real time: ``Vault/freshToken(for:leeway:timeout:client:)`` asks the client's
/// clock whether the stored token has expired, and ``TokenEndpointClient`` waits with its `sleep`
/// between retries and device polls.
public struct VaultClock: Sendable {
    /// The current time.
    public var now: @Sendable () -> Date
    /// Waits for the given duration; throws `CancellationError` when the task is cancelled.
    public var sleep: @Sendable (Duration) async throws -> Void

    public init(now: @escaping @Sendable () -> Date, sleep: @escaping @Sendable (Duration) async throws -> Void) {
        self.now = now
        self.sleep = sleep
    }

    /// The system's wall clock and `Task.sleep`.
    public static let system = VaultClock(now: { Date() }, sleep: { try await Task.sleep(for: $0) })
}
