#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import TokenVault

/// The exit codes of `vault`, and the one mapping from ``VaultError/Code-swift.struct`` to them.
enum ExitStatus {
    static let ok: Int32 = 0
    static let other: Int32 = 1
    static let notFound: Int32 = 2
    static let expired: Int32 = 3
    static let authenticationFailed: Int32 = 4
    static let integrityFailure: Int32 = 5
    static let unavailable: Int32 = 6
    /// The refresh token was rejected (or there is none): only a new login helps.
    static let reauthenticationRequired: Int32 = 7
    /// `vault login`: the fixed redirect URI's port is taken by another program.
    static let redirectPortInUse: Int32 = 8
    /// ArgumentParser's own code for usage and validation errors (EX_USAGE).
    static let usage: Int32 = 64
    /// Stdout or stderr could not be written (EX_IOERR): full, closed, or its reader gone.
    static let outputFailed: Int32 = 74
    /// `vault run`: the command exists but cannot be run, as a shell says.
    static let commandNotRunnable: Int32 = 126
    /// `vault run`: the command is not found, as a shell says.
    static let commandNotFound: Int32 = 127

    static func code(for code: VaultError.Code) -> Int32 {
        switch code {
        case .notFound: notFound
        case .expired: expired
        case .authenticationFailed: authenticationFailed
        case .integrityFailure, .notAVault, .truncated, .unsupportedVersion, .emptyFile: integrityFailure
        case .backendUnavailable, .locked, .keyFileMissing, .timeout, .networkFailure: unavailable
        case .reauthenticationRequired: reauthenticationRequired
        case .addressInUse: redirectPortInUse
        default: other
        }
    }

    static let helpTable = """
        EXIT CODES:
          0   ok
          1   other error (bad input, permission denied, entry already exists, a
              bad TOKEN_VAULT_* setting)
          2   not found (no such entry, plist or vault file)
          3   the token has expired (vault get without --allow-expired)
          4   authentication failed (wrong key or passphrase)
          5   integrity failure (vault file tampered with, corrupt, truncated, empty
              or not a vault)
          6   backend unavailable or locked (no Secret Service, no key, key file
              missing, time-out, token endpoint unreachable after retries)
          7   reauthentication required (the refresh token was rejected or is
              missing: run vault login again)
          8   vault login: the port of the redirect URI is in use by another program
          64  usage error (the command line)
          74  output could not be written (stdout or stderr full or closed); what
              the command did before, such as saving a token, stays done
          126 vault run: the command cannot be run (nothing was started)
          127 vault run: the command is not found (nothing was started)
        Once its command has started, vault run exits with the command's status, or
        128 + the signal that ended it.
        """
}
#endif
