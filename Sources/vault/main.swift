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

var message = "vault was built without its command line; build it with: swift build --traits CLI --product vault\n"
message.withUTF8 { bytes in _ = try? SystemCall.writeAll(SystemCall.standardError, UnsafeRawBufferPointer(bytes)) }
SystemCall.exit(70)
#endif
