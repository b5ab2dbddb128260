import Testing
import TokenVault

@Suite struct VaultErrorTests {
    @Test func codesHaveStableNames() {
        #expect(VaultError.Code.notFound.description == "not-found")
        #expect(VaultError.Code.authenticationFailed.description == "authentication-failed")
        #expect(VaultError.Code.integrityFailure.description == "integrity-failure")
        #expect(VaultError.Code.backendUnavailable.description == "backend-unavailable")
        #expect(VaultError.Code.notFound != VaultError.Code.expired)
    }

    @Test func descriptionIsTheMessageAndDebugAddsContext() {
        let inner = VaultError(.io, "disk said no")
        let error = VaultError(.integrityFailure, "The vault file is damaged.", underlying: inner)
        #expect(error.description == "The vault file is damaged.")
        #expect(error.debugDescription.contains("integrity-failure"))
        #expect(error.debugDescription.contains("VaultErrorTests.swift"))
        #expect(error.debugDescription.contains("disk said no"))
    }
}
