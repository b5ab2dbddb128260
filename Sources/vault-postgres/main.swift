// The `vault` command with the PostgreSQL backend registered (TokenVaultPostgres). `vault` hands
// every command whose backend plan names postgres over to this program; it also runs any other
// command exactly as `vault` does.
import TokenVaultPostgres
import VaultCLI

VaultProgram.main(registering: [PostgresBackend()])
