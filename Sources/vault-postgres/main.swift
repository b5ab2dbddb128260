// The `vault` command with the PostgreSQL backend registered (TokenVaultPostgres). `vault` hands
// every command whose backend plan names postgres over to this program; it also runs any other
// command exactly as `vault` does.
#if CLI
import TokenVaultPostgres
import VaultCLI

VaultProgram.main(registering: [PostgresBackend()])
#else
// Built without the package trait CLI, which brings swift-argument-parser: say how to build it.
import Glibc

let message = "vault-postgres was built without its command line; build it with: swift build --traits CLI --product vault-postgres\n"
_ = message.withCString { write(2, $0, strlen($0)) }
exit(70)
#endif
