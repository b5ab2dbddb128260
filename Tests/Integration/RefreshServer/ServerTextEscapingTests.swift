#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Everything a server says reaches the terminal escaped, as stored names do (issue 34, point 3):
/// an OAuth `error_description` from the token endpoint, the `error`/`error_description` of a
/// login redirect, and a device flow's `user_code`. The real `vault` binary against the real
/// authlib server, which answers with terminal escapes (server.py's `HOSTILE_TEXT`).
@Suite struct ServerTextEscapingTests {
    /// server.py's HOSTILE_TEXT: OSC 52 ended by BEL, the 8-bit CSI, a bidi override, a colour.
    static let hostile = "\u{1B}]52;c;aGFja2Vk\u{07} then \u{9B}2J and \u{202E}evil\u{1B}[31m red"

    /// The scalars of `text` that a terminal would act on: controls other than the line breaks
    /// `vault` itself writes, and bidirectional formatting characters.
    static func rawEscapes(in text: String) -> [String] {
        text.unicodeScalars.filter { scalar in
            scalar != "\n" && (scalar.properties.generalCategory == .control
                || (0x202A...0x202E).contains(scalar.value) || (0x2066...0x2069).contains(scalar.value))
        }.map { "U+" + String($0.value, radix: 16, uppercase: true) }
    }

    private func runVault(_ scratch: VaultScratch, _ arguments: [String], label: String) throws -> HelperProcess {
        try HelperProcess("vault", arguments: arguments, environment: scratch.environment(.encryptedFile), outputPath: scratch.path("\(label).out"))
    }

    @Test func aTokenEndpointsErrorDescriptionIsPrintedEscaped() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("hostile-error")
        let key = try CredentialKey(service: uniqueName("tv-escape"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            try await vault.saveToken(try await server.login(user: user), for: key, registration: try server.publicClient())
            try await server.fault(user: user, "hostile_error")
            let child = try runVault(scratch, ["refresh", key.service, key.account], label: "refresh")
            try child.start()
            let status = try await child.wait(bound: .seconds(60))
            #expect(status == 1, "invalid_client is a configuration error: \(child.errorOutput)")
            #expect(child.errorOutput.contains("invalid_client"), "\(child.errorOutput)")
            #expect(Self.rawEscapes(in: child.errorOutput).isEmpty, "raw escapes on stderr: \(Self.rawEscapes(in: child.errorOutput))")
            #expect(child.errorOutput.contains("\\u{1B}]52;c;aGFja2Vk\\u{7}"), "shown escaped: \(child.errorOutput)")
            #expect(child.errorOutput.contains("\\u{9B}2J") && child.errorOutput.contains("\\u{202E}evil"))
        }
    }

    @Test func aLoginRedirectsErrorIsPrintedEscaped() async throws {
        let server = try TestOAuthServer.require()
        let key = try CredentialKey(service: uniqueName("tv-escape"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let child = try runVault(
                scratch,
                [
                    "login", key.service, key.account, "--token-url", server.url.appendingPathComponent("token").absoluteString,
                    "--client-id", TestOAuthServer.clientID, "--authorize-url",
                    server.url.appendingPathComponent("authorize").absoluteString, "--timeout", "60",
                ], label: "login")
            try child.start()
            defer { if child.process.isRunning { child.kill9() } }
            var authorizationURL: URL?
            try await eventually("vault login printing the URL") {
                authorizationURL = child.errorOutput.split(separator: "\n")
                    .first { $0.hasPrefix(server.url.appendingPathComponent("authorize").absoluteString) }
                    .flatMap { URL(string: String($0)) }
                return authorizationURL != nil
            }
            let query = Dictionary(
                (URLComponents(url: try #require(authorizationURL), resolvingAgainstBaseURL: false)?.queryItems ?? [])
                    .map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { first, _ in first })
            let redirect = try #require(query["redirect_uri"])
            let state = try #require(query["state"])
            // What the authorization server's redirect carries, with this login's own state.
            let encoded = try #require(Self.hostile.addingPercentEncoding(withAllowedCharacters: .alphanumerics))
            let errorWord = try #require("access_denied\u{1B}[2J".addingPercentEncoding(withAllowedCharacters: .alphanumerics))
            let back = try #require(URL(string: "\(redirect)?state=\(state)&error=\(errorWord)&error_description=\(encoded)"))
            _ = try await URLSession.shared.data(from: back)
            let status = try await child.wait(bound: .seconds(60))
            #expect(status == 1, "\(child.errorOutput)")
            #expect(child.errorOutput.contains("refused the login"), "\(child.errorOutput)")
            #expect(Self.rawEscapes(in: child.errorOutput).isEmpty, "raw escapes on stderr: \(Self.rawEscapes(in: child.errorOutput))")
            #expect(child.errorOutput.contains("access_denied\\u{1B}[2J"), "\(child.errorOutput)")
            #expect(try await vault.token(for: key) == nil)
        }
    }

    @Test func aDeviceUserCodeWithControlsIsNeverShownRaw() async throws {
        let server = try TestOAuthServer.require()
        let key = try CredentialKey(service: uniqueName("tv-escape"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let child = try runVault(
                scratch,
                [
                    "login", key.service, key.account, "--token-url", server.url.appendingPathComponent("token").absoluteString,
                    "--client-id", TestOAuthServer.clientID, "--device-url",
                    server.url.appendingPathComponent("hostile/device_authorization").absoluteString,
                ], label: "device")
            try child.start()
            defer { if child.process.isRunning { child.kill9() } }
            // A user code a person cannot read as it is: refused at once, never shown raw.
            let status = try await child.wait(bound: .seconds(30))
            #expect(status == 1, "\(child.errorOutput)")
            #expect(child.errorOutput.contains("user code"), "\(child.errorOutput)")
            #expect(Self.rawEscapes(in: child.errorOutput).isEmpty, "raw escapes on stderr: \(Self.rawEscapes(in: child.errorOutput))")
            #expect(try await vault.token(for: key) == nil)
        }
    }

    @Test func theOneEscapingFunctionCoversWhatServersSend() {
        // The library's own view, for programs that print these values themselves.
        let error = OAuthErrorResponse(error: "invalid\u{1B}[2J", errorDescription: Self.hostile)
        #expect(Self.rawEscapes(in: "\(error)").isEmpty, "\(error)")
        #expect("\(error)".hasPrefix("invalid\\u{1B}[2J: \\u{1B}]52;c;"))
    }
}
#endif
