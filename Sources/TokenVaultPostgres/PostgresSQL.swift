// Owns: bounded calls with reconnects, transactions, and the one mapping from database errors
// to VaultError.
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
import Foundation
import TokenVault
import PostgresNIO
import Logging
import Synchronization

enum PostgresSQL {
    /// Runs `body` in a transaction on `connection`: committed when it returns, rolled back when it throws.
    static func transaction<Result>(
        on connection: PostgresConnection, _ body: () async throws -> Result
    ) async throws -> Result {
        try await connection.run("BEGIN", logger: Self.silent)
        let result: Result
        do {
            result = try await body()
        } catch {
            // A rollback that fails (the connection is gone) leaves nothing behind either: the
            // server aborts an unfinished transaction when its connection ends.
            _ = try? await connection.run("ROLLBACK", logger: Self.silent)
            throw error
        }
        try await connection.run("COMMIT", logger: Self.silent)
        return result
    }

    static let silent = Logger(label: "TokenVaultPostgres", factory: { _ in SwiftLogNoOpLogHandler() })

    /// Whether a failure is of the connection rather than of the statement: another connection
    /// may succeed.
    static func isConnectionFailure(_ error: any Error) -> Bool {
        if error is VaultError { return false }
        // A value that does not decode (a NULL vault_id, a column of another type) is the table's
        // damage, not the connection's: another connection reads the same, so it is not retried
        // until the deadline (which reported "did not answer in time" after 10 s).
        if error is PostgresDecodingError { return false }
        if let error = error as? PSQLError {
            switch error.code {
            case .server:
                let state = error.serverInfo?[.sqlState] ?? ""
                // 57P01 admin_shutdown (pg_terminate_backend, a restart), 57P02 crash_shutdown,
                // 57P03 cannot_connect_now (starting up), 08xxx connection exceptions.
                return ["57P01", "57P02", "57P03"].contains(state) || state.hasPrefix("08")
            case .sslUnsupported, .failedToAddSSLHandler, .unsupportedAuthMechanism, .authMechanismRequiresPassword, .saslError:
                return false
            case .connectionError:
                return !isTLSFailure(error)
            default:
                return [.serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .queryCancelled].contains(error.code)
            }
        }
        if error is CancellationError { return false }
        // Pool errors (a tripped circuit breaker), socket errors (refused, reset, timed out).
        return !isTLSFailure(error)
    }

    static func isTLSFailure(_ error: any Error) -> Bool {
        var current: (any Error)? = error
        while let error = current {
            let name = String(reflecting: type(of: error))
            // The connection closed during the handshake (a server restarting, Scripts/fleet's
            // `-m immediate`): the network's failure, retried like a refused connection, not a
            // certificate to check.
            if name.hasSuffix("NIOSSLError") && String(describing: error) == "uncleanShutdown" { return false }
            if name.contains("NIOSSL") || name.contains("BoringSSL") { return true }
            current = (error as? PSQLError)?.underlying
        }
        return false
    }

    /// The error a caller gets for `error`, raised while trying to `what` in `vault`.
    static func vaultError(_ error: any Error, what: String, vault: String) -> VaultError {
        if let error = error as? VaultError { return error }
        if error is CancellationError { return VaultError(.cancelled, "Cancelled while trying to \(what) in \(vault).") }
        if let error = error as? PostgresDecodingError {
            return VaultError(
                .integrityFailure,
                "\(vault) is damaged or was tampered with: a value read to \(what) is not what TokenVault writes (\(error.code), column \(error.columnName)). Restore it from a backup.")
        }
        if let error = error as? PSQLError {
            switch error.code {
            case .server:
                let state = error.serverInfo?[.sqlState] ?? "?"
                let message = error.serverInfo?[.message] ?? "no message"
                switch state {
                case "55P03":
                    return VaultError(.timeout, "Could not \(what) in \(vault): a lock stayed taken past the time bound.", underlying: error)
                case "28P01", "28000":
                    return VaultError(.backendUnavailable, "The database refused the login of \(vault): \(message). Check the user and TOKEN_VAULT_DATABASE_PASSWORD_FILE.", underlying: error)
                case "3D000":
                    return VaultError(.backendUnavailable, "The database of \(vault) does not exist: \(message).", underlying: error)
                case "42501":
                    return VaultError(.permissionDenied, "The database user may not \(what) in \(vault): \(message).", underlying: error)
                case "57014":
                    return VaultError(.timeout, "Could not \(what) in \(vault): the statement ran past its time bound.", underlying: error)
                default:
                    if isConnectionFailure(error) {
                        return VaultError(.backendUnavailable, "Lost the connection to \(vault) while trying to \(what): \(message).", underlying: error)
                    }
                    return VaultError(.io, "The database failed to \(what) in \(vault): \(message) (SQLSTATE \(state)).", underlying: error)
                }
            case .sslUnsupported:
                return VaultError(
                    .backendUnavailable,
                    "The server of \(vault) does not offer TLS, and sslmode requires it. Enable ssl on the server (or, on loopback only, use sslmode=disable).",
                    underlying: error)
            case .unsupportedAuthMechanism, .authMechanismRequiresPassword, .saslError:
                return VaultError(
                    .backendUnavailable,
                    "Could not log in to \(vault): the server asks for a password or a method this client does not offer (\(error.code)). Set TOKEN_VAULT_DATABASE_PASSWORD_FILE.",
                    underlying: error)
            default:
                break
            }
        }
        if isTLSFailure(error) {
            return VaultError(
                .backendUnavailable,
                "The TLS handshake with \(vault) failed (\(describe(error))); check sslmode, sslrootcert and the server's certificate.",
                underlying: SendableDescription(describe(error)))
        }
        return VaultError(
            .backendUnavailable, "Could not reach \(vault) to \(what): \(describe(error)).", underlying: SendableDescription(describe(error)))
    }

    /// A short description of a lower-level error: it never holds secrets (postgres-nio's
    /// errors hold no query parameters in their description).
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let underlying = error.underlying { return "\(error.code): \(describe(underlying))" }
            return "\(error.code)"
        }
        return String(describing: error)
    }
}

/// A pooled connection found closed before use: a connection failure, retried on another.
struct ClosedConnection: Error, Sendable, CustomStringConvertible {
    var description: String { "the connection was closed by the server" }
}

/// A lower-level error kept as its description only.
struct SendableDescription: Error, Sendable, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension PostgresStore {
    /// Runs `body` on a pooled connection within ``Options/operationTimeout`` (or `limit`), retrying
    /// on a new connection when the connection fails (a restarted server, a terminated backend, a
    /// tripped pool) until that bound. A body that fails otherwise is not retried.
    func bounded<Result: Sendable>(
        _ what: @autoclosure @escaping @Sendable () -> String, within limit: Duration? = nil,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        let client = self.client
        let vault = vaultName
        return try await Self.withDeadline(limit ?? options.operationTimeout, what: what(), vault: vault) {
            try await Self.retrying(what: what(), vault: vault) {
                try await client.withConnection { connection in
                    // A connection the server has closed (a restart) may still be handed out for a
                    // moment; postgres-nio never answers a statement sent on it, so another is asked for.
                    guard !connection.isClosed else { throw ClosedConnection() }
                    return try await body(connection)
                }
            }
        }
    }

    /// Calls `attempt` until it succeeds, fails with something other than a lost connection, or
    /// the task is cancelled (by the deadline).
    static func retrying<Result: Sendable>(
        what: @autoclosure @Sendable () -> String, vault: String, _ attempt: @Sendable () async throws -> Result
    ) async throws -> Result {
        var pause = Duration.milliseconds(20)
        while true {
            do {
                return try await attempt()
            } catch {
                guard PostgresSQL.isConnectionFailure(error), !Task.isCancelled else {
                    throw PostgresSQL.vaultError(error, what: what(), vault: vault)
                }
                try await Task.sleep(for: pause)
                pause = min(pause * 2, .milliseconds(500))
            }
        }
    }

    /// `body`'s result, or `backendUnavailable` once `limit` has passed, whatever `body` is
    /// doing then (a connect that never answers, a server that stopped responding): the caller
    /// never waits past the bound. `body` is cancelled and left to finish on its own. The bound
    /// is kept by `watch` (one timer for the process), so a call leaves nothing behind when it
    /// finishes in time: no sleeping task per call (under load, thousands of calls a second
    /// would otherwise each leave one behind for `limit`, or wake a timer thread to cancel it).
    static func withDeadline<Result: Sendable>(
        _ limit: Duration, what: @autoclosure @escaping @Sendable () -> String, vault: String, watch: DeadlineWatch = .shared,
        _ body: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        try await AbandonableWork.run(
            arm: { abandon in
                watch.register(after: limit) {
                    abandon(
                        VaultError(
                            .backendUnavailable,
                            "Could not \(what()) in \(vault) within \(limit): the database did not answer in time (unreachable, down or restarting)."))
                }
            },
            ended: { entry in watch.remove(entry) },
            body)
    }
}

extension PostgresConnection {
    /// Runs a statement to its end. postgres-nio reports a statement's error (a lock timeout, a
    /// failed commit) through its row stream, which `query` returns before the statement ends:
    /// the stream is read here, so that the error is thrown, not dropped.
    func run(_ query: PostgresQuery, logger: Logger) async throws {
        let rows = try await self.query(query, logger: logger)
        for try await _ in rows {}
    }
}
#endif
