import Foundation
import Testing
import TokenVault

@Suite struct VaultConfigurationTests {
    @Test func readsTheEnvironment() throws {
        let configuration = try VaultConfiguration.fromEnvironment([
            "TOKEN_VAULT_BACKEND": "file",
            "TOKEN_VAULT_FILE": "/srv/app/tokens.vault",
            "TOKEN_VAULT_KEY_FILE": "/run/secrets/vault-key",
        ])
        #expect(configuration.backend == .file)
        #expect(configuration.filePath == "/srv/app/tokens.vault")
        guard case .keyFile(let path)? = configuration.keySource else {
            Issue.record("expected a key file")
            return
        }
        #expect(path == "/run/secrets/vault-key")
    }

    @Test func defaultsToAutoWithNoKey() throws {
        let configuration = try VaultConfiguration.fromEnvironment([:])
        #expect(configuration.backend == .auto)
        #expect(configuration.filePath == nil)
        #expect(configuration.keySource == nil)
    }

    @Test func passphraseFile() throws {
        let configuration = try VaultConfiguration.fromEnvironment(["TOKEN_VAULT_PASSPHRASE_FILE": "/p"])
        guard case .passphraseFile("/p")? = configuration.keySource else {
            Issue.record("expected a passphrase file")
            return
        }
    }

    @Test func refusesUnknownBackendAndBothKeySources() {
        let unknown = #expect(throws: VaultError.self) {
            try VaultConfiguration.fromEnvironment(["TOKEN_VAULT_BACKEND": "plaintext"])
        }
        #expect(unknown?.code == .invalidInput)
        #expect(unknown?.message.contains("secret-service") == true)
        let both = #expect(throws: VaultError.self) {
            try VaultConfiguration.fromEnvironment(["TOKEN_VAULT_KEY_FILE": "/k", "TOKEN_VAULT_PASSPHRASE_FILE": "/p"])
        }
        #expect(both?.code == .invalidInput)
    }

    @Test func allowInsecurePermissionsFromTheEnvironment() throws {
        #expect(try VaultConfiguration.fromEnvironment([:]).allowInsecurePermissions == false)
        for on in ["1", "true", "yes"] {
            #expect(try VaultConfiguration.fromEnvironment(["TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS": on]).allowInsecurePermissions)
        }
        for off in ["0", "false", "no", ""] {
            #expect(
                try VaultConfiguration.fromEnvironment(["TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS": off]).allowInsecurePermissions
                    == false)
        }
        // A value that says neither is refused rather than guessed.
        let error = #expect(throws: VaultError.self) {
            try VaultConfiguration.fromEnvironment(["TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS": "maybe"])
        }
        #expect(error?.code == .invalidInput)
        #expect(error?.message.contains("TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS") == true)
    }

    @Test func defaultFileFollowsXDG() {
        #expect(
            VaultConfiguration.defaultFilePath(environment: ["XDG_DATA_HOME": "/x/data", "HOME": "/home/u"])
                == "/x/data/token-vault/tokens.vault")
        #expect(
            VaultConfiguration.defaultFilePath(environment: ["HOME": "/home/u"])
                == "/home/u/.local/share/token-vault/tokens.vault")
        // A relative XDG_DATA_HOME is invalid per the spec and ignored.
        #expect(
            VaultConfiguration.defaultFilePath(environment: ["XDG_DATA_HOME": "rel", "HOME": "/home/u"])
                == "/home/u/.local/share/token-vault/tokens.vault")
    }
}
