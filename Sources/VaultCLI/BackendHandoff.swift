// Owns: the entry point of both executables, and the handoff from `vault` (built without
// postgres-nio) to `vault-postgres` (built with it) when the backend plan names a backend that
// only the latter registers.
#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import Foundation
public import TokenVault

import Glibc

/// The entry point of both executables.
public enum VaultProgram: Sendable {
    /// Registers `backends` with the backend plan (``VaultBackends``), then runs the `vault`
    /// command line. `vault` registers none and hands a command whose plan names an unregistered
    /// backend to the program that has it (``BackendHandoff``); `vault-postgres` registers
    /// PostgreSQL.
    public static func main(registering backends: [any VaultBackend] = []) -> Never {
        for backend in backends { VaultBackends.register(backend) }
        // SIGTERM, SIGINT and SIGHUP wait while a refresh is between its request and its save:
        // a rotated refresh token dies with the process otherwise (issue 33).
        RefreshTermination.holdDuringRefresh(
            notice: "vault: finishing a token refresh before exiting, so that the new refresh token is not lost\n")
        VaultCommand.start()
    }
}

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

/// How `vault` runs a command whose backend plan names a backend this program has not registered
/// (``BackendPlan/unregisteredBackend(for:)``): it replaces itself (`execv`, same arguments, same
/// environment, nothing read or written yet) with the program that registers it, found next to
/// the running executable or, as the Debian package installs it, in `../libexec/tokenvault/`.
enum BackendHandoff {
    /// The program that registers each backend `vault` leaves out.
    static let programs: [BackendKind: String] = [.postgres: "vault-postgres"]

    /// Hands `command` over when a vault it opens needs a backend this program lacks; returns
    /// when it needs none (or its configuration is faulty, which its run reports).
    static func handOverIfNeeded(_ command: any OpensVaults) throws {
        guard let configurations = try? command.vaultConfigurations() else { return }
        for configuration in configurations {
            if let kind = BackendPlan.unregisteredBackend(for: configuration), let program = programs[kind] {
                try execute(program)
            }
        }
    }

    /// Where `program` may be, in order, for the executable at `executable`.
    static func candidates(_ program: String, besides executable: String) -> [String] {
        let directory = (executable as NSString).deletingLastPathComponent
        return [
            (directory as NSString).appendingPathComponent(program),
            ((directory as NSString).appendingPathComponent("../libexec/tokenvault/\(program)") as NSString).standardizingPath,
        ]
    }

    /// Replaces this process with `program`; returns only by throwing.
    /// - Throws: `backendUnavailable` when it is not installed or cannot be run.
    static func execute(_ program: String) throws -> Never {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var failures: [String] = []
        for path in candidates(program, besides: executable) {
            guard access(path, X_OK) == 0 else {
                failures.append("\(path): \(String(cString: strerror(errno)))")
                continue
            }
            execv(path, CommandLine.unsafeArgv)
            failures.append("\(path): \(String(cString: strerror(errno)))")
        }
        let backend = programs.first { $0.value == program }?.key.rawValue ?? program
        throw VaultError(
            .backendUnavailable,
            "The \(backend) backend is served by a separate program, \(program), which could not be run (\(failures.joined(separator: "; "))). Install the tokenvault package, or build it next to vault with `swift build --product \(program)`.")
    }
}
#endif
