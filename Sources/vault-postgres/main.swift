// The `vault` command with the PostgreSQL backend built in (TokenVaultPostgres). `vault` hands
// every command that names the postgres backend over to this program; it also runs any other
// command exactly as `vault` does.
import VaultCLI

VaultProgram.main(postgres: PostgresCommandBackend())
