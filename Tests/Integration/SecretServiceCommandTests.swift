import Foundation
import Testing
@testable import TokenVaultTestSupport

/// The `vault` command on the Secret Service: the real gnome-keyring that Scripts/test runs on its
/// private session bus, reached through the bus address the child inherits.
@Suite struct SecretServiceCommandTests {
    /// The sandbox environment plus the test keyring's session bus: what a desktop user has.
    private func keyringEnvironment() throws -> [String: String] {
        let environment = ProcessInfo.processInfo.environment
        try #require(
            environment["TOKENVAULT_TEST_KEYRING"] == "1",
            "These tests need the throwaway gnome-keyring of Scripts/test. Run them with Scripts/test (e.g. Scripts/test --filter SecretServiceCommand).")
        return ["DBUS_SESSION_BUS_ADDRESS": try #require(environment["DBUS_SESSION_BUS_ADDRESS"])]
    }

    private func vault(_ sandbox: CLISandbox, _ arguments: [String], stdin: Data = Data()) throws -> CLIResult {
        try sandbox.run("vault", arguments, stdin: stdin, environment: try keyringEnvironment())
    }

    @Test func setGetListDeleteInTheKeyring() throws {
        let sandbox = try CLISandbox()
        let service = "tv-cli-\(UUID().uuidString.prefix(8).lowercased())"
        let access = "gho_cli-\(UUID().uuidString)"
        let response = Data(#"{"access_token":"\#(access)","token_type":"bearer","expires_in":3600,"refresh_token":"ghr_cli-refresh"}"#.utf8)

        let set = try vault(sandbox, ["set", service, "octocat", "--backend", "secret-service"], stdin: response)
        #expect(set.status == 0, "\(set)")
        #expect(!set.stdout.contains(access) && !set.stderr.contains(access))

        let get = try vault(sandbox, ["get", service, "octocat", "--backend", "secret-service"])
        #expect(get.status == 0, "\(get)")
        #expect(get.stdout == "\(access)\n")

        // auto finds the same token: the keyring is up, so auto uses it.
        #expect(try vault(sandbox, ["get", service, "octocat"]).stdout == "\(access)\n")

        let list = try vault(sandbox, ["list", service, "--json", "--backend", "secret-service"])
        let rows = try #require(list.json as? [[String: Any]], "\(list)")
        #expect(rows.count == 1)
        #expect(rows.first?["service"] as? String == service)
        #expect(rows.first?["account"] as? String == "octocat")
        #expect(rows.first?["expired"] as? Bool == false)
        #expect(!list.stdout.contains(access))

        #expect(try vault(sandbox, ["delete", service, "octocat", "--backend", "secret-service"]).status == 0)
        let gone = try vault(sandbox, ["get", service, "octocat", "--backend", "secret-service"])
        #expect(gone.status == 2, "\(gone)")
        // Nothing was written to a file along the way.
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path))
    }

    @Test func statusSaysTheKeyringIsUsedAndWhy() throws {
        let sandbox = try CLISandbox()
        let status = try vault(sandbox, ["status", "--json"])
        #expect(status.status == 0, "\(status)")
        let object = try #require(status.json as? [String: Any])
        #expect(object["backend"] as? String == "secret-service")
        #expect((object["reason"] as? String)?.contains("available") == true)
        let probe = try #require(object["secret_service"] as? [String: Any])
        #expect(probe["outcome"] as? String == "available")
        #expect((probe["elapsed_ms"] as? Int ?? .max) < 2000)
        #expect(object["file"] == nil, "no file is involved when the keyring is used")

        let text = try vault(sandbox, ["status"])
        #expect(text.stdout.contains("backend in use:  secret-service") || text.stdout.contains("secret-service"))
        #expect(text.stdout.contains("the Secret Service is available"))
    }

    @Test func rekeyRefusesTheKeyring() throws {
        let sandbox = try CLISandbox()
        let result = try vault(sandbox, ["rekey", "--backend", "secret-service", "--new-key-file", sandbox.keyFile.path])
        #expect(result.status == 64, "\(result)")
    }

    @Test func migrateIntoTheKeyring() throws {
        let sandbox = try CLISandbox()
        let tokens = FakeTokens()
        let domain = "com.example.keyring-\(UUID().uuidString.prefix(8).lowercased())"
        let url = try sandbox.writeTutorialDefaults("strings", domain: domain, tokens: tokens)

        let result = try vault(sandbox, ["migrate", "--domain", domain, "--backend", "secret-service"])
        #expect(result.status == 0, "\(result)")
        let bytes = try Data(contentsOf: url)
        #expect(!bytes.contains(tokens.access) && !bytes.contains(tokens.refresh))

        #expect(try vault(sandbox, ["get", domain, "--backend", "secret-service"]).stdout == "\(tokens.access)\n")
        let object = try #require(try vault(sandbox, ["get", domain, "--json", "--backend", "secret-service"]).json as? [String: Any])
        #expect(object["refresh_token"] as? String == tokens.refresh)
        // A second run finds nothing and changes nothing.
        let again = try vault(sandbox, ["migrate", "--domain", domain, "--backend", "secret-service"])
        #expect(again.status == 0, "\(again)")
        #expect(try Data(contentsOf: url) == bytes)
        #expect(try vault(sandbox, ["delete", domain, "--backend", "secret-service"]).status == 0)
    }

    @Test func withoutABusTheKeyringIsUnavailableAndNothingFallsBack() throws {
        let sandbox = try CLISandbox()
        // The sandbox's own environment has no session bus.
        let result = try sandbox.run("vault", ["get", "github", "--backend", "secret-service"])
        #expect(result.status == 6, "\(result)")
        #expect(result.stderr.contains("no D-Bus session bus"))
        #expect(!result.stderr.contains("Fatal error") && !result.stderr.contains("Stack"))
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path))
    }
}
