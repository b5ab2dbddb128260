import ArgumentParser
import TokenVault

extension VaultCommand {
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Say which backend the vault would use, and why."
        )

        func run() async throws {
            let configuration = try VaultConfiguration.fromEnvironment()
            let probe = await SecretServiceStore.probe(timeout: configuration.probeTimeout)
            print("Secret Service: \(probe.summary)")
            print("requested backend: \(configuration.backend)")
        }
    }
}
