#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// Every exit code in the table, from the built binary.
@Suite struct ExitCodeTests {
    @Test func ok() throws {
        let sandbox = try CLISandbox()
        let result = try sandbox.vault("set", "github", stdin: Data("gho_fakeFakeFake\n".utf8))
        #expect(result.status == 0, "\(result)")
    }

    @Test func otherErrorForInputThatIsNotAToken() throws {
        let sandbox = try CLISandbox()
        let result = try sandbox.vault("set", "github", stdin: Data("two words\nand lines\n".utf8))
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.hasPrefix("vault: "))
        #expect(!result.stderr.contains("two words"))
    }

    @Test func notFound() throws {
        let sandbox = try CLISandbox()
        // In a vault that exists, and when there is no vault yet at all.
        #expect(try sandbox.vault("set", "something-else", stdin: Data("gho_fakeFakeFake\n".utf8)).status == 0)
        for file in [sandbox.vaultFile, sandbox.root.appendingPathComponent("missing/tokens.vault")] {
            let get = try sandbox.vault("get", "nothing-here", file: file)
            #expect(get.status == 2, "\(get)")
            #expect(get.stderr.contains("No token is stored for nothing-here/default"))
            #expect(get.stdout.isEmpty)
            let delete = try sandbox.vault("delete", "nothing-here", file: file)
            #expect(delete.status == 2, "\(delete)")
        }
    }

    @Test func expired() throws {
        let sandbox = try CLISandbox()
        let response = #"{"access_token":"expired-fake-token","token_type":"bearer","expires_in":0}"#
        #expect(try sandbox.vault("set", "github", stdin: Data(response.utf8)).status == 0)
        let get = try sandbox.vault("get", "github")
        #expect(get.status == 3, "\(get)")
        #expect(get.stdout.isEmpty)
        #expect(!get.stderr.contains("expired-fake-token"))
        let allowed = try sandbox.vault("get", "github", "--allow-expired")
        #expect(allowed.status == 0, "\(allowed)")
        #expect(allowed.stdout == "expired-fake-token\n")
    }

    /// A token that is still valid for a few seconds is refused too (the 60 s leeway), and the
    /// message says so instead of claiming that it has expired.
    @Test func expiresWithinTheLeeway() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", "--expires-in", "30", stdin: Data("gho_fakeSoon1\n".utf8)).status == 0)
        let get = try sandbox.vault("get", "github")
        #expect(get.status == 3, "\(get)")
        #expect(get.stderr.contains("expires within 60 s (at "), "\(get)")
        #expect(!get.stderr.contains("expired at"), "\(get)")

        // A JWT whose exp claim is long past (2001-09-09): expired, whatever the clock's rounding.
        let response = #"{"access_token":"eyJhbGciOiJub25lIn0.eyJleHAiOjEwMDAwMDAwMDB9.ZmFrZQ","token_type":"bearer"}"#
        #expect(try sandbox.vault("set", "gitlab", stdin: Data(response.utf8)).status == 0)
        let gone = try sandbox.vault("get", "gitlab")
        #expect(gone.status == 3, "\(gone)")
        #expect(gone.stderr.contains("expired at 2001-09-09T01:46:40Z"), "\(gone)")
    }

    @Test func authenticationFailedWithAnotherKey() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", stdin: Data("gho_fakeFakeFake\n".utf8)).status == 0)
        let otherKey = sandbox.root.appendingPathComponent("other.key")
        try CLISandbox.writeKeyFile(otherKey)
        let result = try sandbox.run(
            "vault", ["get", "github", "--backend", "file", "--file", sandbox.vaultFile.path, "--key-file", otherKey.path])
        #expect(result.status == 4, "\(result)")
        #expect(!result.stdout.contains("gho_"))
    }

    /// A flipped bit in the header, or in a record that is not the last one (a damaged last
    /// record may be a torn write, which the file backend ignores), is tampering: exit 5.
    @Test(arguments: [("header", 110), ("first record", 168 + 48)])
    func integrityFailureForATamperedVault(_ place: String, _ offset: Int) throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", stdin: Data("gho_fakeFakeFakeFake\n".utf8)).status == 0)
        #expect(try sandbox.vault("set", "gitlab", stdin: Data("glpat-fakeFakeFake\n".utf8)).status == 0)
        var bytes = try Data(contentsOf: sandbox.vaultFile)
        #expect(bytes.count > offset + 100, "the vault is smaller than expected")
        bytes[offset] ^= 0x01
        try bytes.write(to: sandbox.vaultFile)
        let result = try sandbox.vault("get", "github")
        #expect(result.status == 5, "\(place): \(result)")
        #expect(!result.stdout.contains("gho_"))
    }

    @Test func integrityFailureForAFileThatIsNotAVault() throws {
        let sandbox = try CLISandbox()
        try Data("this is not a vault file, just some text that is long enough\n".utf8).write(to: sandbox.vaultFile)
        #expect(chmod(sandbox.vaultFile.path, 0o600) == 0)
        let result = try sandbox.vault("list")
        #expect(result.status == 5, "\(result)")
    }

    /// A key file (or vault file) that others can read is refused, and the message names the
    /// way to accept it anyway, which exists: the flag and the environment variable.
    @Test func insecurePermissionsAreRefusedUnlessAllowedExplicitly() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", stdin: Data("gho_fakeFakeFake\n".utf8)).status == 0)
        #expect(chmod(sandbox.keyFile.path, 0o644) == 0)
        let refused = try sandbox.vault("get", "github")
        #expect(refused.status == 1, "\(refused)")
        #expect(refused.stderr.contains("--allow-insecure-permissions"), "\(refused)")
        #expect(refused.stderr.contains("TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS=1"), "\(refused)")
        #expect(refused.stdout.isEmpty)

        let flag = try sandbox.vault("get", "github", "--allow-insecure-permissions")
        #expect(flag.status == 0, "\(flag)")
        #expect(flag.stdout == "gho_fakeFakeFake\n")
        let environment = try sandbox.vault("get", "github", environment: ["TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS": "1"])
        #expect(environment.status == 0, "\(environment)")

        #expect(chmod(sandbox.keyFile.path, 0o600) == 0)
        #expect(chmod(sandbox.vaultFile.path, 0o644) == 0)
        let vaultFile = try sandbox.vault("list")
        #expect(vaultFile.status == 1, "\(vaultFile)")
        #expect(vaultFile.stderr.contains("--allow-insecure-permissions"), "\(vaultFile)")
        #expect(try sandbox.vault("list", "--allow-insecure-permissions").status == 0)
    }

    @Test func backendUnavailableWithoutAKey() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", stdin: Data("gho_fakeFakeFake\n".utf8)).status == 0)
        // No key, and no terminal in a test: nothing to unlock the file with.
        let result = try sandbox.run("vault", ["list", "--backend", "file", "--file", sandbox.vaultFile.path])
        #expect(result.status == 6, "\(result)")
        #expect(result.stderr.contains("needs a key"))
    }

    @Test func backendUnavailableWhenTheSecretServiceIsAskedForAndAbsent() throws {
        let sandbox = try CLISandbox()
        // The child has no DBUS_SESSION_BUS_ADDRESS: the Secret Service fails closed.
        let result = try sandbox.run("vault", ["list", "--backend", "secret-service"])
        #expect(result.status == 6, "\(result)")
        #expect(result.stderr.contains("Secret Service"))
    }

    @Test(arguments: [
        ["--bogus"], ["get"], ["get", ""], ["list", "--backend", "plaintext"], ["migrate"],
        ["migrate", "--plist", "a.plist", "--domain", "b"], ["set", "github", "--expires-in", "-5"],
        ["get", "github", "--key-file", "a", "--passphrase-file", "b"], ["frobnicate"],
    ])
    func usage(_ arguments: [String]) throws {
        let sandbox = try CLISandbox()
        let result = try sandbox.run("vault", arguments)
        #expect(result.status == 64, "\(arguments): \(result)")
        #expect(!result.stderr.isEmpty)
    }

    /// The memory backend keeps nothing once the process exits: `vault migrate` would scrub the
    /// plist into thin air. Refused whether it comes from --backend (a usage error, 64) or from
    /// the environment (exit 1, without the usage text: the command line is not at fault).
    @Test func theMemoryBackendIsRefusedFromTheEnvironmentAndTheCommandLine() throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        let url = try sandbox.writeTutorialDefaults("strings", domain: "com.example.memory", tokens: tokens)
        let plist = try Data(contentsOf: url)
        let memory = ["TOKEN_VAULT_BACKEND": "memory"]

        let migrate = try sandbox.run("vault", ["migrate", "--domain", "com.example.memory"], environment: memory)
        #expect(migrate.status == 1, "\(migrate)")
        #expect(migrate.stderr.contains("TOKEN_VAULT_BACKEND") && !migrate.stderr.contains("Usage:"), "\(migrate)")
        #expect(try Data(contentsOf: url) == plist, "the plist must keep its tokens")
        #expect(try Data(contentsOf: url).contains(tokens.access))

        for arguments in [["set", "github"], ["list"], ["status"]] {
            let result = try sandbox.run("vault", arguments, stdin: Data("gho_fakeMemory1\n".utf8), environment: memory)
            #expect(result.status == 1, "\(arguments): \(result)")
        }
        let option = try sandbox.run("vault", ["list", "--backend", "memory"])
        #expect(option.status == 64, "\(option)")
    }

    /// A bad TOKEN_VAULT_BACKEND names the values `vault` takes (postgres among them), exit 1;
    /// --backend wins over it.
    @Test func aBadBackendInTheEnvironmentIsNamedWithTheValuesVaultTakes() throws {
        let sandbox = try CLISandbox()
        let result = try sandbox.run("vault", ["list"], environment: ["TOKEN_VAULT_BACKEND": "plaintext"])
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("TOKEN_VAULT_BACKEND must be one of auto, secret-service, file, postgres, not 'plaintext'"), "\(result)")
        #expect(!result.stderr.contains("memory") && !result.stderr.contains("Usage:"), "\(result)")
        let chosen = try sandbox.run("vault", ["list"] + sandbox.fileVault, environment: ["TOKEN_VAULT_BACKEND": "plaintext"])
        #expect(chosen.status == 0, "\(chosen)")
    }
}
#endif
