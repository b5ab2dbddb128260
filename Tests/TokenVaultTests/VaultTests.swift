import Foundation
import Testing
@testable import TokenVaultTestSupport
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
        #expect(try await vault.delete(key))
        #expect(try await vault.token(for: key) == nil)
        #expect(try await vault.delete(key) == false)
    }

    @Test func opaqueSecretIsNotAToken() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "api", account: "ci")
        try await vault.saveSecret(Data("plain api key".utf8), for: key)
        #expect(try await vault.secret(for: key) == Data("plain api key".utf8))
        let error = await #expect(throws: VaultError.self) { try await vault.token(for: key) }
        #expect(error?.code == .invalidInput)
        #expect(error.map { !"\($0)".contains("plain api key") } == true)
        // Neutral: the library does not know whether its caller is Swift code or a command.
        #expect(error?.message == "The entry api/ci holds an opaque secret, not a token.")
    }

    @Test func memoryBackendByConfiguration() async throws {
        let vault = try await Vault.open(VaultConfiguration(backend: .memory))
        #expect(vault.selection.backend == .memory)
        #expect(vault.selection.probe == nil)
    }

    /// Read-only callers open with `createIfMissing = false`: a missing vault is an error, and
    /// nothing is created on disk: no file, no lock file, no directory.
    @Test func fileBackendWithoutCreateLeavesNoTrace() async throws {
        let dir = try TemporaryDirectory()
        let key = try FileTestSupport.keyFile(in: dir)
        for path in [dir.file("tokens.vault"), dir.file("sub/dir/tokens.vault")] {
            var configuration = VaultConfiguration(backend: .file, filePath: path, keySource: .keyFile(key))
            configuration.createIfMissing = false
            let error = await #expect(throws: VaultError.self) { try await Vault.open(configuration) }
            #expect(error?.code == .backendUnavailable)
            #expect(error?.message.contains(path) == true)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["key"], "nothing was created")

        // The default still creates, as it always did.
        #expect(VaultConfiguration().createIfMissing)
        let created = try await Vault.open(
            VaultConfiguration(backend: .file, filePath: dir.file("sub/tokens.vault"), keySource: .keyFile(key)))
        #expect(created.selection.backend == .file)
        #expect(FileManager.default.fileExists(atPath: dir.file("sub/tokens.vault")))
    }

    @Test func fileBackendWithoutAKeyFailsClosed() async throws {
        let error = await #expect(throws: VaultError.self) {
            try await Vault.open(VaultConfiguration(backend: .file, filePath: "/nonexistent/tokens.vault"))
        }
        #expect(error?.code == .backendUnavailable)
        #expect(error?.message.contains("TOKEN_VAULT_KEY_FILE") == true)
    }
}
