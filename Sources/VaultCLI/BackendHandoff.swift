// Owns: the entry point of both executables, and the handoff from `vault` (built without
// postgres-nio, swift-crypto and jwt-kit) to `vault-full` (built with them) when a command needs
// what only the latter has: a backend the plan names, a DPoP signature, an ID-token check.
#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
package import TokenVault

import Glibc
import Synchronization
internal import TokenVaultSystem

/// The entry point of both executables.
package enum VaultProgram: Sendable {
    /// Registers `backends` with the backend plan (``VaultBackends``), `idTokens` as the login's
    /// ID-token check and `migrator` as `vault migrate`'s, then runs the `vault` command line.
    /// `vault` registers none and hands a command that needs what it left out to `vault-full`
    /// (``BackendHandoff``); `vault-full` registers PostgreSQL, the DPoP signer (`DPoP.install()`,
    /// before this call), jwt-kit's ID-token verifier and TokenVaultMigration.
    package static func main(
        registering backends: [any VaultBackend] = [], idTokens: (any LoginIDTokenVerifying)? = nil,
        migrator: (any DefaultsMigrating)? = nil
    ) -> Never {
        for backend in backends { VaultBackends.register(backend) }
        if let idTokens { LoginIDTokenVerifiers.installed.withLock { $0 = idTokens } }
        if let migrator { DefaultsMigrators.installed.withLock { $0 = migrator } }
        // SIGTERM, SIGINT and SIGHUP wait while a refresh is between its request and its save:
        // a rotated refresh token dies with the process otherwise (issue 33).
        RefreshTermination.holdDuringRefresh(
            notice: "vault: finishing a token refresh before exiting, so that the new refresh token is not lost\n")
        VaultCommand.start()
    }

    /// Whether this program signs DPoP proofs and verifies ID tokens (`vault-full`), rather than
    /// handing such a command over (`vault`).
    static var isFull: Bool { DPoPSigners.current != nil && LoginIDTokenVerifiers.current != nil }
}

/// `vault login`'s check of an ID token's signature and claims (jwt-kit, in `vault-full`).
package protocol LoginIDTokenVerifying: Sendable {
    /// `token` with its ID token verified against the registration's `jwks_uri` and the
    /// verification recorded in it.
    /// - Throws: ``LoginIDTokenRefusal`` when the ID token fails a check; any other error when the
    ///   check could not be made (the JWKS could not be fetched).
    func verify(_ token: OAuthToken, registration: ClientRegistration, nonce: String?, client: TokenEndpointClient) async throws
        -> OAuthToken
}

/// An ID token that failed a check: the verifier's error, which names the check.
package struct LoginIDTokenRefusal: Error, Sendable {
    package let error: VaultError
    package init(_ error: VaultError) { self.error = error }
}

/// The verifier `vault-full` installed, if any.
enum LoginIDTokenVerifiers {
    static let installed = Mutex<(any LoginIDTokenVerifying)?>(nil)
    static var current: (any LoginIDTokenVerifying)? { installed.withLock { $0 } }
}

/// A command that `vault` runs itself until it meets a DPoP-bound entry it must sign for; it then
/// runs again, from the start, in `vault-full`. The library checks for the signer before it
/// writes anything or sends a request (``DPoPSigners/missing(_:)``), and these commands read
/// nothing from stdin before that point, so the second run sees what the first saw.
protocol RerunsInFullProgram {}

extension VaultCommand.Get: RerunsInFullProgram {}
extension VaultCommand.Run: RerunsInFullProgram {}
extension VaultCommand.Refresh: RerunsInFullProgram {}

/// A subcommand that opens vaults: the configurations it will open, as parsed, so that `vault`
/// can hand it over before it reads or writes anything.
protocol OpensVaults {
    func vaultConfigurations() throws -> [VaultConfiguration]
}

/// A subcommand whose vault is the one the global options choose.
protocol UsesGlobalOptions: OpensVaults {
    var global: GlobalOptions { get }
}

extension UsesGlobalOptions {
    func vaultConfigurations() throws -> [VaultConfiguration] { [try global.configuration()] }
}

extension VaultCommand.SetToken: UsesGlobalOptions {}
extension VaultCommand.Get: UsesGlobalOptions {}
extension VaultCommand.List: UsesGlobalOptions {}
extension VaultCommand.Delete: UsesGlobalOptions {}
extension VaultCommand.Status: UsesGlobalOptions {}
extension VaultCommand.Migrate: UsesGlobalOptions {}
extension VaultCommand.Rekey: UsesGlobalOptions {}
extension VaultCommand.Login: UsesGlobalOptions {}
extension VaultCommand.Refresh: UsesGlobalOptions {}
extension VaultCommand.Logout: UsesGlobalOptions {}
extension VaultCommand.GitCredential: UsesGlobalOptions {}

extension VaultCommand.Copy: OpensVaults {
    func vaultConfigurations() throws -> [VaultConfiguration] {
        [try configuration(from, creating: false, keySource: nil), try configuration(to, creating: true, keySource: nil)]
    }
}

/// How `vault` runs a command that needs what it leaves out: a backend its plan names and this
/// program has not registered (``BackendPlan/unregisteredBackend(for:)``), or swift-crypto and
/// jwt-kit (DPoP proofs, ID-token checks), whose code costs every cold `vault get` when linked
/// (measured: +19 % instructions). It replaces itself (`execv`, same arguments, same
/// environment, nothing read or written yet) with `vault-full`, found next to the running
/// executable or, as the Debian package installs it, in `../libexec/tokenvault/`.
enum BackendHandoff {
    /// The program that has everything `vault` leaves out.
    static let fullProgram = "vault-full"

    /// Hands `command` over when it needs what this program lacks; returns when it needs nothing
    /// more (or its configuration is faulty, which its run reports).
    static func handOverIfNeeded(_ command: any ParsableCommand) throws {
        guard !VaultProgram.isFull else { return }
        // Always in `vault-full`, since each may sign a DPoP proof or verify an ID token before it
        // can know whether it will: `login`, `agent` (it refreshes and signs for its clients),
        // `rotate-dpop-key`; and `migrate`, whose plist reading needs Foundation, which `vault`
        // does not link. (Concrete type checks: a cold `vault get` pays no protocol conformance
        // lookup for them.)
        if command is VaultCommand.Login || command is VaultCommand.Agent || command is VaultCommand.RotateDPoPKey
            || command is VaultCommand.Migrate
        {
            try execute(fullProgram, for: "`vault \(Swift.type(of: command).configuration.commandName ?? "")`")
        }
        if let get = command as? VaultCommand.Get, get.rejectedTokenFile == "-" {
            // It reads the refused token from stdin, which a second run could not read again.
            try execute(fullProgram, for: "`vault get --rejected-token-file -`")
        }
        guard let command = command as? any OpensVaults, let configurations = try? command.vaultConfigurations() else { return }
        for configuration in configurations {
            if let kind = BackendPlan.unregisteredBackend(for: configuration) {
                try execute(fullProgram, for: "The \(kind.rawValue) backend")
            }
        }
    }

    /// Runs `command` again in `vault-full` when it failed only because this program cannot sign
    /// a DPoP proof; returns otherwise.
    static func rerunIfNeeded(_ command: any ParsableCommand, after error: any Error) throws {
        guard !VaultProgram.isFull, command is any RerunsInFullProgram, DPoPSigners.isMissing(error) else { return }
        try execute(fullProgram, for: "Signing a DPoP proof")
    }

    /// Where `program` may be, in order, for the executable at `executable`.
    static func candidates(_ program: String, besides executable: String) -> [String] {
        let directory = PathText.deletingLastComponent(executable)
        return [
            PathText.appending(directory, program),
            PathText.standardized(PathText.appending(directory, "../libexec/tokenvault/\(program)")),
        ]
    }

    /// Replaces this process with `program`; returns only by throwing.
    /// - Throws: `backendUnavailable` when it is not installed or cannot be run.
    static func execute(_ program: String, for what: String) throws -> Never {
        let executable = (try? SystemCall.linkTarget("/proc/self/exe")) ?? CommandLine.arguments[0]
        var failures: [String] = []
        for path in candidates(program, besides: executable) {
            do {
                try SystemCall.checkExecutable(path)
            } catch {
                failures.append("\(path): \(error.message)")
                continue
            }
            execv(path, CommandLine.unsafeArgv)
            failures.append("\(path): \(Errno.message(errno))")
        }
        throw VaultError(
            .backendUnavailable,
            "\(what) is served by a separate program, \(program), which could not be run (\(failures.joined(separator: "; "))). Install the tokenvault package, or build it next to vault with `swift build --traits CLI --product \(program)`.")
    }
}
#endif
