#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
import TokenVaultTesting
@testable import TokenVaultTestSupport
import TokenVault

/// ``StoreConformance/durableOnReturn(_:)`` for the Secret Service, on the shared keyring:
/// `secret-service-check` saves, answers, and is killed with SIGKILL as soon as the answer arrives.
@Suite(.timeLimit(.minutes(3))) struct SecretServiceDurabilityTests {
    @Test func secretServiceIsDurableOnReturn() async throws {
        let environment = try SharedKeyring.environment()
        try await StoreConformance.durableOnReturn(
            .init(
                saveInChildThenKill: { service in
                    let check = try await SecretServiceCheck.start(environment: environment)
                    let opened = try await check.send("open 30000 0")
                    try #require(opened.ok, "\(opened.fields)")
                    let value = "durable-\(UUID().uuidString)"
                    let saved = try await check.send("save \(service) acct \(value)")
                    check.kill()
                    try #require(saved.ok, "\(saved.fields)")
                    return (try CredentialKey(service: service, account: "acct"), Data(value.utf8))
                },
                reopen: { try await SharedKeyring.store() }
            ))
    }
}
#endif
