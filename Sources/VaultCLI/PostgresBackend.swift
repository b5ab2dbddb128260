// Owns: the seam between the command and the PostgreSQL backend, and the handoff from `vault`
// (built without postgres-nio) to `vault-postgres` (built with it).
import Foundation
public import TokenVault
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The PostgreSQL backend as the command uses it. `vault-postgres` supplies one (TokenVaultPostgres,
/// with postgres-nio, NIO and BoringSSL); `vault` has none, so that a file or Secret Service
/// command does not load, relocate and scan them at every start, and it hands every command that
/// names the postgres backend over to `vault-postgres` before running it (``PostgresHandoff``).
public protocol PostgresBackend: Sendable {
    /// Where TOKEN_VAULT_DATABASE_URL points (no password), and its sslmode.
    /// - Throws: `invalidInput` for a missing or malformed URL.
    func database() throws -> (location: String, sslmode: String)

    /// Opens the vault in that database, sealed with `keySource`.
    /// - Throws: as `PostgresStore.open`: `notFound` when there is no vault and `createIfMissing`
    ///   is off, `backendUnavailable` for an unreachable server, `authenticationFailed`, …
    func open(keySource: VaultConfiguration.KeySource, allowInsecurePermissions: Bool, createIfMissing: Bool) async throws
        -> any OpenedPostgresVault
}

/// A PostgreSQL vault the command has opened.
public protocol OpenedPostgresVault: Sendable {
    var vault: Vault { get }
    /// The database, as messages name it (no password).
    var location: String { get }
    /// Seals every row again under `newSource` in one transaction; the number of entries.
    func rekey(to newSource: VaultConfiguration.KeySource, kdf: EncryptedFileStore.KDFParameters?) async throws -> Int
    /// The server's version, this connection's TLS, the schema version and the entry count.
    func status() async throws -> PostgresVaultStatus
    func close()
}

public struct PostgresVaultStatus: Sendable {
    public var serverVersion: String
    public var tls: String?
    public var schemaVersion: Int
    public var entries: Int

    public init(serverVersion: String, tls: String?, schemaVersion: Int, entries: Int) {
        self.serverVersion = serverVersion
        self.tls = tls
        self.schemaVersion = schemaVersion
        self.entries = entries
    }
}

/// The entry point of both executables.
public enum VaultProgram: Sendable {
    /// Runs the `vault` command line. `postgres` is `nil` in `vault`, which then hands postgres
    /// commands over to `vault-postgres`.
    public static func main(postgres: (any PostgresBackend)?) -> Never {
        installed.withLock { $0 = postgres }
        VaultCommand.start()
    }

    private static let installed = Mutex<(any PostgresBackend)?>(nil)

    static var postgres: (any PostgresBackend)? { installed.withLock { $0 } }
}

/// A subcommand that may use the postgres backend, which `vault` cannot open itself.
protocol PostgresAware {
    /// Whether this command, as parsed, would open the postgres backend.
    var usesPostgres: Bool { get }
}

/// A subcommand whose vault is the one the global options choose.
protocol UsesGlobalOptions: PostgresAware {
    var global: GlobalOptions { get }
}

extension UsesGlobalOptions {
    var usesPostgres: Bool { global.usesPostgres() }
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
extension VaultCommand.GitCredential: UsesGlobalOptions {}

extension VaultCommand.Copy: PostgresAware {
    var usesPostgres: Bool { from == .postgres || to == .postgres }
}

/// How `vault` runs a postgres command: it replaces itself (`execv`, same arguments, same
/// environment, nothing read or written yet) with `vault-postgres`, found next to the running
/// executable or, as the Debian package installs it, in `../libexec/tokenvault/`.
enum PostgresHandoff {
    static let programName = "vault-postgres"

    /// Where `vault-postgres` may be, in order, for the executable at `executable`.
    static func candidates(besides executable: String) -> [String] {
        let directory = (executable as NSString).deletingLastPathComponent
        return [
            (directory as NSString).appendingPathComponent(programName),
            ((directory as NSString).appendingPathComponent("../libexec/tokenvault/\(programName)") as NSString).standardizingPath,
        ]
    }

    /// Replaces this process with `vault-postgres`; returns only by throwing.
    /// - Throws: `backendUnavailable` when it is not installed or cannot be run.
    static func execute() throws -> Never {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let candidates = candidates(besides: executable)
        var failures: [String] = []
        for path in candidates {
            guard access(path, X_OK) == 0 else {
                failures.append("\(path): \(String(cString: strerror(errno)))")
                continue
            }
            execv(path, CommandLine.unsafeArgv)
            failures.append("\(path): \(String(cString: strerror(errno)))")
        }
        throw VaultError(
            .backendUnavailable,
            "The postgres backend is served by a separate program, \(programName), which could not be run (\(failures.joined(separator: "; "))). Install the tokenvault package, or build it next to vault with `swift build --product \(programName)`.")
    }
}
