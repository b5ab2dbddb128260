// tutorial-defaults: writes the token shapes that Swift OAuth tutorials leave in plain
// `UserDefaults`, using Foundation's own `UserDefaults`, so that tests and the demo migrate
// plists exactly as Foundation writes them. Not installed; used by Tests/ and Scripts/demo.
//
//     tutorial-defaults write SHAPE DOMAIN     < two lines: access token, refresh token
//     tutorial-defaults migrate SHAPE DOMAIN   < the same; then migrates the suite in-process
//     tutorial-defaults migrate-plist PATH      migrates PATH into a memory vault and reports
//                                               (used to test failures under real permissions)
//
// SHAPE is `strings` (accessToken + refreshToken), `model` (a JSON-encoded
// `TokenModel {access, refresh}` under `token`) or `mixed` (the strings plus unrelated keys,
// among them the tutorials' `loadingOAuthToken` Bool). Where the plist goes is Foundation's
// choice: on Linux `$XDG_CONFIG_HOME/DOMAIN.plist`. Tokens come from stdin, never argv.
import Foundation
import TokenVault
import TokenVaultMigration

struct TokenModel: Codable {
    var access: String
    var refresh: String
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("tutorial-defaults: \(message)\n".utf8))
    exit(64)
}

let arguments = CommandLine.arguments.dropFirst()

if arguments.count == 2, arguments.first == "migrate-plist" {
    // Migrates into a memory vault and prints what the vault holds afterwards, success or not.
    let vault = Vault(store: MemoryStore())
    var summary: [String: Any] = [:]
    var status: Int32 = 0
    do {
        let report = try await vault.migrateDefaults(
            plistAt: URL(fileURLWithPath: arguments.last!), options: MigrationOptions(removeSource: true))
        summary["source_rewritten"] = report.sourceRewritten
    } catch let error as VaultError {
        summary["error"] = "\(error.code)"
        summary["message"] = error.message
        status = 1
    }
    summary["vault_keys"] = try await vault.keys().map(\.description)
    FileHandle.standardOutput.write(try JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys]))
    exit(status)
}
guard arguments.count == 3, let mode = arguments.first, ["write", "migrate"].contains(mode) else {
    fail("usage: tutorial-defaults write|migrate strings|model|mixed|nested DOMAIN < tokens")
}
let shape = arguments[arguments.startIndex + 1]
let domain = arguments[arguments.startIndex + 2]
let lines = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
    .split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
guard lines.count == 2 else { fail("expected two lines on stdin: the access token and the refresh token") }
guard let defaults = UserDefaults(suiteName: domain) else { fail("UserDefaults refused the suite name \(domain)") }

switch shape {
case "strings":
    defaults.set(lines[0], forKey: "accessToken")
    defaults.set(lines[1], forKey: "refreshToken")
case "model":
    let model = try JSONEncoder().encode(TokenModel(access: lines[0], refresh: lines[1]))
    defaults.set(model, forKey: "token")
case "mixed":
    defaults.set(lines[0], forKey: "accessToken")
    defaults.set(lines[1], forKey: "refreshToken")
    defaults.set(false, forKey: "loadingOAuthToken")
    defaults.set("octocat", forKey: "username")
    defaults.set(42, forKey: "launchCount")
    defaults.set(1.5, forKey: "zoomLevel")
    defaults.set(Date(timeIntervalSince1970: 1_700_000_000), forKey: "lastSync")
    defaults.set(["swift", "linux"], forKey: "recentSearches")
    defaults.set(["theme": "dark", "fontSize": 13] as [String: Any], forKey: "appearance")
    defaults.set(Data([0, 1, 2, 254, 255]), forKey: "avatarThumbnail")
case "nested":
    // An app that keeps one dictionary per signed-in account.
    defaults.set([["name": "octocat", "accessToken": lines[0], "refreshToken": lines[1]]], forKey: "accounts")
    defaults.set("dark", forKey: "theme")
default:
    fail("unknown shape \(shape); use strings, model, mixed or nested")
}
guard defaults.synchronize() else { fail("UserDefaults could not write the suite \(domain)") }

if mode == "migrate" {
    // An app migrating at start-up, with the suite already loaded in this process.
    let vault = Vault(store: MemoryStore())
    let report = try await vault.migrateDefaults(suiteName: domain, options: MigrationOptions(removeSource: true))
    // The app keeps running and writes another setting: its cache must not bring tokens back.
    defaults.set(true, forKey: "didMigrate")
    guard defaults.synchronize() else { fail("UserDefaults could not write the suite \(domain)") }
    let key = try CredentialKey(service: domain)
    let token = try await vault.token(for: key)
    let summary: [String: Any] = [
        "entries": report.entries.map(\.description),
        "source_rewritten": report.sourceRewritten,
        "vault_matches": token?.accessToken == lines[0] && token?.refreshToken == lines[1],
        "cache_still_has_tokens": defaults.object(forKey: "accessToken") != nil || defaults.object(forKey: "token") != nil
            || (defaults.array(forKey: "accounts") as? [[String: Any]])?.contains { $0["accessToken"] != nil } == true,
    ]
    FileHandle.standardOutput.write(try JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys]))
}
