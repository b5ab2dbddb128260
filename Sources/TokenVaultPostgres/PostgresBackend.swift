// Owns: the PostgreSQL backend as a program registers it with TokenVault's backend plan.
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
public import Logging
public import TokenVault

/// The PostgreSQL backend, registered with ``VaultBackends`` so that a configuration naming
/// `postgres` (`TOKEN_VAULT_BACKEND=postgres`) opens it, as the other backends are opened:
///
/// ```swift
/// import TokenVault
/// import TokenVaultPostgres
///
/// VaultBackends.register(PostgresBackend())
/// let vault = try await Vault.open(.fromEnvironment())   // TOKEN_VAULT_BACKEND=postgres
/// ```
///
/// Where the vault is comes from `database`, or when that is `nil`, from the environment at each
/// open (`TOKEN_VAULT_DATABASE_URL`, `TOKEN_VAULT_DATABASE_PASSWORD_FILE`, and
/// `TOKEN_VAULT_DATABASE_CACHE` for the read cache). Every row is sealed on this host with the
/// configuration's key or passphrase, which this backend therefore requires.
public struct PostgresBackend: VaultBackend, StatusDescribingBackend {
    /// The database, or `nil` to read it from the environment when a vault is opened.
    public var database: PostgresStore.Configuration?
    /// How the store behaves; its `allowInsecurePermissions` and `createIfMissing` come from the
    /// ``VaultConfiguration`` of each open.
    public var options: PostgresStore.Options

    public init(database: PostgresStore.Configuration? = nil, options: PostgresStore.Options = PostgresStore.Options()) {
        self.database = database
        self.options = options
    }

    public var kind: BackendKind { .postgres }

    public func location(for configuration: VaultConfiguration) throws -> String {
        "\(try resolvedDatabase(configuration))"
    }

    public func open(_ configuration: VaultConfiguration, logger: Logger) async throws -> any CredentialStore {
        let database = try resolvedDatabase(configuration)
        guard let keySource = configuration.keySource else {
            throw VaultError(
                .backendUnavailable,
                "The postgres backend seals every entry on this host and needs a key: set TOKEN_VAULT_KEY_FILE or TOKEN_VAULT_PASSPHRASE_FILE (or --key-file, --passphrase-file).")
        }
        var options = self.options
        options.allowInsecurePermissions = configuration.allowInsecurePermissions
        options.createIfMissing = configuration.createIfMissing
        if self.database == nil { options.readCache = try PostgresStore.readCacheFromEnvironment() }
        return try await PostgresStore.open(database, keySource: keySource, options: options, logger: logger)
    }

    package func statusSection(for configuration: VaultConfiguration) throws -> (name: String, status: BackendStatus) {
        let database = try resolvedDatabase(configuration)
        return (
            "database",
            BackendStatus(
                rows: [("database:", "\(database) (sslmode \(database.tlsMode.rawValue))")],
                fields: [("location", .string("\(database)")), ("sslmode", .string(database.tlsMode.rawValue))])
        )
    }

    private func resolvedDatabase(_ configuration: VaultConfiguration) throws -> PostgresStore.Configuration {
        if let database { return database }
        return try PostgresStore.Configuration.fromEnvironment(allowInsecurePermissions: configuration.allowInsecurePermissions)
    }
}

extension PostgresStore: RekeyableStore, StatusReportingStore, ClosableStore {
    package func rekeyAll(to newSource: VaultConfiguration.KeySource, kdf: EncryptedFileStore.KDFParameters?) async throws -> Int {
        try await rekey(to: newSource, kdf: kdf)
    }

    package func statusReport() async throws -> BackendStatus {
        let status = try await status()
        return BackendStatus(
            rows: [
                ("server:", "PostgreSQL \(status.serverVersion)"), ("TLS:", status.tls ?? "none"),
                ("schema version:", "\(status.schemaVersion)"),
            ],
            fields: [
                ("server_version", .string(status.serverVersion)), ("tls", status.tls.map { .string($0) } ?? .null),
                ("schema_version", .int(status.schemaVersion)),
            ])
    }
}
#endif
