#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import Foundation
import TokenVault

extension VaultCommand {
    struct Login: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "login",
            abstract: "Log in with OAuth and store the token with how to refresh it.",
            discussion: """
                With --device-url, runs the device authorization grant (RFC 8628): prints the user \
                code and where to enter it on stderr, then waits for the approval. With \
                --authorize-url, runs the authorization code grant with PKCE (RFC 7636) on a \
                loopback redirect (http://127.0.0.1:<random port>/callback): prints the URL to open \
                on stderr, opens it with xdg-open when there is a display, and waits for the browser \
                to come back. With --issuer, the endpoints come from the server's \
                discovery metadata (fetched once and stored with the entry): the browser login, or \
                the device grant with --device.

                The token is stored with its refresh description, so `vault get --fresh` and \
                `vault refresh` keep it fresh afterwards. The client secret is read from a file, \
                never from the command line.

                  vault login github --token-url https://github.com/login/oauth/access_token \\
                      --client-id Iv1.abc --device-url https://github.com/login/device/code
                  vault login work --issuer https://login.example.com --client-id tokenvault
                """
        )

        @OptionGroup var global: GlobalOptions
        @OptionGroup var entry: EntryArguments
        @OptionGroup var refresh: RefreshOptions
        @OptionGroup var http: HTTPOptions

        @Option(help: ArgumentHelp("The device authorization endpoint: log in with the device grant.", valueName: "url"))
        var deviceURL: String?

        @Option(help: ArgumentHelp("The authorization endpoint: log in in a browser (code grant with PKCE).", valueName: "url"))
        var authorizeURL: String?

        @Option(help: ArgumentHelp("How long to wait for the browser's redirect (code grant).", valueName: "seconds"))
        var timeout: Int = 300

        @Flag(help: "With --issuer: log in with the device grant rather than in a browser.")
        var device = false

        func validate() throws {
            if refresh.issuer != nil {
                guard deviceURL == nil || authorizeURL == nil else {
                    throw ValidationError("Give at most one of --device-url (device grant) or --authorize-url (browser login).")
                }
                guard !device || authorizeURL == nil else {
                    throw ValidationError("--device asks for the device grant; it cannot go with --authorize-url.")
                }
            } else {
                guard (deviceURL == nil) != (authorizeURL == nil) else {
                    throw ValidationError(
                        "Give one of --device-url (device grant) or --authorize-url (browser login), or --issuer to find them by discovery.")
                }
                guard !device else { throw ValidationError("--device picks the device grant from --issuer's metadata; give --issuer.") }
            }
            guard refresh.tokenURL != nil || refresh.issuer != nil, refresh.clientID != nil else {
                throw ValidationError("vault login needs --client-id and --token-url (or --issuer).")
            }
            guard timeout > 0 else { throw ValidationError("--timeout must be a positive number of seconds.") }
        }

        func run() async throws {
            let key = try entry.key()
            let client = try http.client()
            guard let registration = try await refresh.registration(client: client) else {
                throw ValidationError("vault login needs --client-id and --token-url (or --issuer).")
            }
            // Open (or create) the vault first: a passphrase is asked before the login, and a vault
            // that cannot be opened fails before the user approves anything.
            let vault = try await global.openVault()
            let token: OAuthToken
            // The grant: the endpoint named, else what discovery found (the browser unless --device).
            let metadata = registration.metadata
            var deviceURL = self.deviceURL
            var authorizeURL = self.authorizeURL
            if deviceURL == nil && authorizeURL == nil, let metadata {
                if device || metadata.authorizationEndpoint == nil {
                    guard let found = metadata.deviceAuthorizationEndpoint else {
                        throw VaultError(
                            .configurationError,
                            "The issuer's metadata names no \(device ? "device_authorization_endpoint" : "authorization_endpoint or device_authorization_endpoint"); give --device-url or --authorize-url.")
                    }
                    deviceURL = found.absoluteString
                } else {
                    authorizeURL = metadata.authorizationEndpoint?.absoluteString
                }
            }
            if let deviceURL {
                guard let url = URL(string: deviceURL), url.scheme != nil else { throw ValidationError("--device-url is not a URL.") }
                let authorization = try await client.startDeviceAuthorization(at: url, registration: registration)
                var lines = ["To log in, open \(authorization.verificationURI.absoluteString)", "and enter the code: \(CredentialKey.escaped(authorization.userCode))"]
                if let complete = authorization.verificationURIComplete {
                    lines.append("(or open \(complete.absoluteString))")
                }
                try Output.note(lines.joined(separator: "\n"))
                token = try await client.pollDeviceAuthorization(authorization, registration: registration)
            } else {
                guard let authorizeURL, let url = URL(string: authorizeURL), url.scheme != nil else {
                    throw ValidationError("--authorize-url is not a URL.")
                }
                let login = try AuthorizationCodeLogin(authorizationEndpoint: url, registration: registration, timeout: .seconds(timeout))
                token = try await login.run(client: client) { url in
                    try Output.note("To log in, open this URL in a browser:\n\(url.absoluteString)")
                    if AuthorizationCodeLogin.openInBrowser(url) {
                        try Output.note("(opened with xdg-open)")
                    }
                }
            }
            try await vault.saveToken(token, for: key, registration: registration)
            let expiry = token.expiresAt.map { "expires \(Output.timestamp($0))" } ?? "no known expiry"
            try Output.note("Logged in; saved the token for \(key) (\(expiry)) in the \(vault.selection.backend) backend.")
        }
    }
}
#endif
