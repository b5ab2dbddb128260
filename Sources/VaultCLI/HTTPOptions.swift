#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import Foundation
import TokenVault

/// How long a command that talks to the token endpoint may wait for it: one deadline for the
/// whole request, retries included (``TokenEndpointClient/deadline``).
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
        try Self.client(option: httpDeadline, environment: environment)
    }

    /// The client for a command without the option (git-credential): the environment only.
    static func client(option: Double? = nil, environment: [String: String] = ProcessEnvironment.current) throws
        -> TokenEndpointClient
    {
        var seconds = option
        if seconds == nil, let text = environment[environmentName], !text.isEmpty {
            guard let value = Double(text), isValid(value) else {
                throw VaultError(
                    .configurationError,
                    "\(environmentName) must be a number of seconds above 0, at most \(Int(maximum)); it is '\(text.prefix(40))'.")
            }
            seconds = value
        }
        guard let seconds else { return TokenEndpointClient() }
        let deadline = Duration.milliseconds(Int64((seconds * 1000).rounded()))
        // A request's own bound never outlasts the whole deadline.
        return TokenEndpointClient(requestTimeout: min(TokenEndpointClient.defaultRequestTimeout, deadline), deadline: deadline)
    }
}
#endif
