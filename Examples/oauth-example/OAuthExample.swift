import ArgumentParser
import Foundation
import TokenVault

#if canImport(FoundationNetworking)
import FoundationNetworking  // URLRequest and URLSession on Linux
#endif

/// An example OAuth client that keeps its tokens in TokenVault.
///
///     oauth-example login  --server http://127.0.0.1:8000   # device authorization grant
///     oauth-example whoami --server http://127.0.0.1:8000   # calls the API with a fresh token
///
/// Everything OAuth is the library's: the device grant, the refresh grant (the vault refreshes
/// the entry by itself, one refresh per expiry across every process), and compare-and-refresh
/// after a 401. What is left is what a client really writes: where the server is, what to show
/// the user, and the API call.
///
/// The vault comes from the environment (`TOKEN_VAULT_BACKEND`, `TOKEN_VAULT_FILE`,
/// `TOKEN_VAULT_KEY_FILE`, …; see `VaultConfiguration.fromEnvironment`). With none of them set it
/// is `auto`: the desktop's Secret Service when it answers and is unlocked, otherwise the
/// encrypted file, which then needs `TOKEN_VAULT_KEY_FILE` or `TOKEN_VAULT_PASSPHRASE_FILE`.
/// No token is printed.
@main
struct OAuthExample: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "oauth-example",
        abstract: "An example OAuth client that keeps its tokens in TokenVault.",
        subcommands: [Login.self, WhoAmI.self]
    )
}

struct ServerOptions: ParsableArguments {
    @Option(help: "The authorization server; its endpoints are /token, /device_authorization and /api/me.")
    var server: String

    @Option(help: "The OAuth client ID.")
    var clientID = "tokenvault-example"

    @Option(help: "The vault entry's service.")
    var service = "oauth-example"

    @Option(help: "The vault entry's account.")
    var account = CredentialKey.defaultAccount

    func endpoint(_ path: String) throws -> URL {
        guard let base = URL(string: server), base.host != nil else {
            throw ValidationError("--server must be an https URL (or http on 127.0.0.1).")
        }
        return base.appendingPathComponent(path)
    }

    /// How the token is refreshed: stored with it, so any process can refresh it.
    func client() throws -> RefreshDescription {
        try RefreshDescription(tokenEndpoint: endpoint("token"), clientID: clientID)
    }

    func key() throws -> CredentialKey {
        try CredentialKey(service: service, account: account)
    }
}

/// Prints a line now, even when standard output is a file or a pipe.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

extension OAuthExample {
    struct Login: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sign in with the device authorization grant (RFC 8628) and save the token.")

        @OptionGroup var options: ServerOptions

        func run() async throws {
            let vault = try await Vault.open(.fromEnvironment())
            let client = try options.client()
            let oauth = TokenEndpointClient()
            let device = try await oauth.startDeviceAuthorization(at: options.endpoint("device_authorization"), description: client)
            say("To sign in, open \(device.verificationURI) and enter the code \(device.userCode)")
            let token = try await oauth.pollDeviceAuthorization(device, description: client)
            try await vault.saveToken(token, for: options.key(), refresh: client)
            say("Signed in. The token is saved in the \(vault.selection.backend) vault as \(try options.key()).")
        }
    }

    struct WhoAmI: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "whoami",
            abstract: "Call the API as the signed-in user, refreshing the token first if it is about to expire.")

        @OptionGroup var options: ServerOptions

        @Option(help: "Refresh when the token expires within this many seconds.")
        var leeway: Double = 2

        func run() async throws {
            let vault = try await Vault.open(.fromEnvironment())
            let key = try options.key()
            do {
                // Every process and task that gets here at once shares one refresh.
                var token = try await vault.freshToken(for: key, leeway: leeway)
                var (body, status) = try await callAPI(with: token)
                if status == 401 {
                    // Refused although it looked valid: refresh once, however many callers saw the 401.
                    token = try await vault.refreshAfterRejection(of: token.accessToken, for: key)
                    (body, status) = try await callAPI(with: token)
                }
                guard status == 200, let user = try JSONDecoder().decode([String: String].self, from: body)["user"] else {
                    say("The API refused the token (HTTP \(status)).")
                    throw ExitCode(1)
                }
                say("Signed in as \(user).")
            } catch let error as VaultError where error.code == .reauthenticationRequired || error.code == .notFound {
                say("\(error.message) Run: oauth-example login --server \(options.server)")
                throw ExitCode(2)
            }
        }

        func callAPI(with token: OAuthToken) async throws -> (Data, Int) {
            var request = URLRequest(url: try options.endpoint("api/me"))
            request.setValue("\(token.tokenType) \(token.accessToken)", forHTTPHeaderField: "Authorization")
            let (body, response) = try await URLSession.shared.data(for: request)
            return (body, (response as? HTTPURLResponse)?.statusCode ?? 0)
        }
    }
}
