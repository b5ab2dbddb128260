public import Foundation
public import Logging

/// PLACEHOLDER until the encrypted file backend lands: refuses to open.
public final class EncryptedFileStore: CredentialStore {
    public struct Options: Sendable {
        public var allowInsecurePermissions: Bool
        public init(allowInsecurePermissions: Bool = false) {
            self.allowInsecurePermissions = allowInsecurePermissions
        }
    }

    public var backendName: String { "file" }

    private init() {}

    public static func open(
        path: String, keySource: VaultConfiguration.KeySource, options: Options = Options(), logger: Logger = Vault.noopLogger
    ) async throws -> EncryptedFileStore {
        throw VaultError(.backendUnavailable, "The encrypted file backend is not built into this version yet.")
    }

    public func load(_ key: CredentialKey) async throws -> Data? { nil }
    public func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) async throws {}
    public func delete(_ key: CredentialKey) async throws -> Bool { false }
    public func keys(service: String?) async throws -> [CredentialKey] { [] }
}
