// A test helper, not a product: one process of the cross-process refresh tests
// (Tests/RefreshServerTests). It opens the vault named by the TOKEN_VAULT_* environment, waits for
// a start signal, then has many tasks ask for a fresh token at once, refreshing against the test
// OAuth server. It writes one JSON line per caller to standard output, with a hash of the
// access token it got instead of the token itself.
//
//   refresh-stress --server URL --service S --accounts a,b --tasks 8 --leeway 1 \
//                  --lock-timeout 10 --ready-file F --go-file G [--hold-file H]
//
// With --stored-description, callers use the refresh description stored with the entry
// (Vault.freshToken(for:) with no closure): the library makes the request itself.
//
// With --hold-file, a single caller refreshes, creates H from inside its refresh (while holding
// the key's lock) and then hangs there until it is killed.
//
// The vault is a real backend, as a client would open it: TOKEN_VAULT_BACKEND=file (with
// TOKEN_VAULT_FILE and TOKEN_VAULT_KEY_FILE) or TOKEN_VAULT_BACKEND=secret-service, on the session
// bus and XDG_RUNTIME_DIR it inherits. Each record names the backend the vault really opened and the
// XDG_RUNTIME_DIR the child saw, so a test can tell that every child used the same store and lock.

import Foundation
import TokenVault
#if Postgres
import TokenVaultPostgres
#endif
#if DPoP
import TokenVaultDPoP
#endif

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

struct Arguments {
    var server = ""
    var service = ""
    var accounts: [String] = []
    var tasks = 8
    var leeway: TimeInterval = 1
    var lockTimeout: Double = 10
    var readyFile = ""
    var goFile = ""
    var holdFile: String?
    var storedDescription = false

    init(_ arguments: [String]) throws {
        var iterator = arguments.dropFirst().makeIterator()
        while let name = iterator.next() {
            if name == "--stored-description" {
                storedDescription = true
                continue
            }
            guard let value = iterator.next() else { throw Failure("missing value for \(name)") }
            switch name {
            case "--server": server = value
            case "--service": service = value
            case "--accounts": accounts = value.split(separator: ",").map(String.init)
            case "--tasks": tasks = Int(value) ?? 0
            case "--leeway": leeway = TimeInterval(value) ?? -1
            case "--lock-timeout": lockTimeout = Double(value) ?? -1
            case "--ready-file": readyFile = value
            case "--go-file": goFile = value
            case "--hold-file": holdFile = value
            default: throw Failure("unknown option \(name)")
            }
        }
        guard !server.isEmpty, !service.isEmpty, !accounts.isEmpty, tasks > 0, leeway >= 0, lockTimeout > 0,
            !readyFile.isEmpty, !goFile.isEmpty
        else { throw Failure("usage: see the comment at the top of Sources/refresh-stress/main.swift") }
    }
}

struct Failure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// FNV-1a, 64 bits: enough to tell tokens apart in a test, and reveals nothing of them.
func fingerprint(_ text: String) -> String {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in text.utf8 {
        hash ^= UInt64(byte)
        hash = hash &* 0x0000_0100_0000_01b3
    }
    return String(hash, radix: 16)
}

/// The refresh grant, as a client would send it.
func refresh(_ stale: OAuthToken, server: String) async throws -> OAuthToken {
    guard let url = URL(string: server)?.appendingPathComponent("token"), let refreshToken = stale.refreshToken else {
        throw Failure("no server URL or refresh token")
    }
    var allowed = CharacterSet.alphanumerics
    allowed.insert(charactersIn: "-._~")
    let form = [("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", "tokenvault-example")]
    var request = URLRequest(url: url, timeoutInterval: 30)
    request.httpMethod = "POST"
    request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
    request.httpBody = Data(
        form.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }
            .joined(separator: "&").utf8)
    let (data, _) = try await URLSession.shared.data(for: request)
    return try OAuthToken(tokenResponse: data)
}

func emit(_ fields: [String: String]) {
    let data = (try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])) ?? Data("{}".utf8)
    FileHandle.standardOutput.write(data + Data("\n".utf8))
}

func waitForFile(_ path: String, bound: Duration) async throws {
    let deadline = ContinuousClock.now.advanced(by: bound)
    while !FileManager.default.fileExists(atPath: path) {
        guard ContinuousClock.now < deadline else { throw Failure("no start signal within \(bound)") }
        try await Task.sleep(for: .milliseconds(5))
    }
}

/// Makes TOKEN_VAULT_BACKEND=postgres open PostgreSQL, as a fleet's program does at start.
func registerPostgres() {
    #if Postgres
    // Up to a dozen of these start at once, each with a TLS handshake in a debug build, beside
    // the other test processes of a 2-core machine: one open took over the 10 s default in a CI
    // run. What the tests bound is the refresh, not the open (whose bound has a test of its own,
    // anUnreachableServerIsUnavailableWithinTheBound), so allow 30 s per call here.
    VaultBackends.register(PostgresBackend(options: PostgresStore.Options(operationTimeout: .seconds(30))))
    #endif
    #if DPoP
    // A DPoP-bound entry (DPoPServerTests) is refreshed with its own key, signed here.
    DPoP.install()
    #endif
}

func run() async throws {
    let arguments = try Arguments(CommandLine.arguments)
    registerPostgres()
    var configuration = try VaultConfiguration.fromEnvironment()
    // The test keyring is shared by every test running at once, and gnome-keyring rewrites its
    // whole file on each change: allow more than the 10 s default per call. Never prompt.
    configuration.secretService = SecretServiceStore.Options(timeout: .seconds(30), unlockPrompt: false)
    // With TOKEN_VAULT_BACKEND=postgres, one "host" of the cross-host tests: the database
    // (TOKEN_VAULT_DATABASE_URL and TOKEN_VAULT_DATABASE_PASSWORD_FILE) is all it shares with the
    // others, opened through the backend registered above as any program opens it.
    let vault = try await Vault.open(configuration)
    let backend = vault.selection.backend.rawValue
    // Where the Secret Service's lock files live depends on it: the test checks that every child
    // saw the same one as the test itself.
    let runtimeDirectory = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"] ?? ""
    let server = arguments.server
    let timeout = Duration.milliseconds(Int(arguments.lockTimeout * 1000))

    guard FileManager.default.createFile(atPath: arguments.readyFile, contents: Data()) else {
        throw Failure("could not create the ready file")
    }
    try await waitForFile(arguments.goFile, bound: .seconds(120))

    if let holdFile = arguments.holdFile {
        let key = try CredentialKey(service: arguments.service, account: arguments.accounts[0])
        _ = try await vault.freshToken(for: key, leeway: arguments.leeway, timeout: timeout) { _ in
            // Inside the refresh, so the key's lock is held. Never returns; the test kills us.
            _ = FileManager.default.createFile(atPath: holdFile, contents: Data())
            while true { try await Task.sleep(for: .seconds(3600)) }
        }
        throw Failure("the held refresh returned")
    }

    await withTaskGroup(of: Void.self) { group in
        for account in arguments.accounts {
            for task in 0..<arguments.tasks {
                group.addTask {
                    var fields = [
                        "account": account, "task": String(task), "pid": String(getpid()), "backend": backend,
                        "runtime": runtimeDirectory,
                    ]
                    do {
                        let key = try CredentialKey(service: arguments.service, account: account)
                        let token: OAuthToken
                        if arguments.storedDescription {
                            token = try await vault.freshToken(
                                for: key, leeway: arguments.leeway, timeout: timeout, client: TokenEndpointClient())
                        } else {
                            token = try await vault.freshToken(for: key, leeway: arguments.leeway, timeout: timeout) {
                                stale in
                                try await refresh(stale, server: server)
                            }
                        }
                        fields["ok"] = "true"
                        fields["access"] = fingerprint(token.accessToken)
                        fields["type"] = token.tokenType
                    } catch let error as VaultError {
                        fields["ok"] = "false"
                        fields["code"] = error.code.description
                        fields["oauth"] = error.oauthError?.error ?? ""
                        fields["message"] = error.message
                    } catch {
                        fields["ok"] = "false"
                        fields["code"] = "other"
                        fields["message"] = String(describing: type(of: error))
                    }
                    emit(fields)
                }
            }
        }
    }
}

/// The durability test's writer and reader (Tests/Integration/Postgres), on the vault of the
/// TOKEN_VAULT_* environment:
///   --save-loop SERVICE   saves "value-N" under (SERVICE, "nN") for N = 0, 1, …, printing
///                         "saved N" once each save has returned, until killed;
///   --read-back SERVICE   prints "have N" for each entry of SERVICE that holds "value-N".
func durability(_ mode: String, service: String) async throws {
    let environment = ProcessInfo.processInfo.environment
    registerPostgres()
    let store = try await Vault.open(try VaultConfiguration.fromEnvironment(environment)).store
    if mode == "--save-loop" {
        var number = 0
        while true {
            try await store.save(Data("value-\(number)".utf8), for: try CredentialKey(service: service, account: "n\(number)"))
            FileHandle.standardOutput.write(Data("saved \(number)\n".utf8))
            number += 1
        }
    }
    for key in try await store.keys(service: service) {
        guard let number = Int(key.account.dropFirst()), try await store.load(key) == Data("value-\(number)".utf8) else { continue }
        FileHandle.standardOutput.write(Data("have \(number)\n".utf8))
    }
}

do {
    if CommandLine.arguments.count == 3, ["--save-loop", "--read-back"].contains(CommandLine.arguments[1]) {
        try await durability(CommandLine.arguments[1], service: CommandLine.arguments[2])
        exit(0)
    }
    try await run()
} catch {
    FileHandle.standardError.write(Data("refresh-stress: \(error)\n".utf8))
    exit(1)
}
