import Foundation
import Testing
import TokenVaultTesting
@testable import TokenVaultTestSupport
import TokenVault

import Glibc

/// ``StoreConformance/durableOnReturn(_:)`` for the encrypted file: `vault-file-stress` saves and
/// acknowledges, and is killed with SIGKILL as soon as the acknowledgement arrives.
@Suite struct DurabilityConformanceTests {
    @Test func encryptedFileIsDurableOnReturn() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let keyFile = try dir.keyFile()
        try await StoreConformance.durableOnReturn(
            .init(
                saveInChildThenKill: { service in
                    let child = try ChildProcess(
                        try Products.executable("vault-file-stress"), ["write", vault, keyFile, service, "-1"],
                        environment: ["PATH": "/usr/bin:/bin"], output: true)
                    defer { child.stop() }
                    let line = try await offPool { child.readLine() }
                    child.kill(SIGKILL)
                    try #require(line == "ack 0", "vault-file-stress said \(line ?? "nothing")")
                    return (try CredentialKey(service: service, account: "0"), FileTestSupport.helperValue(service: service, index: 0))
                },
                reopen: { try await EncryptedFileStore.open(path: vault, keySource: .keyFile(keyFile)) }
            ))
    }
}
