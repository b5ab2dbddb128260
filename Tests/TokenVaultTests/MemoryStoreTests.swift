import Foundation
import Testing
import TokenVaultTesting
@testable import TokenVaultTestSupport
import TokenVault

@Suite struct MemoryStoreTests {
    @Test(arguments: StoreConformance.cases)
    func conformance(_ check: StoreConformance.Case) async throws {
        try await check.run(on: MemoryStore())
    }
}
