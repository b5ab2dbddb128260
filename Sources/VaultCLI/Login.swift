#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
@_spi(AgentWire) import TokenVault

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

                With --issuer and a scope holding openid, the browser login sends a nonce, and the \
                ID token is verified before anything is saved: its signature with a key from the \
                issuer's jwks_uri (RS256, ES256 or another RSA or ECDSA algorithm), iss, aud, exp, \
                iat (60 s of clock skew) and the nonce. A refused ID token exits 5 and saves nothing; \
                vault get --json shows id_token_verified.

                A provider that accepts only the exact redirect URI registered for the client \
                (Atlassian, GitLab, many OpenID providers) needs --redirect-uri with that URI, such as \
                http://127.0.0.1:8976/callback (register it so), or --redirect-port 8976 for \
                http://127.0.0.1:8976/callback. A port in use exits 8. A provider that redirects \
                with error= is reported as its error (exit 1); a redirect that never comes ends \
                after --timeout (exit 6), most often because the redirect URI is not registered.

                Provider presets: vault login atlassian|github|google|microsoft|gitlab --client-id ID \
                [--client-secret-file PATH] need nothing else (or --provider NAME with any SERVICE): \
                the endpoints, the grant (device where offered, else code with PKCE), the default \
                scope and the authorization parameters are the provider's documented ones; \
                --dry-run prints every request the login would make, never a secret. --auth-param \
                adds parameters to the authorization (and device authorization) request; --param \
                to the token requests.

                The token is stored with its refresh description, so `vault get --fresh` and \
                `vault refresh` keep it fresh afterwards. The client secret is read from a file, \
                never from the command line.

                  vault login atlassian --client-id ID --client-secret-file ~/.config/jira.secret
                  vault login github --client-id Iv1.abc
                  vault login work --issuer https://login.example.com --client-id tokenvault \\
                      --redirect-uri http://127.0.0.1:8976/callback
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

        @Flag(help: "With --issuer or a provider preset: log in with the device grant rather than in a browser.")
        var device = false

        @Flag(help: "With a provider preset whose grant is the device grant: log in in a browser instead.")
        var browser = false

        @Option(
            name: .customLong("auth-param"),
            help: ArgumentHelp(
                "An extra parameter for the authorization request (browser) and the device authorization request, such as audience=api.atlassian.com (repeatable; --param is for the token request).",
                valueName: "name=value"))
        var authParameters: [String] = []

        @Option(
            help: ArgumentHelp(
                "The redirect URI registered for the client, exactly: http://127.0.0.1:PORT/PATH (or localhost), for providers that take no other port.",
                valueName: "uri"))
        var redirectURI: String?

        @Option(help: ArgumentHelp("Short for --redirect-uri http://127.0.0.1:PORT/callback.", valueName: "port"))
        var redirectPort: Int?

        @Option(
            help: ArgumentHelp(
                "A provider preset (\(LoginPreset.names.joined(separator: ", "))); the default when SERVICE is one of those names and neither --token-url nor --issuer is given.",
                valueName: "name"))
        var provider: String?

        @Option(help: ArgumentHelp("Microsoft Entra ID: the tenant (id or domain; default common).", valueName: "tenant"))
        var tenant: String?

        @Option(help: ArgumentHelp("GitLab: the instance's URL (default https://gitlab.com).", valueName: "url"))
        var instance: String?

        @Flag(help: "Print the requests the login would make (never a secret), and do nothing.")
        var dryRun = false

        @Flag(
            help: ArgumentHelp(
                "Bind the tokens to a DPoP key (RFC 9449) made for this login and sealed in the entry: every token and resource request is signed with it, and a copied token is useless without it."
            ))
        var dpop = false

        @Option(
            name: .customLong("dpop-alg"),
            help: ArgumentHelp(
                "With --dpop: ES256 or EdDSA (default: ES256, or what the issuer's dpop_signing_alg_values_supported offers).",
                valueName: "alg"))
        var dpopAlgorithm: String?

        /// The preset: --provider, or SERVICE's name when no endpoint is given.
        func preset() throws -> LoginPreset? {
            if let provider {
                guard let preset = try LoginPreset.named(provider, tenant: tenant, instance: instance) else {
                    throw ValidationError("--provider must be one of \(LoginPreset.names.joined(separator: ", ")).")
                }
                return preset
            }
            guard refresh.tokenURL == nil, refresh.issuer == nil, deviceURL == nil, authorizeURL == nil else { return nil }
            return try LoginPreset.named(entry.service, tenant: tenant, instance: instance)
        }

        /// --auth-param as a dictionary, after the preset's.
        func authorizationParameters(_ preset: LoginPreset?) throws -> [String: String] {
            var parameters: [String: String] = [:]
            for (name, value) in preset?.authorizationParameters ?? [] { parameters[name] = value }
            for parameter in authParameters {
                let parts = parameter.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard parts.count == 2, !parts[0].isEmpty else { throw ValidationError("--auth-param takes name=value.") }
                let name = String(parts[0])
                guard !AuthorizationCodeLogin.reservedAuthorizationParameters.contains(name) else {
                    throw ValidationError("--auth-param \(name) is set by the login itself (use --scope for the scope, --redirect-uri for the redirect).")
                }
                parameters[name] = String(parts[1])
            }
            return parameters
        }

        /// --redirect-uri or --redirect-port, else the preset's fixed redirect.
        func fixedRedirect(_ preset: LoginPreset?) throws -> URL? {
            if let redirectURI {
                guard let url = URL(string: redirectURI) else { throw ValidationError("--redirect-uri is not a URL.") }
                do {
                    _ = try AuthorizationCodeLogin.loopbackRedirect(url)
                } catch let error as VaultError {
                    throw ValidationError("--redirect-uri: \(error.message)")
                }
                return url
            }
            if let redirectPort {
                guard (1...65535).contains(redirectPort) else { throw ValidationError("--redirect-port must be a port from 1 to 65535.") }
                return URL(string: "http://127.0.0.1:\(redirectPort)/callback")
            }
            return preset?.fixedRedirectURI.flatMap(URL.init(string:))
        }

        func validate() throws {
            guard redirectURI == nil || redirectPort == nil else { throw ValidationError("Give --redirect-uri or --redirect-port, not both.") }
            guard !(device && browser) else { throw ValidationError("Give --device or --browser, not both.") }
            let preset: LoginPreset?
            do {
                preset = try self.preset()
            } catch let error as VaultError {
                throw ValidationError(error.message)
            }
            guard preset != nil || (tenant == nil && instance == nil) else {
                throw ValidationError("--tenant and --instance go with a provider preset (microsoft, gitlab).")
            }
            _ = try authorizationParameters(preset)
            _ = try fixedRedirect(preset)
            guard timeout > 0 else { throw ValidationError("--timeout must be a positive number of seconds.") }
            if let dpopAlgorithm {
                guard dpop else { throw ValidationError("--dpop-alg goes with --dpop.") }
                guard DPoPAlgorithm(named: dpopAlgorithm) != nil else { throw ValidationError("--dpop-alg must be ES256 or EdDSA.") }
            }
            guard deviceURL == nil || authorizeURL == nil else {
                throw ValidationError("Give at most one of --device-url (device grant) or --authorize-url (browser login).")
            }
            if preset != nil {
                guard refresh.clientID != nil else { throw ValidationError("vault login \(entry.service) needs --client-id.") }
                return
            }
            guard !browser else { throw ValidationError("--browser picks the browser login of a provider preset.") }
            if refresh.issuer != nil {
                guard !device || authorizeURL == nil else {
                    throw ValidationError("--device asks for the device grant; it cannot go with --authorize-url.")
                }
            } else {
                guard (deviceURL == nil) != (authorizeURL == nil) else {
                    throw ValidationError(
                        "Give one of --device-url (device grant) or --authorize-url (browser login), or --issuer to find them by discovery, or a provider preset (\(LoginPreset.names.joined(separator: ", "))).")
                }
                guard !device else { throw ValidationError("--device picks the device grant from --issuer's metadata or a preset; give --issuer.") }
            }
            guard refresh.tokenURL != nil || refresh.issuer != nil, refresh.clientID != nil else {
                throw ValidationError("vault login needs --client-id and --token-url (or --issuer).")
            }
        }

        func run() async throws {
            let key = try entry.key()
            var client = try http.client()
            let environment = ProcessInfo.processInfo.environment
            let preset = try self.preset()
            // The preset fills in what the command line leaves out; what is given wins.
            var refresh = self.refresh
            var deviceURL = self.deviceURL
            var authorizeURL = self.authorizeURL
            if let preset {
                if refresh.tokenURL == nil && refresh.issuer == nil {
                    refresh.tokenURL = try LoginPreset.endpoint(preset.tokenURL, environment: environment).absoluteString
                }
                refresh.scope = preset.scope(given: refresh.scope)
                if refresh.clientSecretFile != nil && refresh.clientAuth == nil { refresh.clientAuth = preset.secretInBody ? "post" : "basic" }
                if refresh.revocationEndpoint == nil, refresh.issuer == nil, let revocation = preset.revocationURL {
                    refresh.revocationEndpoint = try LoginPreset.endpoint(revocation, environment: environment).absoluteString
                }
                if deviceURL == nil && authorizeURL == nil && refresh.issuer == nil {
                    let useDevice = device || (preset.grant == .device && !browser)
                    if useDevice {
                        guard let url = preset.deviceURL else {
                            throw VaultError(.configurationError, "\(preset.title) offers no device grant; log in in a browser.")
                        }
                        deviceURL = try LoginPreset.endpoint(url, environment: environment).absoluteString
                    } else if let url = preset.authorizeURL {
                        authorizeURL = try LoginPreset.endpoint(url, environment: environment).absoluteString
                    }
                }
            }
            let authorizationParameters = try self.authorizationParameters(preset)
            guard let registration = try await refresh.registration(client: client, readingSecret: !dryRun) else {
                throw ValidationError("vault login needs --client-id and --token-url (or --issuer).")
            }
            // The grant: the endpoint named, else what discovery found (the browser unless --device).
            if deviceURL == nil && authorizeURL == nil, let metadata = registration.metadata {
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
            var codeLogin: AuthorizationCodeLogin?
            var deviceEndpoint: URL?
            if let deviceURL {
                guard let url = URL(string: deviceURL), url.scheme != nil else { throw ValidationError("--device-url is not a URL.") }
                deviceEndpoint = url
            } else {
                guard let authorizeURL, let url = URL(string: authorizeURL), url.scheme != nil else {
                    throw ValidationError("--authorize-url is not a URL.")
                }
                codeLogin = try AuthorizationCodeLogin(
                    authorizationEndpoint: url, registration: registration, timeout: .seconds(timeout), redirectURI: try fixedRedirect(preset),
                    authorizationParameters: authorizationParameters)
            }
            if dryRun {
                try Output.line(
                    LoginDryRun(
                        preset: preset, registration: registration, secretFile: refresh.clientSecretFile, codeLogin: codeLogin,
                        deviceEndpoint: deviceEndpoint, authorizationParameters: authorizationParameters
                    ).text)
                return
            }
            // Open (or create) the vault first: a passphrase is asked before the login, and a vault
            // that cannot be opened fails before the user approves anything. An agent of this
            // user that holds the vault open stores the token instead (no passphrase here).
            let throughAgent = AgentCLI.holdsVaultOpen(global: global)
            let openedVault = throughAgent ? nil : try await global.openVault()
            if dpop {
                // A new key for a new grant: made here, sealed with the token, never shown.
                guard
                    let algorithm = dpopAlgorithm.flatMap(DPoPAlgorithm.init(named:))
                        ?? DPoPAlgorithm.preferred(among: registration.metadata?.dpopSigningAlgValuesSupported)
                else {
                    throw VaultError(
                        .configurationError, "The issuer's metadata lists no DPoP algorithm TokenVault signs with (ES256, EdDSA).")
                }
                client.dpopKey = try DPoPKey.generate(algorithm)
            }
            var token: OAuthToken
            if let deviceEndpoint {
                let authorization = try await client.startDeviceAuthorization(
                    at: deviceEndpoint, registration: registration, parameters: authorizationParameters)
                var lines = ["To log in, open \(authorization.verificationURI.absoluteString)", "and enter the code: \(CredentialKey.escaped(authorization.userCode))"]
                if let complete = authorization.verificationURIComplete {
                    lines.append("(or open \(complete.absoluteString))")
                }
                try Output.note(lines.joined(separator: "\n"))
                token = try await client.pollDeviceAuthorization(authorization, registration: registration)
            } else if let codeLogin {
                if let redirect = codeLogin.redirectURI {
                    try Output.note("The redirect URI is \(redirect.absoluteString): it must be registered for the client exactly.")
                }
                token = try await codeLogin.run(client: client) { url in
                    try Output.note("To log in, open this URL in a browser:\n\(url.absoluteString)")
                    if AuthorizationCodeLogin.openInBrowser(url) {
                        try Output.note("(opened with xdg-open)")
                    }
                }
            } else {
                throw ValidationError("Give --device-url or --authorize-url.")
            }
            // OpenID Connect: the ID token is checked before anything is saved (issue 31 point 6).
            token = try await LoginIDToken.verify(token, registration: registration, nonce: codeLogin?.nonce, client: client)
            let backend: String
            if throughAgent,
                let written = try AgentCLI.write(
                    global: global,
                    { .store(try AgentStoreRequest(key: key, token: token, registration: registration, dpopKey: client.dpopKey, vault: $0)) })
            {
                backend = written.backend
            } else {
                // Directly, as without an agent (also when the agent stopped answering meanwhile).
                let vault: Vault
                if let openedVault { vault = openedVault } else { vault = try await global.openVault() }
                try await vault.saveToken(token, for: key, registration: registration, dpopKey: client.dpopKey)
                backend = "\(vault.selection.backend)"
            }
            if let dpopKey = client.dpopKey, !token.tokenType.equalsIgnoringCase("DPoP") {
                try Output.note(
                    "The server answered with a \(token.tokenType) token, not a DPoP-bound one: it did not bind the grant to the key (jkt \(dpopKey.thumbprint)).")
            }
            let expiry = token.expiresAt.map { "expires \(Output.timestamp($0))" } ?? "no known expiry"
            try Output.note("Logged in; saved the token for \(key) (\(expiry)) in the \(backend) backend.")
        }
    }
}
#endif
