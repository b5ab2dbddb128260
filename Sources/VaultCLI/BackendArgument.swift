#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import TokenVault

/// The values of `--backend`, listed by help and by shell completion. The memory backend is not
/// one of them: `vault` runs once and exits, so a memory vault would lose every token it was given.
enum BackendArgument: String, CaseIterable, ExpressibleByArgument {
    case auto
    case secretService = "secret-service"
    case file
    /// The PostgreSQL backend (TokenVaultPostgres), configured by TOKEN_VAULT_DATABASE_URL.
    case postgres

    /// The library's configuration backend.
    var backend: VaultConfiguration.Backend {
        switch self {
        case .auto: .auto
        case .secretService: .secretService
        case .file: .file
        case .postgres: .postgres
        }
    }
}
#endif
