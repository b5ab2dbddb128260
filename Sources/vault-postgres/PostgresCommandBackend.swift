// Owns: VaultCLI's PostgresBackend seam, implemented with TokenVaultPostgres.
import TokenVault
import TokenVaultPostgres
import VaultCLI

/// Opens the vault of TOKEN_VAULT_DATABASE_URL (with TOKEN_VAULT_DATABASE_PASSWORD_FILE and
/// TOKEN_VAULT_DATABASE_CACHE), as every `vault` subcommand uses it.
struct PostgresCommandBackend: PostgresBackend {
    func database() throws -> (location: String, sslmode: String) {
        let database = try PostgresStore.Configuration.fromEnvironment()
        return ("\(database)", database.tlsMode.rawValue)
    }

    func open(keySource: VaultConfiguration.KeySource, allowInsecurePermissions: Bool, createIfMissing: Bool) async throws
        -> any OpenedPostgresVault
    {
        let database = try PostgresStore.Configuration.fromEnvironment(allowInsecurePermissions: allowInsecurePermissions)
        let store = try await PostgresStore.open(
            database, keySource: keySource,
            options: PostgresStore.Options(
                allowInsecurePermissions: allowInsecurePermissions, createIfMissing: createIfMissing,
                readCache: try PostgresStore.readCacheFromEnvironment()))
        return Opened(store: store, vault: Vault(store: store, reason: "the postgres backend was requested (\(database))"))
    }

    struct Opened: OpenedPostgresVault {
        let store: PostgresStore
        let vault: Vault

        var location: String { "\(store.configuration)" }

        func rekey(to newSource: VaultConfiguration.KeySource, kdf: EncryptedFileStore.KDFParameters?) async throws -> Int {
            try await store.rekey(to: newSource, kdf: kdf)
        }

        func status() async throws -> PostgresVaultStatus {
            let status = try await store.status()
            return PostgresVaultStatus(
                serverVersion: status.serverVersion, tls: status.tls, schemaVersion: status.schemaVersion, entries: status.entries)
        }

        func close() { store.close() }
    }
}
