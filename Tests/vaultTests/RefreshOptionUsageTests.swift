#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// The refresh options of `vault set` and `vault login` are checked while the command line is
/// parsed: a mistake in them is a usage error (64) that shows the subcommand's own usage, before
/// anything is read or a vault is created.
@Suite struct RefreshOptionUsageTests {
    @Test(arguments: [
        ["set", "github", "--token-url", "https://auth.example.com/token"],
        ["set", "github", "--client-id", "cli"],
        ["set", "github", "--token-url", "https://auth.example.com/token", "--client-id", "cli", "--param", "no-equals-sign"],
        ["set", "github", "--token-url", "https://auth.example.com/token", "--client-id", "cli", "--client-auth", "post"],
        ["set", "github", "--token-url", "https://auth.example.com/token", "--client-id", "cli", "--client-auth", "mtls",
         "--client-secret-file", "/nonexistent"],
        ["login", "github", "--device-url", "https://auth.example.com/device", "--token-url", "https://auth.example.com/token",
         "--client-id", "cli", "--param", "=value"],
    ])
    func aRefreshOptionMistakeShowsTheSubcommandsUsage(_ arguments: [String]) throws {
        let sandbox = try CLISandbox()
        let result = try sandbox.run("vault", arguments + sandbox.fileVault, stdin: Data("gho_fakeUsage1\n".utf8))
        #expect(result.status == 64, "\(arguments): \(result)")
        #expect(result.stderr.contains("Usage: vault \(arguments[0])"), "\(arguments): \(result)")
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path), "\(arguments) created the vault")
    }
}
#endif
