import ArgumentParser
import TokenVault

@main
struct VaultCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vault",
        abstract: "Keep OAuth tokens and other credentials in the Secret Service or an encrypted file.",
        version: TokenVaultVersion.current,
        subcommands: [Status.self]
    )
}
