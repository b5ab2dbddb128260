// `vault-full`: the `vault` command with everything `vault` leaves out of its own binary, so that a
// cold `vault get` does not pay for it: the PostgreSQL backend (postgres-nio), DPoP proofs
// (swift-crypto) and ID-token verification (jwt-kit). `vault` hands over to this program every
// command that needs one of them (VaultCLI's BackendHandoff); it also runs any other command
// exactly as `vault` does.
#if CLI
import TokenVault
import TokenVaultDPoP
import TokenVaultIDToken
import TokenVaultPostgres
import VaultCLI
import VaultCLIMigration

/// jwt-kit's verifier, as `vault login` asks for it.
struct JWKSVerifier: LoginIDTokenVerifying {
    func verify(_ token: OAuthToken, registration: ClientRegistration, nonce: String?, client: TokenEndpointClient) async throws
        -> OAuthToken
    {
        do {
            return try await IDTokenVerifier(registration: registration, client: client).verify(token: token, nonce: nonce)
        } catch let error as VaultError where error.underlying is IDTokenVerificationError {
            throw LoginIDTokenRefusal(error)
        }
    }
}

// DPoP-bound entries sign with swift-crypto (one registration, no work until a proof).
DPoP.install()
VaultProgram.main(registering: [PostgresBackend()], idTokens: JWKSVerifier(), migrator: DefaultsMigrator())
#else
// Built without the package trait CLI, which brings swift-argument-parser: say how to build it.
import TokenVaultSystem

var message = "vault-full was built without its command line; build it with: swift build --traits CLI --product vault-full\n"
message.withUTF8 { bytes in _ = try? SystemCall.writeAll(SystemCall.standardError, UnsafeRawBufferPointer(bytes)) }
SystemCall.exit(70)
#endif
