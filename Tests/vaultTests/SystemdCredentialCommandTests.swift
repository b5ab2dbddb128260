#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

import Glibc

/// `vault` run as a systemd service runs it: the key in `$CREDENTIALS_DIRECTORY` and no other
/// setting. The directory is a scratch one, as systemd would make it (0700 directory, 0400 file);
/// the encrypted variant goes through the real `systemd-creds encrypt` and `decrypt` with a
/// scratch host secret (SYSTEMD_CREDENTIAL_SECRET), which is what `LoadCredentialEncrypted=` does
/// at service start. (A real unit cannot be started here: the test machine has no systemd as PID 1.)
@Suite struct SystemdCredentialCommandTests {
    /// A credentials directory holding `token-vault.key` with the contents of `keyFile`.
    private func credentials(_ sandbox: CLISandbox, _ name: String, key: Data) throws -> URL {
        let directory = sandbox.root.appendingPathComponent(name)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let file = directory.appendingPathComponent("token-vault.key")
        #expect(FileManager.default.createFile(atPath: file.path, contents: key, attributes: [.posixPermissions: 0o400]))
        return directory
    }

    @Test func theKeyComesFromTheCredentialsDirectoryAndStatusSaysSo() throws {
        let sandbox = try CLISandbox()
        let directory = try credentials(sandbox, "credentials", key: try Data(contentsOf: sandbox.keyFile))
        let environment = ["CREDENTIALS_DIRECTORY": directory.path]
        let tokens = FakeTokens()

        // No --backend, --file or --key-file: auto finds no session bus, and the file vault's key
        // comes from the credential.
        let set = try sandbox.run("vault", ["set", "svc"], stdin: Data("\(tokens.access)\n".utf8), environment: environment)
        #expect(set.status == 0, "\(set)")
        let get = try sandbox.run("vault", ["get", "svc"], environment: environment)
        #expect(get.status == 0 && get.stdout == "\(tokens.access)\n", "\(get)")
        let status = try sandbox.run("vault", ["status"], environment: environment)
        #expect(status.status == 0, "\(status)")
        #expect(status.stdout.contains("key file \(directory.path)/token-vault.key (systemd credential token-vault.key in $CREDENTIALS_DIRECTORY)"), "\(status.stdout)")
        let json = try sandbox.run("vault", ["status", "--json"], environment: environment)
        let file = try #require(((json.json as? [String: Any])?["file"] as? [String: Any]))
        #expect((file["key"] as? String)?.contains("systemd credential") == true, "\(json.stdout)")

        // The sandbox's vault was made with that key; the same key given explicitly opens it too.
        #expect(try sandbox.run("vault", ["get", "svc", "--key-file", sandbox.keyFile.path], environment: environment).status == 0)
        // An explicit setting wins: another key is used, not the credential's, and it is wrong.
        let other = sandbox.root.appendingPathComponent("other.key")
        try CLISandbox.writeKeyFile(other)
        let wrongByOption = try sandbox.run("vault", ["get", "svc", "--key-file", other.path], environment: environment)
        #expect(wrongByOption.status == 4, "\(wrongByOption)")
        let wrongByEnvironment = try sandbox.run(
            "vault", ["get", "svc"], environment: environment.merging(["TOKEN_VAULT_KEY_FILE": other.path]) { $1 })
        #expect(wrongByEnvironment.status == 4, "\(wrongByEnvironment)")
        for result in [set, get, status, wrongByOption, wrongByEnvironment] {
            #expect(!result.stderr.contains(tokens.access))
        }
    }

    /// A credentials directory holding both a key and a passphrase leaves the choice to chance
    /// and is refused; but a key or passphrase given explicitly (option or environment) is the one
    /// meant, and the directory is then not consulted at all.
    @Test func anExplicitKeyWinsOverACredentialsDirectoryHoldingBoth() throws {
        let sandbox = try CLISandbox()
        let directory = try credentials(sandbox, "credentials", key: try Data(contentsOf: sandbox.keyFile))
        let passphrase = directory.appendingPathComponent("token-vault.passphrase")
        #expect(FileManager.default.createFile(
            atPath: passphrase.path, contents: Data("correct horse battery staple\n".utf8), attributes: [.posixPermissions: 0o400]))
        let environment = ["CREDENTIALS_DIRECTORY": directory.path]
        let tokens = FakeTokens()
        let set = try sandbox.run("vault", ["set", "svc"] + sandbox.fileVault, stdin: Data("\(tokens.access)\n".utf8))
        #expect(set.status == 0, "\(set)")

        // Nothing explicit: refused, naming both files, with exit 1 and no usage text (the
        // command line is not at fault), by `get` and by `status` alike.
        for arguments in [["get", "svc"], ["status"]] {
            let ambiguous = try sandbox.run("vault", arguments + ["--file", sandbox.vaultFile.path], environment: environment)
            #expect(ambiguous.status == 1, "\(ambiguous)")
            #expect(ambiguous.stderr.contains("holds both"), "\(ambiguous)")
            #expect(!ambiguous.stderr.contains("Usage:"), "\(ambiguous)")
        }

        // --key-file, before or after the subcommand, and TOKEN_VAULT_KEY_FILE: the vault opens.
        for arguments in [
            ["get", "svc", "--file", sandbox.vaultFile.path, "--key-file", sandbox.keyFile.path],
            ["--key-file", sandbox.keyFile.path, "get", "svc", "--file", sandbox.vaultFile.path],
        ] {
            let byOption = try sandbox.run("vault", arguments, environment: environment)
            #expect(byOption.status == 0 && byOption.stdout == "\(tokens.access)\n", "\(arguments): \(byOption)")
        }
        let byEnvironment = try sandbox.run(
            "vault", ["get", "svc", "--file", sandbox.vaultFile.path],
            environment: environment.merging(["TOKEN_VAULT_KEY_FILE": sandbox.keyFile.path]) { $1 })
        #expect(byEnvironment.status == 0 && byEnvironment.stdout == "\(tokens.access)\n", "\(byEnvironment)")
        // status says the key came from the option, not from the credentials directory.
        let status = try sandbox.run(
            "vault", ["status", "--file", sandbox.vaultFile.path, "--key-file", sandbox.keyFile.path], environment: environment)
        #expect(status.status == 0, "\(status)")
        #expect(!status.stdout.contains("systemd credential"), "\(status.stdout)")
        // The passphrase given explicitly is tried (and is not this vault's key): a wrong key, not a refusal.
        let wrong = try sandbox.run(
            "vault", ["get", "svc", "--file", sandbox.vaultFile.path, "--passphrase-file", passphrase.path], environment: environment)
        #expect(wrong.status == 4, "\(wrong)")
    }

    @Test func anEncryptedCredentialRoundTripsThroughSystemdCreds() throws {
        let systemdCreds = "/usr/bin/systemd-creds"
        try #require(FileManager.default.isExecutableFile(atPath: systemdCreds), "systemd-creds is not installed (Debian package systemd)")
        let sandbox = try CLISandbox()
        let hostSecret = sandbox.root.appendingPathComponent("host.secret").path
        let encrypted = sandbox.root.appendingPathComponent("token-vault.key.cred").path
        let decrypted = sandbox.root.appendingPathComponent("decrypted.key").path

        // What an administrator runs once: systemd-creds encrypt --name=token-vault.key KEY CRED.
        let encrypt = try runTool(
            systemdCreds, ["encrypt", "--with-key=host", "--name=token-vault.key", sandbox.keyFile.path, encrypted],
            environment: ["SYSTEMD_CREDENTIAL_SECRET": hostSecret])
        #expect(encrypt.status == 0, "\(encrypt)")
        let sealed = try Data(contentsOf: URL(fileURLWithPath: encrypted))
        let key = try Data(contentsOf: sandbox.keyFile)
        #expect(sealed.range(of: key) == nil, "the encrypted credential holds the key in clear")
        // What systemd does at service start for LoadCredentialEncrypted=token-vault.key:CRED.
        let decrypt = try runTool(
            systemdCreds, ["decrypt", "--name=token-vault.key", encrypted, decrypted],
            environment: ["SYSTEMD_CREDENTIAL_SECRET": hostSecret])
        #expect(decrypt.status == 0, "\(decrypt)")
        // A credential named for something else is refused.
        let misnamed = try runTool(
            systemdCreds, ["decrypt", "--name=other.key", encrypted, decrypted + ".other"],
            environment: ["SYSTEMD_CREDENTIAL_SECRET": hostSecret])
        #expect(misnamed.status != 0)

        let directory = try credentials(sandbox, "credentials", key: try Data(contentsOf: URL(fileURLWithPath: decrypted)))
        let environment = ["CREDENTIALS_DIRECTORY": directory.path]
        let tokens = FakeTokens()
        #expect(try sandbox.run("vault", ["set", "svc"], stdin: Data("\(tokens.access)\n".utf8), environment: environment).status == 0)
        // The vault the credential made opens with the original key file.
        let get = try sandbox.run("vault", ["get", "svc", "--key-file", sandbox.keyFile.path], environment: environment)
        #expect(get.stdout == "\(tokens.access)\n", "\(get)")
    }

    /// Runs a system tool with the sandbox-free environment plus `environment`.
    private func runTool(_ path: String, _ arguments: [String], environment: [String: String]) throws -> CLIResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.environment = ["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"].merging(environment) { $1 }
        let output = Pipe()
        let error = Pipe()
        process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
        process.standardOutput = output
        process.standardError = error
        try process.run()
        let out = output.fileHandleForReading.readDataToEndOfFile()
        let err = error.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return CLIResult(
            status: process.terminationStatus, stdout: String(decoding: out, as: UTF8.self), stderr: String(decoding: err, as: UTF8.self))
    }
}

extension SystemdCredentialCommandTests {
    /// The key rotation that OnAServer.md describes: the old key and the new one both passed as
    /// credentials, `vault rekey --new-key-file "$CREDENTIALS_DIRECTORY/token-vault.new-key"`,
    /// then the new key as `token-vault.key`.
    @Test func rekeyRotatesTheKeyBetweenTwoCredentials() throws {
        let sandbox = try CLISandbox()
        let oldKey = try Data(contentsOf: sandbox.keyFile)
        let newKeyFile = sandbox.root.appendingPathComponent("new.key")
        try CLISandbox.writeKeyFile(newKeyFile)
        let newKey = try Data(contentsOf: newKeyFile)
        let tokens = FakeTokens()

        let during = try credentials(sandbox, "during", key: oldKey)
        #expect(FileManager.default.createFile(
            atPath: during.appendingPathComponent("token-vault.new-key").path, contents: newKey, attributes: [.posixPermissions: 0o400]))
        let environment = ["CREDENTIALS_DIRECTORY": during.path]
        #expect(try sandbox.run("vault", ["set", "svc"], stdin: Data("\(tokens.access)\n".utf8), environment: environment).status == 0)
        let rekey = try sandbox.run(
            "vault", ["rekey", "--new-key-file", during.appendingPathComponent("token-vault.new-key").path], environment: environment)
        #expect(rekey.status == 0, "\(rekey)")

        let after = try credentials(sandbox, "after", key: newKey)
        let get = try sandbox.run("vault", ["get", "svc"], environment: ["CREDENTIALS_DIRECTORY": after.path])
        #expect(get.status == 0 && get.stdout == "\(tokens.access)\n", "\(get)")
        let stale = try sandbox.run("vault", ["get", "svc"], environment: environment)
        #expect(stale.status == 4, "the old key still opens the vault: \(stale)")
    }
}
#endif
