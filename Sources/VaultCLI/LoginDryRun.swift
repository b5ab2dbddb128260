#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import FoundationEssentials
import TokenVault

/// `vault login --dry-run`: the requests the login would make, in order, with stand-ins for what
/// only the login itself has (STATE, CHALLENGE, NONCE, VERIFIER, CODE, DEVICE_CODE, REFRESH_TOKEN). The
/// client secret is never read or shown: only the file it would come from and how it is sent.
struct LoginDryRun {
    let preset: LoginPreset?
    let registration: ClientRegistration
    let secretFile: String?
    let codeLogin: AuthorizationCodeLogin?
    let deviceEndpoint: URL?
    let authorizationParameters: [String: String]

    var text: String {
        var lines: [String] = []
        if let preset {
            lines.append("Provider preset \(preset.name): \(preset.title)")
            lines.append("  documented at \(preset.documentation)")
            lines.append("  \(preset.notes)")
        }
        let token = registration.tokenEndpoint.absoluteString
        if let codeLogin {
            let redirect = codeLogin.redirectURI?.absoluteString ?? "http://127.0.0.1:PORT/callback"
            lines.append("Grant: authorization code with PKCE (RFC 7636, S256), redirect URI \(redirect)")
            if codeLogin.redirectURI != nil {
                lines.append("  register exactly this redirect URI for the client; vault listens on its port and path")
            } else {
                lines.append("  PORT: a free loopback port picked at login (RFC 8252 §7.3); if the provider takes only a registered URI, give --redirect-uri")
            }
            let url = (try? codeLogin.authorizationURL(
                redirectURI: redirect, state: "STATE", codeChallenge: "CHALLENGE", nonce: codeLogin.nonce == nil ? nil : "NONCE"))?.absoluteString ?? "?"
            lines.append("1. The browser opens (GET):")
            lines.append("   \(url)")
            lines.append("2. vault POSTs to \(token):")
            lines.append(
                contentsOf: form([
                    ("grant_type", "authorization_code"), ("code", "CODE (from the redirect)"), ("redirect_uri", redirect),
                    ("code_verifier", "VERIFIER (random, kept by vault)"),
                ]))
        } else if let deviceEndpoint {
            lines.append("Grant: device authorization (RFC 8628)")
            lines.append("1. vault POSTs to \(deviceEndpoint.absoluteString):")
            var fields: [(String, String)] = []
            if let scope = registration.scope { fields.append(("scope", scope)) }
            for (name, value) in authorizationParameters.sorted(by: { $0.key < $1.key }) { fields.append((name, value)) }
            lines.append(contentsOf: form(fields))
            lines.append("2. You open the verification page it names and enter the user code; meanwhile vault POSTs to \(token),")
            lines.append("   every interval the server asks for (5 s more after each slow_down):")
            lines.append(
                contentsOf: form([("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", "DEVICE_CODE (from step 1)")]))
        }
        lines.append("Later, to refresh (vault get --fresh, vault refresh), vault POSTs to \(token):")
        var refreshFields = [("grant_type", "refresh_token"), ("refresh_token", "REFRESH_TOKEN (stored)")]
        if let scope = registration.scope { refreshFields.append(("scope", scope)) }
        lines.append(contentsOf: form(refreshFields))
        if let revocation = registration.revocationEndpoint {
            lines.append("vault logout revokes at \(revocation.absoluteString).")
        } else {
            lines.append("No revocation endpoint: vault logout needs --forget-anyway.")
        }
        lines.append("Every POST sends Content-Type: application/x-www-form-urlencoded and Accept: application/json.")
        return lines.joined(separator: "\n")
    }

    /// The fields of one POST, with the client's authentication and --param, one per line.
    private func form(_ fields: [(String, String)]) -> [String] {
        var lines = fields.map { "     \($0.0)=\($0.1)" }
        let secret = "the client secret from \(secretFile ?? "--client-secret-file"), not shown"
        switch registration.clientAuthentication.method {
        case "client_secret_basic":
            lines.append("     Authorization: Basic (client id \(registration.clientID) and \(secret))")
        case "client_secret_post":
            lines.append("     client_id=\(registration.clientID)")
            lines.append("     client_secret=(\(secret))")
        default:
            lines.append("     client_id=\(registration.clientID)")
        }
        for (name, value) in registration.additionalParameters.sorted(by: { $0.key < $1.key }) {
            lines.append("     \(name)=\(value)")
        }
        return lines
    }
}
#endif
