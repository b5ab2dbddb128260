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
/// Options are `--name value` pairs, read by hand: the example shows the library, not an
/// argument parser (and, without swift-argument-parser, `swift package generate-manual` documents
/// only the products, not this example).
struct ServerOptions {
    var server = ""
    var clientID = "tokenvault-example"
    var service = "oauth-example"
    var account = CredentialKey.defaultAccount
    /// `whoami`: refresh when the token expires within this many seconds.
    var leeway: Double = 2

    init(_ arguments: ArraySlice<String>) throws {
        var rest = arguments
        while let name = rest.popFirst() {
            guard let value = rest.popFirst() else { throw UsageError("\(name) needs a value.") }
            switch name {
            case "--server": server = value
            case "--client-id": clientID = value
            case "--service": service = value
            case "--account": account = value
            case "--leeway":
                guard let seconds = Double(value), seconds >= 0 else { throw UsageError("--leeway takes seconds.") }
                leeway = seconds
            default: throw UsageError("Unknown option \(name).")
            }
        }
        guard !server.isEmpty else { throw UsageError("--server is required.") }
    }

    func endpoint(_ path: String) throws -> URL {
        guard let base = URL(string: server), base.host != nil else {
            throw UsageError("--server must be an https URL (or http on 127.0.0.1).")
        }
        return base.appendingPathComponent(path)
    }

    /// How the token is refreshed: stored with it, so any process can refresh it.
    func client() throws -> ClientRegistration {
        try ClientRegistration(tokenEndpoint: endpoint("token"), clientID: clientID)
    }

    func key() throws -> CredentialKey {
        try CredentialKey(service: service, account: account)
    }
}

struct UsageError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

@main
enum OAuthExample {
    static let usage = """
        usage: oauth-example login  --server URL [--client-id ID] [--service NAME] [--account NAME]
               oauth-example whoami --server URL [--client-id ID] [--service NAME] [--account NAME] [--leeway SECONDS]
        """

    static func main() async {
        let arguments = CommandLine.arguments.dropFirst()
        do {
            switch arguments.first {
            case "login": try await login(ServerOptions(arguments.dropFirst()))
            case "whoami": try await whoami(ServerOptions(arguments.dropFirst()))
            default: throw UsageError("Say login or whoami.")
            }
        } catch let error as UsageError {
            FileHandle.standardError.write(Data("oauth-example: \(error.message)\n\(usage)\n".utf8))
            exit(64)
        } catch let error as VaultError where error.code == .reauthenticationRequired || error.code == .notFound {
            say("\(error.message) Run: oauth-example login --server URL")
            exit(2)
        } catch {
            // A VaultError's description never holds a secret.
            FileHandle.standardError.write(Data("oauth-example: \(error)\n".utf8))
            exit(1)
        }
    }
}

/// Prints a line now, even when standard output is a file or a pipe.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

extension OAuthExample {
    /// Sign in with the device authorization grant (RFC 8628) and save the token.
    static func login(_ options: ServerOptions) async throws {
        let vault = try await Vault.open(.fromEnvironment())
        let client = try options.client()
        let oauth = TokenEndpointClient()
        let device = try await oauth.startDeviceAuthorization(at: options.endpoint("device_authorization"), registration: client)
        say("To sign in, open \(device.verificationURI) and enter the code \(device.userCode)")
        let token = try await oauth.pollDeviceAuthorization(device, registration: client)
        try await vault.saveToken(token, for: options.key(), registration: client)
        say("Signed in. The token is saved in the \(vault.selection.backend) vault as \(try options.key()).")
    }

    /// Call the API as the signed-in user, refreshing the token first if it is about to expire.
    static func whoami(_ options: ServerOptions) async throws {
        let vault = try await Vault.open(.fromEnvironment())
        let key = try options.key()
        // Every process and task that gets here at once shares one refresh.
        var token = try await vault.freshToken(for: key, leeway: options.leeway)
        var (body, status) = try await callAPI(options, with: token)
        if status == 401 {
            // Refused although it looked valid: refresh once, however many callers saw the 401.
            token = try await vault.refreshAfterRejection(of: token.accessToken, for: key)
            (body, status) = try await callAPI(options, with: token)
        }
        guard status == 200, let user = try JSONDecoder().decode([String: String].self, from: body)["user"] else {
            say("The API refused the token (HTTP \(status)).")
            exit(1)
        }
        say("Signed in as \(user).")
    }

    static func callAPI(_ options: ServerOptions, with token: OAuthToken) async throws -> (Data, Int) {
        var request = URLRequest(url: try options.endpoint("api/me"))
        request.setValue("\(token.tokenType) \(token.accessToken)", forHTTPHeaderField: "Authorization")
        let (body, response) = try await URLSession.shared.data(for: request)
        return (body, (response as? HTTPURLResponse)?.statusCode ?? 0)
    }
}
