// The `vault` command without the PostgreSQL backend: postgres-nio, NIO and BoringSSL are not in
// this binary, so a file or Secret Service command starts without loading them. A command that
// names the postgres backend is handed over to `vault-postgres` (VaultCLI's PostgresHandoff).
import VaultCLI

VaultProgram.main(postgres: nil)
