#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// `vault get --header` and `--rejected-token-file` without a token endpoint: what they print,
/// and their refusals. (With the test OAuth server: TokenHandoffServerTests.)
@Suite struct TokenHandoffCommandTests {
    @Test func headerPrintsTheAuthorizationLineWithTheSchemeSpelledAsRFC6750Does() throws {
        let sandbox = try CLISandbox()
        let response = #"{"access_token":"tvh_Access_3kQ9","token_type":"bearer","expires_in":3600}"#
        try #require(try sandbox.vault("set", "api", stdin: Data(response.utf8)).status == 0)
        let header = try sandbox.vault("get", "api", "--header")
        #expect(header.status == 0, "\(header)")
        #expect(header.stdout == "Authorization: Bearer tvh_Access_3kQ9\n")
        // Through ArgumentParser too (an option the fast path leaves to it).
        let parsed = try sandbox.vault("get", "api", "--header", "--allow-expired", "--backend=file")
        #expect(parsed.stdout == "Authorization: Bearer tvh_Access_3kQ9\n", "\(parsed)")

        let both = try sandbox.vault("get", "api", "--header", "--json")
        #expect(both.status == 64, "\(both)")
        #expect(both.stderr.contains("--header or --json"))

        let dpop = #"{"access_token":"tvh_DPoP_7Lm2","token_type":"DPoP","expires_in":3600}"#
        try #require(try sandbox.vault("set", "bound", stdin: Data(dpop.utf8)).status == 0)
        let refused = try sandbox.vault("get", "bound", "--header")
        #expect(refused.status == 1, "\(refused)")
        #expect(refused.stderr.contains("DPoP proof") && !refused.stderr.contains("tvh_DPoP"), "\(refused.stderr)")
        #expect(refused.stdout.isEmpty)
    }

    @Test func aRejectedTokenTheVaultNoLongerHoldsIsAnsweredWithTheStoredOne() throws {
        let sandbox = try CLISandbox()
        try #require(try sandbox.vault("set", "api", "--expires-in", "3600", stdin: Data("tvh_Newer_5Rt8\n".utf8)).status == 0)
        // The refused token alone, as `Bearer`, or as the line --header printed: stdin or a file.
        for refused in ["tvh_Older_1Ab2\n", "Bearer tvh_Older_1Ab2", "Authorization: Bearer tvh_Older_1Ab2\r\n"] {
            let piped = try sandbox.vault("get", "api", "--rejected-token-file", "-", stdin: Data(refused.utf8))
            #expect(piped.status == 0, "\(piped)")
            #expect(piped.stdout == "tvh_Newer_5Rt8\n")
        }
        let file = sandbox.root.appendingPathComponent("refused")
        try Data("tvh_Older_1Ab2\n".utf8).write(to: file)
        let fromFile = try sandbox.vault("get", "api", "--fresh", "--header", "--rejected-token-file", file.path)
        #expect(fromFile.stdout == "Authorization: Bearer tvh_Newer_5Rt8\n", "\(fromFile)")
    }

    @Test func aRejectedTokenThatCannotBeRefreshedOrReadIsRefused() throws {
        let sandbox = try CLISandbox()
        try #require(try sandbox.vault("set", "api", "--expires-in", "3600", stdin: Data("tvh_Only_8Yu6\n".utf8)).status == 0)
        // The vault still holds the refused token and has no refresh description: it cannot help.
        let same = try sandbox.vault("get", "api", "--rejected-token-file", "-", stdin: Data("tvh_Only_8Yu6\n".utf8))
        #expect(same.status == 1, "\(same)")
        #expect(same.stderr.contains("no refresh description"), "\(same.stderr)")
        #expect(same.stdout.isEmpty && !same.stderr.contains("tvh_Only"))

        let empty = try sandbox.vault("get", "api", "--rejected-token-file", "-", stdin: Data("\n  \n".utf8))
        #expect(empty.status == 1, "\(empty)")
        #expect(empty.stderr.contains("holds no token"), "\(empty.stderr)")

        let missing = try sandbox.vault("get", "api", "--rejected-token-file", sandbox.root.appendingPathComponent("none").path)
        #expect(missing.status == 2, "\(missing)")
        #expect(missing.stderr.contains("cannot be read"), "\(missing.stderr)")

        let noEntry = try sandbox.vault("get", "nope", "--rejected-token-file", "-", stdin: Data("tvh_Only_8Yu6\n".utf8))
        #expect(noEntry.status == 2, "\(noEntry)")
    }
}

/// The documentation shows no pattern that would put a token in a command line: no command
/// substitution of `vault get` (or of a token variable) inside an argument, in any page, example,
/// script or help text.
@Suite struct NoTokenInArgvDocumentationTests {
    static let patterns = ["$(vault get", "$(vault ", "Bearer $(", "-H \"Authorization", "-H 'Authorization", "Bearer $token\"", "Bearer $TOKEN\""]

    @Test func noPageShowsATokenInAnArgument() throws {
        var files = ["README.md", "SECURITY.md", "Scripts/demo"]
        for directory in ["Sources/TokenVault/Docs.docc", "Sources/VaultCLI", "Examples", "Scripts"] {
            let root = PackageFiles.path(directory)
            let items = FileManager.default.enumerator(atPath: root)?.compactMap { $0 as? String } ?? []
            files += items.filter { !$0.hasPrefix(".build") && !$0.contains("/.build") }.map { "\(directory)/\($0)" }
        }
        var checked = 0
        for file in Set(files) {
            let path = PackageFiles.path(file)
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue,
                let text = try? String(contentsOfFile: path, encoding: .utf8)
            else { continue }
            checked += 1
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                for pattern in Self.patterns where line.contains(pattern) {
                    Issue.record("\(file):\(number + 1) shows a token in an argument (\(pattern)): \(line)")
                }
            }
        }
        #expect(checked > 20, "the documentation was not found")
    }
}
#endif
