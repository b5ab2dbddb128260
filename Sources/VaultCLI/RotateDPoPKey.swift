#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import TokenVault

extension VaultCommand {
    struct RotateDPoPKey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-dpop-key",
            abstract: "Give a DPoP-bound entry a new DPoP key; its grant must then be renewed with a new login.",
            discussion: """
                The entry's tokens are bound to its DPoP key (RFC 9449): the server refuses them, the \
                refresh token included, with any other key. So the new key needs a new grant: the old \
                key is forgotten, the entry keeps its client registration and is marked "log in \
                again" (vault get --fresh exits 7), and vault login SERVICE [ACCOUNT] --dpop gets the \
                new grant (a login makes a new key by itself, so this command is for retiring a key \
                now, ahead of the login). The key is never shown; the new thumbprint (jkt) is.
                """)

        @OptionGroup var global: GlobalOptions
        @OptionGroup var entry: EntryArguments

        @Option(name: .customLong("dpop-alg"), help: ArgumentHelp("ES256 or EdDSA (default: the old key's).", valueName: "alg"))
        var algorithm: String?

        func validate() throws {
            try global.validateConfiguration()
            if let algorithm, DPoPAlgorithm(named: algorithm) == nil { throw ValidationError("--dpop-alg must be ES256 or EdDSA.") }
        }

        func run() async throws {
            let key = try entry.key()
            let vault: Vault
            switch try await global.openExistingVault() {
            case .opened(let opened, _): vault = opened
            case .noVaultYet(let path, _):
                throw VaultError.nothingStored(for: key, noVaultAt: path)
            }
            let thumbprint = try await vault.rotateDPoPKey(for: key, algorithm: algorithm.flatMap(DPoPAlgorithm.init(named:)))
            let account = key.account == CredentialKey.defaultAccount ? "" : " \(CredentialKey.escaped(key.account))"
            try Output.note(
                "Rotated the DPoP key of \(key) (new jkt \(thumbprint)). Its tokens were bound to the old key, which is forgotten: a new grant is needed. Log in again: vault login \(CredentialKey.escaped(key.service))\(account) --dpop (with the same endpoint options).")
        }
    }
}
#endif
