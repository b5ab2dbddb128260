#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import FoundationEssentials
import TokenVault

/// A token a command hands to another program (`vault run`): what `vault get --fresh` prints, or
/// the error it exits with.
enum FreshToken {
    /// The token under `key`, refreshed first when it expires within ``VaultCommand/Get/leeway``
    /// and the entry can be refreshed (one refresh across every process).
    /// - Throws: `notFound` with no entry; `expired` when it has expired (or expires within the
    ///   leeway) and cannot be refreshed; `invalidInput` for an entry that is not a token; the
    ///   refresh's errors (`reauthenticationRequired`, `networkFailure`, …).
    static func usable(_ vault: Vault, key: CredentialKey, now: Date = Date()) async throws -> OAuthToken {
        let stored: OAuthToken?
        let refreshed: Bool
        do {
            (stored, refreshed) = try await RefreshCLI.freshToken(vault, key: key, leeway: VaultCommand.Get.leeway)
        } catch let error as VaultError where error.code == .invalidInput {
            throw VaultError(
                error.code, "\(error.message) Only tokens are handed to other programs; this entry is not shown.", underlying: error)
        }
        guard let token = stored else {
            throw VaultError.nothingStored(for: key)
        }
        return try checked(token, refreshed: refreshed, key: key, now: now)
    }

    /// `token` if it is usable, else the `expired` error (`refreshed`: it came from the refresh
    /// path, or from the agent that keeps it fresh).
    static func checked(_ token: OAuthToken, refreshed: Bool, key: CredentialKey, now: Date = Date()) throws -> OAuthToken {
        // A token the refresh just got is as fresh as the server makes them.
        if token.isExpired(at: now, leeway: refreshed ? 0 : VaultCommand.Get.leeway) {
            throw VaultError.staleToken(
                token, for: key, leeway: VaultCommand.Get.leeway, now: now,
                advice: ", and the entry holds no refresh description; log in again (vault login) or store a new token (vault set).")
        }
        return token
    }
}
#endif
