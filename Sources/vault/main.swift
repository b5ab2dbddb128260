// The `vault` command without the PostgreSQL backend: postgres-nio, NIO and BoringSSL are not in
// this binary, so a file or Secret Service command starts without loading them. A command whose
// backend plan names postgres is handed over to `vault-postgres` (VaultCLI's BackendHandoff).
import VaultCLI

VaultProgram.main()
