internal import CSodium

/// libsodium's one-time initialisation, run before any other sodium call.
enum Sodium {
    private static let initialized: Bool = sodium_init() >= 0

    /// Initialises libsodium once per process. Throws if it cannot (no entropy source).
    static func ensureInitialized() throws {
        guard initialized else {
            throw VaultError(.io, "libsodium could not be initialised (no source of randomness).")
        }
    }
}
