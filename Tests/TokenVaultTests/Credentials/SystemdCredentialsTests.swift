import Foundation
import Testing
import TokenVault

/// The key that systemd passes a service in `$CREDENTIALS_DIRECTORY`, found with no other setting,
/// and an explicit setting winning over it. The files are real, in a scratch directory.
@Suite struct SystemdCredentialsTests {
    /// A scratch credentials directory holding the named files.
    private func directory(_ names: [String]) throws -> String {
        let path = (NSTemporaryDirectory() as NSString).appendingPathComponent("tv-creds-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        for name in names {
            #expect(FileManager.default.createFile(
                atPath: (path as NSString).appendingPathComponent(name), contents: Data("x".utf8),
                attributes: [.posixPermissions: 0o400]))
        }
        return path
    }

    private func keyPath(_ source: VaultConfiguration.KeySource?) -> String? {
        switch source {
        case .keyFile(let path)?: "key:\(path)"
        case .passphraseFile(let path)?: "passphrase:\(path)"
        default: nil
        }
    }

    @Test func aKeyOrPassphraseCredentialIsUsedWithoutAnyOtherSetting() throws {
        let keys = try directory(["token-vault.key", "unrelated.cred"])
        defer { try? FileManager.default.removeItem(atPath: keys) }
        let fromKey = try VaultConfiguration.fromEnvironment(["CREDENTIALS_DIRECTORY": keys])
        #expect(keyPath(fromKey.keySource) == "key:\(keys)/token-vault.key")

        let passphrases = try directory(["token-vault.passphrase"])
        defer { try? FileManager.default.removeItem(atPath: passphrases) }
        let fromPassphrase = try VaultConfiguration.fromEnvironment(["CREDENTIALS_DIRECTORY": passphrases])
        #expect(keyPath(fromPassphrase.keySource) == "passphrase:\(passphrases)/token-vault.passphrase")
    }

    @Test func anExplicitSettingWins() throws {
        let keys = try directory(["token-vault.key"])
        defer { try? FileManager.default.removeItem(atPath: keys) }
        let key = try VaultConfiguration.fromEnvironment(["CREDENTIALS_DIRECTORY": keys, "TOKEN_VAULT_KEY_FILE": "/etc/other.key"])
        #expect(keyPath(key.keySource) == "key:/etc/other.key")
        let passphrase = try VaultConfiguration.fromEnvironment([
            "CREDENTIALS_DIRECTORY": keys, "TOKEN_VAULT_PASSPHRASE_FILE": "/etc/other.passphrase",
        ])
        #expect(keyPath(passphrase.keySource) == "passphrase:/etc/other.passphrase")
    }

    @Test func noUsableDirectoryMeansNoKey() throws {
        let empty = try directory(["something-else"])
        defer { try? FileManager.default.removeItem(atPath: empty) }
        for environment in [[:], ["CREDENTIALS_DIRECTORY": ""], ["CREDENTIALS_DIRECTORY": "relative/dir"],
            ["CREDENTIALS_DIRECTORY": empty], ["CREDENTIALS_DIRECTORY": "/nonexistent-\(UUID().uuidString)"]]
        {
            #expect(try VaultConfiguration.fromEnvironment(environment).keySource == nil, "\(environment)")
        }
    }

    @Test func bothCredentialsAreRefusedNotGuessedBetween() throws {
        let both = try directory(["token-vault.key", "token-vault.passphrase"])
        defer { try? FileManager.default.removeItem(atPath: both) }
        do {
            _ = try VaultConfiguration.fromEnvironment(["CREDENTIALS_DIRECTORY": both])
            Issue.record("chose one of two credentials")
        } catch let error as VaultError {
            #expect(error.code == .invalidInput)
            #expect(error.message.contains("token-vault.key") && error.message.contains("token-vault.passphrase"))
        }
    }

    @Test func theOriginNamesTheSystemdCredential() throws {
        let keys = try directory(["token-vault.key"])
        defer { try? FileManager.default.removeItem(atPath: keys) }
        let environment = ["CREDENTIALS_DIRECTORY": keys]
        let source = try #require(try VaultConfiguration.fromEnvironment(environment).keySource)
        #expect(source.origin(environment: environment) == "key file \(keys)/token-vault.key (systemd credential token-vault.key in $CREDENTIALS_DIRECTORY)")
        #expect(VaultConfiguration.KeySource.keyFile("/etc/k").origin(environment: environment) == "key file /etc/k")
    }
}
