#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import FoundationEssentials
import TokenVault

/// The messages several commands give, made in one place so that they say the same thing.
extension VaultError {
    /// `notFound`: nothing is stored under `key` (`what`: "token" or "entry"); with `noVaultAt`,
    /// because there is no vault file at that path yet. `then` is added after, as in "deploy.sh
    /// was not started."
    static func nothingStored(
        _ what: String = "token", for key: CredentialKey, noVaultAt path: String? = nil, then sequel: String? = nil
    ) -> VaultError {
        var message = "No \(what) is stored for \(key)"
        if let path { message += ": there is no vault yet at \(path)" }
        message += "."
        if let sequel { message += " \(sequel)" }
        return VaultError(.notFound, message)
    }

    /// `expired`: `token` has expired, or expires within `leeway` seconds of `now`, which the
    /// message says with the time; `advice` says what to do about it.
    static func staleToken(
        _ token: OAuthToken, for key: CredentialKey, leeway: TimeInterval, now: Date, advice: String
    ) -> VaultError {
        let state: String
        if let expiresAt = token.expiresAt, expiresAt > now {
            state = "expires within \(Int(leeway)) s (at \(Output.timestamp(expiresAt)))"
        } else {
            state = "expired" + (token.expiresAt.map { " at \(Output.timestamp($0))" } ?? "")
        }
        return VaultError(.expired, "The token for \(key) \(state)\(advice)")
    }
}
#endif
