public import Foundation
public import Logging

/// PLACEHOLDER until the Secret Service backend lands: reports honestly that it is not available.
public final class SecretServiceStore: CredentialStore {
    public var backendName: String { "secret-service" }

    public init(logger: Logger = Vault.noopLogger) throws {
        throw VaultError(.backendUnavailable, "The Secret Service backend is not built into this version yet.")
    }

    public static func probe(timeout: Duration = .seconds(2)) async -> SecretServiceProbe {
        SecretServiceProbe(
            outcome: .noProvider, detail: "the Secret Service backend is not built into this version yet", elapsed: .zero)
    }

    public func load(_ key: CredentialKey) async throws -> Data? { nil }
    public func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) async throws {}
    public func delete(_ key: CredentialKey) async throws -> Bool { false }
    public func keys(service: String?) async throws -> [CredentialKey] { [] }
}
