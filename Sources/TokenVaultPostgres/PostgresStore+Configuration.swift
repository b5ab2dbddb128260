// Owns: the database URL (`TOKEN_VAULT_DATABASE_URL`), the password file, and the TLS policy.
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
public import Foundation
import TokenVault
import PostgresNIO

extension PostgresStore {
    /// How TLS is used, after libpq's `sslmode` names.
    public enum TLSMode: String, Sendable, CaseIterable {
        /// No TLS. Accepted only for loopback addresses and Unix sockets.
        case disable
        /// TLS, without checking the server's certificate (protects against passive listeners only).
        case require
        /// TLS, with the certificate checked against the trusted roots, but not the host name.
        case verifyCA = "verify-ca"
        /// TLS, with the certificate and the host name checked. The default for TCP.
        case verifyFull = "verify-full"
    }

    /// Where the database is and how to reach it: parsed from a `postgres://` URL.
    ///
    /// `postgres://user[:password]@host[:port]/database?sslmode=verify-full&sslrootcert=/path/ca.pem`.
    /// A Unix socket is named by a `host` parameter holding its directory:
    /// `postgres://user@/database?host=/var/run/postgresql`. `sslmode` defaults to `verify-full`
    /// over TCP (a careful default: libpq's `prefer` would fall back to plain text in silence);
    /// `disable` is refused unless the host is a loopback address or the connection is a Unix
    /// socket; `allow` and `prefer` are refused. The password comes from a password file or
    /// the URL, never from the command line. ``description`` never shows it.
    public struct Configuration: Sendable, CustomStringConvertible {
        public var host: String?
        public var port: Int
        /// The directory of the server's Unix socket, when connecting through one.
        public var socketDirectory: String?
        public var user: String
        public var database: String
        public var tlsMode: TLSMode
        /// A PEM file of the CA certificates to trust (`sslrootcert`); `nil`: the system's.
        public var rootCertificatePath: String?
        var password: String?

        /// Parses `url`, and reads the password from `passwordFile` if one is given (it must be
        /// a private file, as key files are; one trailing newline is ignored).
        /// - Throws: `invalidInput` for a URL that is not a PostgreSQL URL, an unknown or unsafe
        ///   `sslmode`, or a password given in both places.
        public init(url: String, passwordFile: String? = nil, allowInsecurePermissions: Bool = false) throws {
            guard let components = URLComponents(string: url), let scheme = components.scheme,
                ["postgres", "postgresql"].contains(scheme.lowercased())
            else {
                throw VaultError(
                    .invalidInput,
                    "The database URL is not a postgres:// URL (postgres://user@host:port/database?sslmode=verify-full).")
            }
            var parameters: [String: String] = [:]
            for item in components.queryItems ?? [] {
                parameters[item.name] = item.value ?? ""
            }
            let known: Set<String> = ["sslmode", "sslrootcert", "host", "port", "user", "dbname"]
            if let unknown = parameters.keys.sorted().first(where: { !known.contains($0) }) {
                throw VaultError(
                    .invalidInput,
                    "The database URL has a parameter this vault does not know: \(unknown) (known: \(known.sorted().joined(separator: ", "))).")
            }
            let hostParameter = parameters["host"]
            if let hostParameter, hostParameter.hasPrefix("/") {
                socketDirectory = hostParameter
                host = nil
            } else {
                let named = hostParameter ?? components.host ?? ""
                host = named.isEmpty ? nil : named
                socketDirectory = nil
            }
            if host == nil && socketDirectory == nil {
                throw VaultError(
                    .invalidInput, "The database URL names no host; give one (postgres://user@host/database) or a socket directory (?host=/var/run/postgresql).")
            }
            if let portText = parameters["port"] {
                guard let value = Int(portText), (1...65535).contains(value) else {
                    throw VaultError(.invalidInput, "The database URL's port \(portText) is not a port number.")
                }
                port = value
            } else {
                port = components.port ?? 5432
            }
            guard (1...65535).contains(port) else {
                throw VaultError(.invalidInput, "The database URL's port \(port) is not a port number.")
            }
            let defaultUser = ProcessInfo.processInfo.environment["USER"] ?? "postgres"
            user = parameters["user"] ?? components.user.flatMap { $0.isEmpty ? nil : $0 } ?? defaultUser
            let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
            database = parameters["dbname"] ?? (path.isEmpty ? user : path)
            rootCertificatePath = parameters["sslrootcert"].flatMap { $0.isEmpty ? nil : $0 }

            let isLocal = socketDirectory != nil || Self.isLoopback(host ?? "")
            if let modeText = parameters["sslmode"] {
                guard let mode = TLSMode(rawValue: modeText) else {
                    throw VaultError(
                        .invalidInput,
                        "sslmode=\(modeText) is not accepted; use verify-full (the default), verify-ca, require, or disable (loopback and Unix sockets only). allow and prefer would fall back to plain text in silence.")
                }
                tlsMode = mode
            } else {
                tlsMode = socketDirectory != nil ? .disable : .verifyFull
            }
            if tlsMode == .disable && !isLocal {
                throw VaultError(
                    .invalidInput,
                    "sslmode=disable is accepted only for loopback addresses and Unix sockets; \(host ?? "") is neither. Use sslmode=verify-full (or require).")
            }
            if socketDirectory != nil && tlsMode != .disable {
                throw VaultError(.invalidInput, "A Unix socket connection does not use TLS; leave sslmode out or set sslmode=disable.")
            }

            let urlPassword = components.password.flatMap { $0.isEmpty ? nil : $0 }
            if let passwordFile {
                guard urlPassword == nil else {
                    throw VaultError(
                        .invalidInput,
                        "The database password is given twice: in TOKEN_VAULT_DATABASE_PASSWORD_FILE and in the URL. Keep it in the file only.")
                }
                let secret = try RowSealingSecret.load(.passphraseFile(passwordFile), allowInsecurePermissions: allowInsecurePermissions)
                password = secret.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
            } else {
                password = urlPassword
            }
        }

        /// Reads `TOKEN_VAULT_DATABASE_URL` and `TOKEN_VAULT_DATABASE_PASSWORD_FILE`.
        /// - Throws: `backendUnavailable` when no URL is set; what ``init(url:passwordFile:allowInsecurePermissions:)`` throws.
        public static func fromEnvironment(
            _ environment: [String: String] = ProcessInfo.processInfo.environment, allowInsecurePermissions: Bool = false
        ) throws -> Configuration {
            guard let url = environment["TOKEN_VAULT_DATABASE_URL"], !url.isEmpty else {
                throw VaultError(
                    .backendUnavailable,
                    "The postgres backend needs TOKEN_VAULT_DATABASE_URL (postgres://user@host:port/database?sslmode=verify-full).")
            }
            let passwordFile = environment["TOKEN_VAULT_DATABASE_PASSWORD_FILE"].flatMap { $0.isEmpty ? nil : $0 }
            return try Configuration(url: url, passwordFile: passwordFile, allowInsecurePermissions: allowInsecurePermissions)
        }

        static func isLoopback(_ host: String) -> Bool {
            let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
            if bare == "localhost" || bare == "::1" { return true }
            let parts = bare.split(separator: ".", omittingEmptySubsequences: false)
            return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
        }

        /// `user@host:port/database` or `user@unix:/dir/database`: where the vault is, without the password.
        public var description: String {
            if let socketDirectory { return "\(user)@unix:\(socketDirectory)/\(database)" }
            let shownHost = (host ?? "").contains(":") ? "[\(host ?? "")]" : (host ?? "")
            return "\(user)@\(shownHost):\(port)/\(database)"
        }

        /// The host as libpq reads it: an IPv6 address without its brackets.
        var bareHost: String {
            let host = self.host ?? "localhost"
            return host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        }

        /// The TLS configuration `tlsMode` asks for; `nil` for none. For verify-full the chain is
        /// checked here and the host name is not: ``PostgresConnector`` checks it after the
        /// handshake, before anything is sent, by libpq's rules (swift-nio-ssl's own check also
        /// accepts a certificate naming the peer's IP address). Never hand this configuration to
        /// postgres-nio for a verify-full connection.
        func tlsConfiguration() throws -> TLSConfiguration? {
            switch tlsMode {
            case .disable:
                return nil
            case .require, .verifyCA, .verifyFull:
                var context = TLSConfiguration.makeClientConfiguration()
                context.minimumTLSVersion = .tlsv12
                switch tlsMode {
                case .require: context.certificateVerification = .none
                default: context.certificateVerification = .noHostnameVerification
                }
                if let rootCertificatePath {
                    guard FileManager.default.isReadableFile(atPath: rootCertificatePath) else {
                        throw VaultError(.invalidInput, "The sslrootcert file \(rootCertificatePath) cannot be read.")
                    }
                    context.trustRoots = .file(rootCertificatePath)
                }
                return context
            }
        }
    }
}
#endif
