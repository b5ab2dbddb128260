#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
import TokenVault

/// How long a command that talks to the token endpoint may wait for it: one deadline for the
/// whole request, retries included (``TokenEndpointClient/deadline``); and the TLS files of the
/// built-in transport (``TokenEndpointClient/tls``): a CA bundle, a client certificate and its key
/// (mutual TLS, RFC 8705), each a path, never a key itself.
struct HTTPOptions: ParsableArguments {
    static let environmentName = "TOKEN_VAULT_HTTP_DEADLINE"
    /// The longest deadline accepted: an hour.
    static let maximum: Double = 3600

    @Option(
        name: .customLong("http-deadline"),
        help: ArgumentHelp(
            "The most a request to the token endpoint may take in all, retries included (env TOKEN_VAULT_HTTP_DEADLINE; default 20).",
            valueName: "seconds"))
    var httpDeadline: Double?

    @Option(
        name: .customLong("cacert"),
        help: ArgumentHelp(
            "A PEM file of the CAs to trust for the token endpoint, instead of the system's (env TOKEN_VAULT_CACERT).",
            valueName: "path"))
    var caBundle: String?

    @Option(
        name: .customLong("client-cert"),
        help: ArgumentHelp(
            "A PEM client certificate for mutual TLS with the token endpoint (RFC 8705; env TOKEN_VAULT_CLIENT_CERT).",
            valueName: "path"))
    var clientCertificate: String?

    @Option(
        name: .customLong("client-key"),
        help: ArgumentHelp(
            "The PEM key of --client-cert, a file readable by you alone (env TOKEN_VAULT_CLIENT_KEY).", valueName: "path"))
    var clientKey: String?

    func validate() throws {
        if let httpDeadline, !Self.isValid(httpDeadline) {
            throw ValidationError("--http-deadline must be a number of seconds above 0, at most \(Int(Self.maximum)).")
        }
    }

    private static func isValid(_ seconds: Double) -> Bool { seconds.isFinite && seconds > 0 && seconds <= maximum }

    /// The client these options and the environment ask for: the option first, then
    /// TOKEN_VAULT_HTTP_DEADLINE, then the library's default.
    /// - Throws: `configurationError` (exit 1) for a TOKEN_VAULT_HTTP_DEADLINE that is not a valid number of seconds.
    func client(environment: [String: String] = ProcessEnvironment.current) throws -> TokenEndpointClient {
        try Self.client(
            option: httpDeadline, caBundle: caBundle, clientCertificate: clientCertificate, clientKey: clientKey,
            environment: environment)
    }

    /// The TLS files the options (or else TOKEN_VAULT_CACERT, TOKEN_VAULT_CLIENT_CERT and
    /// TOKEN_VAULT_CLIENT_KEY) name, or nil for none.
    /// - Throws: `invalidInput` or `insecurePermissions` from ``TransportTLS``.
    static func tls(
        caBundle: String? = nil, clientCertificate: String? = nil, clientKey: String? = nil,
        environment: [String: String] = ProcessEnvironment.current
    ) throws -> TransportTLS? {
        func named(_ option: String?, _ variable: String) -> String? {
            option ?? environment[variable].flatMap { $0.isEmpty ? nil : $0 }
        }
        let ca = named(caBundle, "TOKEN_VAULT_CACERT")
        let certificate = named(clientCertificate, "TOKEN_VAULT_CLIENT_CERT")
        let key = named(clientKey, "TOKEN_VAULT_CLIENT_KEY")
        guard ca != nil || certificate != nil || key != nil else { return nil }
        return try TransportTLS(caBundle: ca, clientCertificate: certificate, clientKey: key)
    }

    /// The client for the given options, each falling back to its environment variable; a
    /// command without the options (git-credential) reads the environment only. The TLS files
    /// are looked at once, with the options and the environment together.
    static func client(
        option: Double? = nil, caBundle: String? = nil, clientCertificate: String? = nil, clientKey: String? = nil,
        environment: [String: String] = ProcessEnvironment.current
    ) throws -> TokenEndpointClient {
        let tls = try tls(caBundle: caBundle, clientCertificate: clientCertificate, clientKey: clientKey, environment: environment)
        var seconds = option
        if seconds == nil, let text = environment[environmentName], !text.isEmpty {
            guard let value = Double(text), isValid(value) else {
                throw VaultError(
                    .configurationError,
                    "\(environmentName) must be a number of seconds above 0, at most \(Int(maximum)); it is '\(text.prefix(40))'.")
            }
            seconds = value
        }
        guard let seconds else { return TokenEndpointClient(tls: tls) }
        let deadline = Duration.milliseconds(Int64((seconds * 1000).rounded()))
        // A request's own bound never outlasts the whole deadline.
        return TokenEndpointClient(
            requestTimeout: min(TokenEndpointClient.defaultRequestTimeout, deadline), deadline: deadline, tls: tls)
    }
}
#endif
