#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import FoundationEssentials
import TokenVault

/// What `vault login PROVIDER` knows about a provider that people log in to: its endpoints, the
/// grant to use, the default scope and the authorization request's extra parameters, each from
/// the provider's documentation (cited in ``documentation`` and in the README). A preset hides
/// nothing: `vault login --dry-run` prints every request it makes.
struct LoginPreset: Sendable {
    enum Grant: String, Sendable { case device, code }

    let name: String
    let title: String
    /// The provider's documentation for what this preset sends.
    let documentation: String
    let grant: Grant
    let authorizeURL: String?
    let tokenURL: String
    let deviceURL: String?
    let revocationURL: String?
    /// The scope asked for when --scope is not given.
    let defaultScope: String?
    /// Scopes added to any scope asked for, because a refresh token needs them.
    let requiredScopes: [String]
    /// Parameters of the authorization request (and the device authorization request).
    let authorizationParameters: [(String, String)]
    /// How a client secret, if given, is sent.
    let secretInBody: Bool
    /// The redirect URI the provider needs registered exactly, if it does not take any loopback port.
    let fixedRedirectURI: String?
    /// What a user should know, shown by --dry-run and the help.
    let notes: String

    /// The default fixed redirect for providers that match the registered callback exactly.
    static let defaultFixedRedirect = "http://127.0.0.1:8976/callback"

    /// The environment variable that sends every preset's requests to a loopback stand-in, FOR
    /// TESTING ONLY: `http://127.0.0.1:PORT` makes `https://auth.atlassian.com/oauth/token`
    /// `http://127.0.0.1:PORT/auth.atlassian.com/oauth/token`. Only loopback origins are taken.
    static let originOverrideVariable = "TOKEN_VAULT_TEST_PRESET_ORIGIN"

    static let names = ["atlassian", "github", "google", "microsoft", "gitlab"]

    /// The preset `name` names (`entra` is `microsoft`), with `tenant` (Microsoft Entra ID) and
    /// `instance` (GitLab) filled in; nil when there is no such preset.
    static func named(_ name: String, tenant: String?, instance: String?) throws -> LoginPreset? {
        switch name.lowercased() {
        case "atlassian", "jira", "confluence":
            return LoginPreset(
                name: "atlassian", title: "Atlassian Cloud (Jira, Confluence): OAuth 2.0 (3LO) apps",
                documentation: "https://developer.atlassian.com/cloud/jira/platform/oauth-2-3lo-apps/",
                grant: .code, authorizeURL: "https://auth.atlassian.com/authorize", tokenURL: "https://auth.atlassian.com/oauth/token",
                deviceURL: nil, revocationURL: nil, defaultScope: "read:jira-work read:jira-user", requiredScopes: ["offline_access"],
                authorizationParameters: [("audience", "api.atlassian.com"), ("prompt", "consent")], secretInBody: true,
                fixedRedirectURI: defaultFixedRedirect,
                notes: "Atlassian matches the callback URL exactly: register \(defaultFixedRedirect) (or give yours with --redirect-uri). offline_access is always asked for: without it there is no refresh token. Refresh tokens rotate; the client secret is required (--client-secret-file).")
        case "github":
            return LoginPreset(
                name: "github", title: "GitHub: OAuth Apps and GitHub Apps",
                documentation: "https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps#device-flow",
                grant: .device, authorizeURL: "https://github.com/login/oauth/authorize",
                tokenURL: "https://github.com/login/oauth/access_token", deviceURL: "https://github.com/login/device/code",
                revocationURL: nil, defaultScope: nil, requiredScopes: [], authorizationParameters: [], secretInBody: true,
                fixedRedirectURI: nil,
                notes: "Enable the device flow in the app's settings. An OAuth App's token does not expire and has no refresh token (ask for scopes with --scope, such as repo); a GitHub App's user token expires after 8 hours and comes with a refresh token that rotates (its permissions come from the app, not from scopes; refreshing needs the client secret, --client-secret-file). GitHub answers form-encoded unless asked for JSON; vault asks for JSON. GitHub has no RFC 7009 revocation endpoint: vault logout needs --forget-anyway.")
        case "google":
            return LoginPreset(
                name: "google", title: "Google: OAuth 2.0 for desktop apps",
                documentation: "https://developers.google.com/identity/protocols/oauth2/native-app",
                grant: .code, authorizeURL: "https://accounts.google.com/o/oauth2/v2/auth", tokenURL: "https://oauth2.googleapis.com/token",
                deviceURL: "https://oauth2.googleapis.com/device/code", revocationURL: "https://oauth2.googleapis.com/revoke",
                defaultScope: "openid email", requiredScopes: [],
                authorizationParameters: [("access_type", "offline"), ("prompt", "consent")], secretInBody: true, fixedRedirectURI: nil,
                notes: "A Desktop app client takes any loopback port. Google gives a refresh token only with access_type=offline (and again on prompt=consent). Desktop clients have a client secret that Google does not treat as secret; give it with --client-secret-file. The device grant (--device) works only for \"TVs and Limited Input devices\" clients and few scopes.")
        case "microsoft", "entra", "azure":
            let tenant = tenant ?? "common"
            guard !tenant.isEmpty, tenant.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." }) else {
                throw VaultError(.invalidInput, "--tenant must be a tenant id or domain, or common, organizations or consumers.")
            }
            let base = "https://login.microsoftonline.com/\(tenant)/oauth2/v2.0"
            return LoginPreset(
                name: "microsoft", title: "Microsoft Entra ID (Microsoft identity platform), tenant \(tenant)",
                documentation: "https://learn.microsoft.com/en-us/entra/identity-platform/v2-oauth2-device-code",
                grant: .device, authorizeURL: "\(base)/authorize", tokenURL: "\(base)/token", deviceURL: "\(base)/devicecode",
                revocationURL: nil, defaultScope: "openid profile", requiredScopes: ["offline_access"], authorizationParameters: [],
                secretInBody: true, fixedRedirectURI: nil,
                notes: "--tenant is the directory (tenant id or domain; default common). The device grant needs \"Allow public client flows\" in the app registration. offline_access is always asked for: without it there is no refresh token. Refresh tokens rotate. Add the API's scopes with --scope, such as https://graph.microsoft.com/User.Read.")
        case "gitlab":
            let text = instance ?? "https://gitlab.com"
            guard let url = URL(string: text), url.scheme?.lowercased() == "https", let host = url.host, !host.isEmpty, url.query == nil else {
                throw VaultError(.invalidInput, "--instance must be the GitLab instance's https URL, such as https://gitlab.example.com.")
            }
            let base = text.hasSuffix("/") ? String(text.dropLast()) : text
            return LoginPreset(
                name: "gitlab", title: "GitLab (\(base)): OAuth 2.0 identity provider API",
                documentation: "https://docs.gitlab.com/api/oauth2/",
                grant: .code, authorizeURL: "\(base)/oauth/authorize", tokenURL: "\(base)/oauth/token",
                deviceURL: "\(base)/oauth/authorize_device", revocationURL: "\(base)/oauth/revoke", defaultScope: "read_user",
                requiredScopes: [], authorizationParameters: [], secretInBody: true, fixedRedirectURI: defaultFixedRedirect,
                notes: "--instance is the GitLab URL (default https://gitlab.com). GitLab matches the redirect URI exactly: register \(defaultFixedRedirect) in the application (or give yours with --redirect-uri); clear \"Confidential\" for a client without a secret. Access tokens expire after 2 hours; refresh tokens rotate. The device grant (--device) needs a GitLab that offers it.")
        default:
            return nil
        }
    }

    /// `text` as a URL, sent to the loopback stand-in when TOKEN_VAULT_TEST_PRESET_ORIGIN is set.
    static func endpoint(_ text: String, environment: [String: String]) throws -> URL {
        guard let url = URL(string: text) else { throw VaultError(.invalidInput, "The preset's URL \(text) is not a URL.") }
        guard let origin = environment[originOverrideVariable], !origin.isEmpty else { return url }
        guard let base = URL(string: origin), base.scheme == "http", let host = base.host, host == "127.0.0.1" || host == "localhost",
            base.path.isEmpty || base.path == "/"
        else {
            throw VaultError(
                .configurationError, "\(originOverrideVariable) (for testing) must be a loopback origin such as http://127.0.0.1:8080.")
        }
        guard let moved = URL(string: "\(origin.hasSuffix("/") ? String(origin.dropLast()) : origin)/\(url.host ?? "")\(url.path)") else {
            throw VaultError(.invalidInput, "The preset's URL \(text) cannot be moved to \(originOverrideVariable).")
        }
        return moved
    }

    /// The scope to ask for: the one given, or the default, with the required scopes added.
    func scope(given: String?) -> String? {
        var parts = (given ?? defaultScope ?? "").split(separator: " ").map(String.init)
        for required in requiredScopes where !parts.contains(required) { parts.append(required) }
        return parts.isEmpty ? nil : parts.joined(separator: " ")
    }
}
#endif
