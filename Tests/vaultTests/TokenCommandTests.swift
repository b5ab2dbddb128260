#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

/// `set`, `get`, `list`, `delete` and `status` against the encrypted file backend.
@Suite struct TokenCommandTests {
    @Test func setReadsAJSONResponseFromStdinAndGetPrintsTheAccessTokenAlone() throws {
        let sandbox = try CLISandbox()
        let response = """
            {"access_token":"gho_fakeAccess123456","token_type":"bearer","refresh_token":"ghr_fakeRefresh123456",
             "scope":"repo user","expires_in":3600}
            """
        let set = try sandbox.vault("set", "github", "octocat", stdin: Data(response.utf8))
        #expect(set.status == 0, "\(set)")
        #expect(!set.stderr.contains("gho_fake"))
        #expect(set.stdout.isEmpty)

        let get = try sandbox.vault("get", "github", "octocat")
        #expect(get.status == 0, "\(get)")
        #expect(get.stdout == "gho_fakeAccess123456\n")

        let json = try sandbox.vault("get", "github", "octocat", "--json")
        #expect(json.status == 0, "\(json)")
        let object = try #require(json.json as? [String: Any])
        #expect(object["access_token"] as? String == "gho_fakeAccess123456")
        #expect(object["refresh_token"] as? String == "ghr_fakeRefresh123456")
        #expect(object["token_type"] as? String == "bearer")
        #expect(object["scope"] as? String == "repo user")
        #expect(object["expired"] as? Bool == false)
        #expect(object["expires_within_leeway"] as? Bool == false)
        #expect(object.keys.contains("id_token"))
        let expiresAt = try #require(object["expires_at"] as? String)
        let date = try #require(ISO8601DateFormatter().date(from: expiresAt))
        #expect(abs(date.timeIntervalSinceNow - 3600) < 120)
    }

    /// Issue 35: a token inside the refresh leeway is not `"expired": true`; it says
    /// `expires_within_leeway`, and the exit codes stay (3 without --allow-expired).
    @Test func getJSONNamesATokenInsideTheLeewayAndOnlyCallsAPastOneExpired() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "soon", "--expires-in", "30", stdin: Data("fakeSoonToken1\n".utf8)).status == 0)
        // Past its expiry: a JWT whose exp claim is in 2017.
        let pastJWT = BareJWTCommandTests.jwt(exp: 1_500_000_000)
        #expect(try sandbox.vault("set", "past", stdin: Data("\(pastJWT)\n".utf8)).status == 0)

        let refused = try sandbox.vault("get", "soon", "--json")
        #expect(refused.status == 3, "\(refused)")
        #expect(refused.stderr.contains("expires within 60 s"), "\(refused.stderr)")
        let soon = try #require(try sandbox.vault("get", "soon", "--json", "--allow-expired").json as? [String: Any])
        #expect(soon["expired"] as? Bool == false)
        #expect(soon["expires_within_leeway"] as? Bool == true)

        let pastRefused = try sandbox.vault("get", "past", "--json")
        #expect(pastRefused.status == 3, "\(pastRefused)")
        let past = try #require(try sandbox.vault("get", "past", "--json", "--allow-expired").json as? [String: Any])
        #expect(past["expired"] as? Bool == true)
        #expect(past["expires_within_leeway"] as? Bool == false)
        let table = try sandbox.vault("list")
        #expect(table.stdout.contains("expiring") && table.stdout.contains("expired"), "\(table.stdout)")
    }

    @Test func setReadsAFormEncodedResponse() throws {
        let sandbox = try CLISandbox()
        let set = try sandbox.vault(
            "set", "github", stdin: Data("access_token=gho_fakeForm123&scope=repo%2Cgist&token_type=bearer\n".utf8))
        #expect(set.status == 0, "\(set)")
        let object = try #require(try sandbox.vault("get", "github", "--json").json as? [String: Any])
        #expect(object["access_token"] as? String == "gho_fakeForm123")
        #expect(object["scope"] as? String == "repo,gist")
    }

    @Test func setReadsABareTokenWithExpiresIn() throws {
        let sandbox = try CLISandbox()
        // Base64 padding must not make a bare token look form-encoded.
        let set = try sandbox.vault("set", "api", "bot", "--expires-in", "600", stdin: Data("c2VjcmV0LXRva2Vu==\n".utf8))
        #expect(set.status == 0, "\(set)")
        let object = try #require(try sandbox.vault("get", "api", "bot", "--json").json as? [String: Any])
        #expect(object["access_token"] as? String == "c2VjcmV0LXRva2Vu==")
        let date = try #require(ISO8601DateFormatter().date(from: object["expires_at"] as? String ?? ""))
        #expect(abs(date.timeIntervalSinceNow - 600) < 120)
    }

    /// The response fixtures of the library's tests: real provider shapes.
    static func fixture(_ name: String) throws -> Data {
        let tests = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        return try Data(contentsOf: tests.appendingPathComponent("TokenVaultTests/Fixtures/responses/\(name)"))
    }

    /// GitHub answers a bad code with a form-encoded error, not a token. It must never be stored
    /// as a "bare token".
    @Test func setRefusesAFormEncodedErrorResponse() throws {
        let sandbox = try CLISandbox()
        let set = try sandbox.vault("set", "github", stdin: try Self.fixture("github-error-form.txt"))
        #expect(set.status == 1, "\(set)")
        #expect(set.stderr.contains("bad_verification_code"), "the error is named in words")
        #expect(set.stderr.contains("nothing was stored"))
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path), "nothing was stored")

        // An error response with other field orders, and one without '&', are refused too.
        for body in ["error_description=Bad+code&error=bad_verification_code", "error=invalid_grant"] {
            let other = try sandbox.vault("set", "github", stdin: Data((body + "\n").utf8))
            #expect(other.status == 1, "\(body): \(other)")
        }
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path))
    }

    @Test func setRefusesAJSONErrorResponseAndAJSONArray() throws {
        let sandbox = try CLISandbox()
        let error = try sandbox.vault("set", "google", stdin: try Self.fixture("invalid-grant.json"))
        #expect(error.status == 1, "\(error)")
        #expect(error.stderr.contains("invalid_grant"))
        let array = try sandbox.vault("set", "github", stdin: Data(#"[{"access_token":"gho_fakeInArray1"}]"#.utf8))
        #expect(array.status == 1, "\(array)")
        #expect(!array.stderr.contains("gho_fakeInArray1"))
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path), "nothing was stored")
    }

    /// A line with '=' inside (not trailing base64 padding) is a form body; without an
    /// access_token it is refused, never stored as the token.
    @Test func setRefusesAFormBodyWithoutAnAccessToken() throws {
        let sandbox = try CLISandbox()
        let set = try sandbox.vault("set", "github", stdin: Data("token=gho_fakeFormNoAccess1\n".utf8))
        #expect(set.status == 1, "\(set)")
        #expect(!set.stderr.contains("gho_fakeFormNoAccess1"))
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path))
    }

    @Test func setStillTakesABareToken() throws {
        let sandbox = try CLISandbox()
        for (account, token) in [("plain", "gho_fakeBare123"), ("padded", "YWJjZA="), ("jwt", "eyJh.eyJz.c2ln")] {
            let set = try sandbox.vault("set", "api", account, stdin: Data((token + "\n").utf8))
            #expect(set.status == 0, "\(token): \(set)")
            #expect(try sandbox.vault("get", "api", account).stdout == token + "\n")
        }
    }

    /// `vault set x < /tmp`: a read error on stdin is a message in words, not a Foundation dump.
    @Test func setSaysWhenStdinCannotBeRead() throws {
        let sandbox = try CLISandbox()
        let result = try sandbox.run("vault", ["set", "github"] + sandbox.fileVault, stdinPath: sandbox.root.path)
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr == "vault: Could not read the secret from standard input: Is a directory.\n", "\(result)")
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path))
    }

    /// An opaque secret saved by the library is not printed by `vault get`, which says what the
    /// entry is and what the person can do, without showing it.
    @Test func getOfAnOpaqueSecretSaysWhatToDo() async throws {
        let sandbox = try CLISandbox()
        let store = try await EncryptedFileStore.open(path: sandbox.vaultFile.path, keySource: .keyFile(sandbox.keyFile.path))
        try await Vault(store: store).saveSecret(Data("opaque fake api key".utf8), for: CredentialKey(service: "api", account: "ci"))

        let get = try sandbox.vault("get", "api", "ci")
        #expect(get.status == 1, "\(get)")
        #expect(get.stderr.contains("holds an opaque secret, not a token"), "\(get)")
        #expect(get.stderr.contains("vault delete api ci"), "\(get)")
        #expect(!get.stderr.contains("secret(for:)") || get.stderr.contains("library"), "\(get)")
        #expect(!get.stderr.contains("opaque fake api key") && !get.stdout.contains("opaque fake api key"))
        let list = try #require(try sandbox.vault("list", "--json").json as? [[String: Any]])
        #expect(list.first?["kind"] as? String == "secret")
    }

    /// Secrets never come from argv, where `ps` and the shell history would show them: a token
    /// given as an argument or an option is a usage error, it is not repeated in the message,
    /// and nothing is stored.
    @Test func setNeverTakesTheSecretFromArguments() throws {
        let sandbox = try CLISandbox()
        for arguments in [
            ["set", "github", "octocat", "gho_fakeArgv1"], ["set", "github", "--token", "gho_fakeArgv1"],
            ["set", "github", "--token=gho_fakeArgv1"],
        ] {
            let result = try sandbox.run("vault", arguments + sandbox.fileVault, stdin: Data("gho_fakeStdin1\n".utf8))
            #expect(result.status == 64, "\(arguments): \(result)")
            if !arguments.contains(where: { $0.hasPrefix("--token") }) {
                // (An unknown option is ArgumentParser's "Unknown option '--token'", value unshown.)
                #expect(result.stderr.contains("reads the token from stdin only"), "\(arguments): \(result)")
            }
            #expect(!result.stderr.contains("gho_fakeArgv1") && !result.stdout.contains("gho_fakeArgv1"), "\(arguments): \(result)")
        }
        #expect(!FileManager.default.fileExists(atPath: sandbox.vaultFile.path), "something was stored")
        let help = try sandbox.run("vault", ["help", "set"])
        #expect(help.stdout.contains("The token is read from stdin only, never from the command line"))
    }

    @Test func listShowsEntriesAndNeverASecret() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", "octocat", stdin: Data("gho_fakeListSecret1\n".utf8)).status == 0)
        #expect(
            try sandbox.vault("set", "gitlab", "--expires-in", "1", stdin: Data("glpat-fakeListSecret2\n".utf8)).status == 0)
        let text = try sandbox.vault("list")
        #expect(text.status == 0, "\(text)")
        #expect(text.stdout.contains("github"))
        #expect(text.stdout.contains("octocat"))
        #expect(!text.stdout.contains("fakeListSecret"))

        let json = try sandbox.vault("list", "--json")
        #expect(!json.stdout.contains("fakeListSecret"))
        let rows = try #require(json.json as? [[String: Any]])
        #expect(rows.map { $0["service"] as? String } == ["github", "gitlab"])
        #expect(rows.first?["account"] as? String == "octocat")
        #expect(rows.first?["expires_at"] is NSNull)
        // Expires within the 60 s leeway: not expired yet, and named as such (issue 35).
        #expect(rows.last?["expired"] as? Bool == false)
        #expect(rows.last?["expires_within_leeway"] as? Bool == true)
        #expect(rows.first?["expires_within_leeway"] as? Bool == false)
        #expect(rows.last?["expires_at"] is String)

        let filtered = try #require(try sandbox.vault("list", "gitlab", "--json").json as? [[String: Any]])
        #expect(filtered.count == 1)
    }

    @Test func deleteRemovesTheEntry() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", stdin: Data("gho_fakeDelete1\n".utf8)).status == 0)
        #expect(try sandbox.vault("delete", "github").status == 0)
        #expect(try sandbox.vault("get", "github").status == 2)
    }

    @Test func statusSaysWhichBackendAndWhy() throws {
        let sandbox = try CLISandbox()
        #expect(try sandbox.vault("set", "github", stdin: Data("gho_fakeStatus1\n".utf8)).status == 0)
        let result = try sandbox.vault("status", "--json")
        #expect(result.status == 0, "\(result)")
        let object = try #require(result.json as? [String: Any])
        #expect(object["backend"] as? String == "file")
        #expect((object["reason"] as? String)?.isEmpty == false)
        #expect(object["entries"] as? Int == 1)
        #expect((object["file"] as? [String: Any])?["path"] as? String == sandbox.vaultFile.path)
        #expect((object["secret_service"] as? [String: Any])?["outcome"] as? String != nil)
        let text = try sandbox.vault("status")
        #expect(text.stdout.contains("entries:"))
        #expect(text.stdout.contains(sandbox.vaultFile.path))
    }

    @Test func globalOptionsComeFromTheEnvironment() throws {
        let sandbox = try CLISandbox()
        let environment = [
            "TOKEN_VAULT_BACKEND": "file", "TOKEN_VAULT_FILE": sandbox.vaultFile.path,
            "TOKEN_VAULT_KEY_FILE": sandbox.keyFile.path,
        ]
        let set = try sandbox.run("vault", ["set", "github"], stdin: Data("gho_fakeEnv1\n".utf8), environment: environment)
        #expect(set.status == 0, "\(set)")
        #expect(try sandbox.vault("get", "github").stdout == "gho_fakeEnv1\n")
    }
}
#endif
