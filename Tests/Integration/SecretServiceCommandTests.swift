#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// The `vault` command on the Secret Service: the real provider that Scripts/test runs on a private
/// session bus (gnome-keyring, then KeePassXC and KWallet), reached through the bus address the
/// child inherits.
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

    /// A second `vault set` is a new process replacing an item another process made. KeePassXC
    /// 2.7.4 answered that, through CreateItem with replace, with a confirmation dialog nobody could
    /// see, and the set timed out after 10 s; the store now overwrites the found item's secret.
    @Test func aSecondSetFromANewProcessOverwritesQuickly() throws {
        let sandbox = try CLISandbox()
        let service = "tv-cli-over-\(UUID().uuidString.prefix(8).lowercased())"
        for round in 1...3 {
            let response = Data(#"{"access_token":"gho_round\#(round)","token_type":"bearer","expires_in":3600}"#.utf8)
            let clock = ContinuousClock()
            let start = clock.now
            let set = try vault(sandbox, ["set", service, "octocat", "--backend", "secret-service"], stdin: response)
            let elapsed = clock.now - start
            #expect(set.status == 0, "round \(round): \(set)")
            #expect(elapsed < .seconds(5), "round \(round) took \(elapsed)")
            // The whole result on failure: a KWallet run failed here once (CI, 2026-11-23) and
            // did not show whether the get failed or read an older value.
            let get = try vault(sandbox, ["get", service, "octocat", "--backend", "secret-service"])
            let read = get.stdout == "gho_round\(round - 1)\n" ? "the previous round's value" : "\(get.stdout.utf8.count) bytes"
            #expect(get.status == 0 && get.stdout == "gho_round\(round)\n", "round \(round): \(get); stdout: \(read)")
        }
        let list = try vault(sandbox, ["list", service, "--json", "--backend", "secret-service"])
        #expect((list.json as? [[String: Any]])?.count == 1, "\(list)")
        #expect(try vault(sandbox, ["delete", service, "octocat", "--backend", "secret-service"]).status == 0)
    }

    /// `secret-tool lookup` prints what `vault set` stored, on every provider (KWallet hands back the
    /// content type it was given, and secret-tool prints only `text/plain`).
    @Test func secretToolLooksUpWhatVaultSet() throws {
        let sandbox = try CLISandbox()
        let service = "tv-cli-st-\(UUID().uuidString.prefix(8).lowercased())"
        let response = Data(#"{"access_token":"gho_lookup","token_type":"bearer","expires_in":3600}"#.utf8)
        #expect(try vault(sandbox, ["set", service, "octocat", "--backend", "secret-service"], stdin: response).status == 0)
        // SecretToolProcess repeats a lookup that kwalletd5's session fault answered with nothing
        // (Backends.md; a clean-clone CI run failed here on it once, 2026-11-22); an item that is
        // really missing or unreadable still fails all three attempts.
        let (status, printed) = try SecretToolProcess.run(["lookup", "service", service, "account", "octocat"])
        #expect(status == 0, "secret-tool lookup: \(printed)")
        #expect(printed.contains(#""access_token":"gho_lookup""#), "secret-tool lookup printed: \(printed)")
        #expect(try vault(sandbox, ["delete", service, "octocat", "--backend", "secret-service"]).status == 0)
    }

    /// Any program of the user can put an item of TokenVault's schema in the keyring, for example
    /// one in a stored-format version this release does not know. It used to make `vault list` fail
    /// for every entry (exit 5); now the others are listed and the unreadable one is named.
    @Test func listShowsEveryEntryAndNamesTheOneItCannotRead() throws {
        let sandbox = try CLISandbox()
        let service = "tv-cli-v2-\(UUID().uuidString.prefix(8).lowercased())"
        let response = Data(#"{"access_token":"gho_readable","token_type":"bearer","expires_in":3600}"#.utf8)
        #expect(try vault(sandbox, ["set", service, "octocat", "--backend", "secret-service"], stdin: response).status == 0)
        let future = #"{"v":2,"access_token":"gho_future","token_type":"bearer","issued_at":1900000000}"#
        // SecretToolProcess repeats a store that kwalletd5 dropped or refused (Backends.md).
        let (status, errors) = try SecretToolProcess.run(
            ["store", "--label=from the future", "xdg:schema", "dev.tokenvault.Credential", "service", service, "account", "future"],
            input: Data(future.utf8))
        try #require(status == 0, "secret-tool store failed: \(errors)")

        let list = try vault(sandbox, ["list", service, "--backend", "secret-service"])
        #expect(list.status == 5, "\(list)")
        #expect(list.stdout.contains("octocat") && list.stdout.contains("valid"), "the readable entry is listed: \(list.stdout)")
        #expect(list.stdout.contains("future") && list.stdout.contains("unreadable"), "\(list.stdout)")
        #expect(list.stderr.contains("\(service)/future"), "the unreadable entry is named: \(list.stderr)")
        #expect(list.stderr.contains("format version 2"))
        #expect(!list.stderr.contains("gho_") && !list.stdout.contains("gho_"))

        let json = try vault(sandbox, ["list", service, "--json", "--backend", "secret-service"])
        #expect(json.status == 5, "\(json)")
        let rows = try #require(json.json as? [[String: Any]], "\(json)")
        #expect(rows.map { $0["account"] as? String } == ["future", "octocat"])
        #expect(rows.map { $0["kind"] as? String } == ["unreadable", "token"])

        // `get` of the unreadable one still says why, with the integrity exit code.
        let get = try vault(sandbox, ["get", service, "future", "--backend", "secret-service"])
        #expect(get.status == 5, "\(get)")
        for account in ["octocat", "future"] {
            #expect(try vault(sandbox, ["delete", service, account, "--backend", "secret-service"]).status == 0)
        }
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
#endif
