import Foundation
import Testing
import TokenVault

/// The facade's typed API, over the memory backend.
@Suite struct VaultTests {
    @Test func tokenRoundTripThroughTheStoredForm() async throws {
        let store = MemoryStore()
        let vault = Vault(store: store)
        let key = try CredentialKey(service: "github", account: "octocat")
        let token = try OAuthToken(
            tokenResponse: #"{"access_token":"at-1234567890abcdef","refresh_token":"rt-1234567890abcdef","expires_in":3600}"#)
        try await vault.saveToken(token, for: key)
        #expect(try await vault.token(for: key) == token)
        // What the backend holds is the documented stored form.
        let raw = try #require(await store.load(key))
        #expect(try OAuthToken(storedForm: raw) == token)
        #expect(try await vault.keys() == [key])
        #expect(try await vault.deleteToken(for: key))
        #expect(try await vault.token(for: key) == nil)
        #expect(try await vault.deleteToken(for: key) == false)
    }

    @Test func opaqueSecretIsNotAToken() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "api", account: "ci")
        try await vault.saveSecret(Data("plain-api-key".utf8), for: key)
        #expect(try await vault.secret(for: key) == Data("plain-api-key".utf8))
        let error = await #expect(throws: VaultError.self) { try await vault.token(for: key) }
        #expect(error?.code == .invalidInput)
        #expect(error.map { !"\($0)".contains("plain-api-key") } == true)
    }

    @Test func memoryBackendByConfiguration() async throws {
        let vault = try await Vault.open(VaultConfiguration(backend: .memory))
        #expect(vault.selection.backend == .memory)
        #expect(vault.selection.probe == nil)
    }

    @Test func fileBackendWithoutAKeyFailsClosed() async throws {
        let error = await #expect(throws: VaultError.self) {
            try await Vault.open(VaultConfiguration(backend: .file, filePath: "/nonexistent/tokens.vault"))
        }
        #expect(error?.code == .backendUnavailable)
        #expect(error?.message.contains("TOKEN_VAULT_KEY_FILE") == true)
    }
}
