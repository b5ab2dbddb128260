// The `vault` command without the PostgreSQL backend: postgres-nio and NIO are not in this binary,
// so a file or Secret Service command starts without loading them (swift-crypto is, for DPoP
// proofs, used only when an entry is DPoP-bound). A command whose
// backend plan names postgres is handed over to `vault-postgres` (VaultCLI's BackendHandoff).
#if CLI
import VaultCLI

VaultProgram.main()
#else
// Built without the package trait CLI, which brings swift-argument-parser: say how to build it.
import Glibc

let message = "vault was built without its command line; build it with: swift build --traits CLI --product vault\n"
_ = message.withCString { write(2, $0, strlen($0)) }
exit(70)
#endif
