// The `vault` command without the PostgreSQL backend, swift-crypto and jwt-kit: a cold file or
// Secret Service command neither loads nor scans them. A command that needs one of them (a
// postgres backend, `login`, `agent`, a DPoP proof) is handed over to `vault-full` (VaultCLI's
// BackendHandoff).
#if CLI
import VaultCLI

VaultProgram.main()
#else
// Built without the package trait CLI, which brings swift-argument-parser: say how to build it.
import TokenVaultSystem

let message = "vault was built without its command line; build it with: swift build --traits CLI --product vault\n"
_ = try? Array(message.utf8).withUnsafeBytes { bytes throws(Errno) in try SystemCall.writeAll(SystemCall.standardError, bytes) }
SystemCall.exit(70)
#endif
