import ArgumentParser
import Foundation
import TokenVault

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An example OAuth client that keeps its tokens in TokenVault.
///
///     oauth-example login  --server http://127.0.0.1:8000   # device authorization grant
///     oauth-example whoami --server http://127.0.0.1:8000   # calls the API with a fresh token
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

    var baseURL: URL {
        get throws {
            guard let url = URL(string: server), url.scheme == "http" || url.scheme == "https" else {
                throw ValidationError("--server must be an http or https URL.")
            }
            return url
        }
    }

    func client() throws -> OAuthClient {
        let base = try baseURL
        return OAuthClient(
            tokenEndpoint: base.appendingPathComponent("token"),
            deviceAuthorizationEndpoint: base.appendingPathComponent("device_authorization"),
            clientID: clientID)
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

        @Option(help: "The scope to ask for.")
        var scope: String?

        func run() async throws {
            let vault = try await Vault.open(.fromEnvironment())
            let client = try options.client()
            let authorization = try await client.startDeviceAuthorization(scope: scope)
            say("To sign in, open \(authorization.verificationURI) and enter the code \(authorization.userCode)")
            let token = try await client.pollForToken(authorization)
            try await vault.saveToken(token, for: options.key())
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
            let client = try options.client()
            let token: OAuthToken
            do {
                // Every process and task that gets here at once shares one refresh.
                token = try await vault.freshToken(for: options.key(), leeway: leeway) { stale in
                    try await client.refresh(stale)
                }
            } catch let error as VaultError where error.code == .reauthenticationRequired || error.code == .notFound {
                say("\(error.message) Run: oauth-example login --server \(options.server)")
                throw ExitCode(2)
            }

            var request = URLRequest(url: try options.baseURL.appendingPathComponent("api/me"))
            request.setValue("\(token.tokenType) \(token.accessToken)", forHTTPHeaderField: "Authorization")
            let (data, response) = try await URLSession.shared.data(for: request)
            let status = (response as? HTTPURLResponse)?.statusCode ?? 0
            guard status == 200,
                let body = try JSONSerialization.jsonObject(with: data) as? [String: Any],
                let user = body["user"] as? String
            else {
                say("The API refused the token (HTTP \(status)).")
                throw ExitCode(1)
            }
            say("Signed in as \(user).")
        }
    }
}
