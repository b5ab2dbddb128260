#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
import TokenVault

internal import TokenVaultSystem

extension VaultCommand {
    struct Refresh: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "refresh",
            abstract: "Refresh a stored token now, with the refresh description stored with it.",
            discussion: """
                The entry must have been stored with --token-url and --client-id (vault set or vault \
                login). The refresh runs under the same per-key lock as `vault get --fresh`, so it never \
                races another process. Prints nothing on stdout; `vault get` prints the new token.

                A refresh token the server rejects (invalid_grant) exits with code 7: log in again. \
                A token endpoint that cannot be reached after the retries, or that gives no answer \
                within the deadline (20 s in all by default, --http-deadline), exits with code 6.
                """
        )

        @OptionGroup var global: GlobalOptions
        @OptionGroup var entry: EntryArguments
        @OptionGroup var http: HTTPOptions

        func run() async throws {
            let key = try entry.key()
            let client = try http.client()
            let vault = try await RefreshCLI.existingVault(global, key: key)
            let token = try await vault.refreshToken(for: key, client: client)
            let expiry = token.expiresAt.map { "expires \(Output.timestamp($0))" } ?? "no known expiry"
            try Output.note("Refreshed the token for \(key) (\(expiry)).")
        }
    }
}

/// How `vault set` and `vault login` learn to refresh an entry: the token endpoint, the client and
/// its secret (from a file, never the command line).
struct RefreshOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The token endpoint, for refreshing the token (https, or http on loopback).", valueName: "url"))
    var tokenURL: String?

    @Option(
        help: ArgumentHelp(
            "The authorization server's issuer URL: its endpoints are found by discovery (OpenID Connect Discovery, RFC 8414), once, and stored with the entry.",
            valueName: "url"))
    var issuer: String?

    @Option(help: ArgumentHelp("The revocation endpoint (RFC 7009), where vault logout revokes the tokens.", valueName: "url"))
    var revocationEndpoint: String?

    @Option(name: .customLong("client-id"), help: ArgumentHelp("The OAuth client id.", valueName: "id"))
    var clientID: String?

    @Option(
        help: ArgumentHelp(
            "A file holding the client secret (readable by you alone). It is sealed in the entry with the token.",
            valueName: "path"), completion: .file())
    var clientSecretFile: String?

    @Option(help: ArgumentHelp("How the client secret is sent: basic (client_secret_basic, the default) or post.", valueName: "method"))
    var clientAuth: String?

    @Option(help: ArgumentHelp("The scope to ask for.", valueName: "scope"))
    var scope: String?

    @Option(
        name: .customLong("param"),
        help: ArgumentHelp("An extra parameter for every token request, such as resource=https://api.example.com (repeatable).", valueName: "name=value"))
    var parameters: [String] = []

    /// Everything but the client secret file, checked while parsing, so that a usage error shows
    /// the subcommand's own usage. Whether the endpoint is there is the command's to check
    /// (``validateComplete()``): `vault login PROVIDER` takes it from the preset.
    func validate() throws {
        _ = try checked(requireEndpoint: false)
    }

    /// ``validate()``, and the token endpoint (or issuer) and client id must come together.
    func validateComplete() throws {
        _ = try checked()
    }

    /// Whether any refresh option was given.
    var isGiven: Bool {
        tokenURL != nil || issuer != nil || revocationEndpoint != nil || clientID != nil || clientSecretFile != nil
            || clientAuth != nil || scope != nil || !parameters.isEmpty
    }

    /// The options as a registration needs them, or nil when none is given.
    private func checked(requireEndpoint: Bool = true) throws -> (
        url: URL?, issuer: URL?, revocation: URL?, clientID: String, parameters: [String: String], post: Bool?
    )? {
        guard isGiven else { return nil }
        guard tokenURL == nil || issuer == nil else {
            throw ValidationError("Give --token-url or --issuer, not both: the issuer's metadata names its token endpoint.")
        }
        guard tokenURL != nil || issuer != nil || !requireEndpoint, let clientID else {
            throw ValidationError(
                "Give --token-url (or --issuer) and --client-id together: the vault needs both to refresh the token.")
        }
        let url = try tokenURL.map { text in
            guard let url = URL(string: text), url.scheme != nil else { throw ValidationError("--token-url is not a URL.") }
            return url
        }
        let issuerURL = try issuer.map { text in
            guard let url = URL(string: text), url.scheme != nil else { throw ValidationError("--issuer is not a URL.") }
            return url
        }
        let revocation = try revocationEndpoint.map { text in
            guard let url = URL(string: text), url.scheme != nil else { throw ValidationError("--revocation-endpoint is not a URL.") }
            return url
        }
        var extra: [String: String] = [:]
        for parameter in parameters {
            let parts = parameter.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty else {
                throw ValidationError("--param takes name=value.")
            }
            extra[String(parts[0])] = String(parts[1])
        }
        // nil: not said; the issuer's metadata may choose (basic unless it takes only post).
        var post: Bool?
        if clientSecretFile != nil {
            switch clientAuth {
            case nil: post = nil
            case "basic", "client_secret_basic": post = false
            case "post", "client_secret_post": post = true
            default: throw ValidationError("--client-auth must be basic or post.")
            }
        } else if clientAuth != nil && clientAuth != "none" {
            throw ValidationError("--client-auth needs --client-secret-file.")
        }
        return (url, issuerURL, revocation, clientID, extra, post)
    }

    /// The client registration these options make, or nil when none is given. With --issuer,
    /// the server's metadata is fetched (once, here) with `client`.
    /// With `readingSecret` false (`vault login --dry-run`), the client secret file is not read:
    /// the registration holds a stand-in that is never sent or shown.
    func registration(client: TokenEndpointClient, readingSecret: Bool = true) async throws -> ClientRegistration? {
        guard let options = try checked() else { return nil }
        var metadata: AuthorizationServerMetadata?
        if let issuer = options.issuer {
            metadata = try await client.discover(issuer: issuer)
        }
        var authentication = ClientAuthentication.none
        if let clientSecretFile {
            let secret = readingSecret ? try Self.readSecret(clientSecretFile) : "(not read: --dry-run)"
            var post = options.post ?? false
            if options.post == nil, let supported = metadata?.tokenEndpointAuthMethodsSupported,
                !supported.contains("client_secret_basic"), supported.contains("client_secret_post")
            {
                post = true
            }
            authentication = post ? .clientSecretPost(secret) : .clientSecretBasic(secret)
        }
        if let metadata {
            let registration = try ClientRegistration(
                metadata: metadata, clientID: options.clientID, clientAuthentication: authentication, scope: scope,
                additionalParameters: options.parameters)
            guard let revocation = options.revocation else { return registration }
            return try ClientRegistration(
                tokenEndpoint: registration.tokenEndpoint, clientID: options.clientID, clientAuthentication: authentication,
                scope: scope, additionalParameters: options.parameters, revocationEndpoint: revocation, metadata: metadata)
        }
        guard let url = options.url else { return nil }
        return try ClientRegistration(
            tokenEndpoint: url, clientID: options.clientID, clientAuthentication: authentication, scope: scope,
            additionalParameters: options.parameters, revocationEndpoint: options.revocation)
    }

    /// The secret in `path`: its first line. The file must be a regular file that group and
    /// others cannot read, as key files must.
    private static func readSecret(_ path: String) throws -> String {
        let found: SystemCall.FileStatus?
        do {
            found = try SystemCall.stat(path)
        } catch {
            throw VaultError(.notFound, "The client secret file \(path) cannot be read: \(error.message).")
        }
        guard let status = found else {
            throw VaultError(.notFound, "The client secret file \(path) cannot be read: \(Errno.noSuchFileOrDirectory.message).")
        }
        guard status.isRegularFile else {
            throw VaultError(.invalidInput, "The client secret file \(path) is not a regular file.")
        }
        guard status.groupOrOtherBits == 0 else {
            throw VaultError(
                .insecurePermissions, "The client secret file \(path) is readable by group or others; make it private with chmod 600.")
        }
        guard status.size <= 64 * 1024, let data = FileManager.default.contents(atPath: path),
            let text = String(data: data, encoding: .utf8)
        else {
            throw VaultError(.invalidInput, "The client secret file \(path) is not a small UTF-8 text file.")
        }
        let secret = text.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        guard !secret.isEmpty, !secret.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw VaultError(.invalidInput, "The client secret file \(path) holds no secret on its first line.")
        }
        return secret
    }
}

/// The CLI's side of refreshing, shared by `get --fresh`, `refresh` and `login`.
enum RefreshCLI {
    /// A vault that must already exist.
    static func existingVault(_ global: GlobalOptions, key: CredentialKey) async throws -> Vault {
        switch try await global.openExistingVault() {
        case .opened(let vault, _): return vault
        case .noVaultYet(let path, _):
            throw VaultError.nothingStored(for: key, noVaultAt: path)
        }
    }

    /// `vault get --fresh`: a token valid for at least `leeway`, refreshed under the lock if it
    /// needs to be, and whether it came through the refresh path (then it is as fresh as the
    /// server issues them, which may be less than `leeway`). An entry without a refresh
    /// description is returned as stored, so that `get` reports its expiry as it always has.
    static func freshToken(
        _ vault: Vault, key: CredentialKey, leeway: TimeInterval, client: TokenEndpointClient = TokenEndpointClient()
    ) async throws -> (OAuthToken?, Bool) {
        // One read of the entry: the library says whether the token came out of a refresh, and
        // hands back a stale one it could not refresh for the caller to judge (exit 3).
        do {
            switch try await vault.freshTokenOutcome(for: key, leeway: leeway, client: client) {
            case .refreshed(let token): return (token, true)
            case .current(let token), .stale(let token): return (token, false)
            }
        } catch let error as VaultError where error.code == .notFound {
            return (nil, false)
        }
    }
}
#endif
