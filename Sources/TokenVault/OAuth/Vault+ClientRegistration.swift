import FoundationEssentials
import Logging

extension Vault {
    /// ``saveToken(_:for:)``: the new token, with the registration and the server's verdict that
    /// the entry already held. The verdict is bound to the refresh token it was given on, so it
    /// keeps meaning exactly what it meant: a new refresh token is not covered by it.
    func saveTokenKeepingRegistration(_ token: OAuthToken, for key: CredentialKey) async throws {
        var entry = StoredEntry(token: token)
        if let data = try await store.load(key) {
            do {
                let stored = try StoredEntry(storedForm: data)
                entry.refresh = stored.refresh
                entry.rejection = stored.rejection
                entry.dpop = stored.dpop
            } catch let error as VaultError where error.code == .unsupportedVersion {
                // A later release's entry: replacing it would silently drop what it knows.
                throw VaultError(
                    error.code,
                    "The entry \(key) holds a token this release cannot read in full (\(error.message)); saving over it would drop its client registration. Save with saveToken(_:for:registration:) to replace it.",
                    underlying: error)
            } catch {
                // Not a token (an opaque secret, unreadable bytes): replaced, as saveToken always did.
            }
        }
        try await store.save(entry.storedForm(), for: key, contentType: .json)
        logger.debug("saved token", metadata: ["key": "\(key)", "refreshable": "\(entry.refresh != nil)"])
    }

    /// The token under `key` and the server's stored rejection of its refresh token, in one read;
    /// an entry that is a bare token line (which ``token(for:)`` reads) has no verdict.
    func tokenAndRejection(for key: CredentialKey) async throws -> (OAuthToken, OAuthErrorResponse?)? {
        guard let data = try await store.load(key) else { return nil }
        if let entry = try? StoredEntry(storedForm: data) {
            return (entry.token, try entry.refreshTokenRejected())
        }
        // Not a stored entry: read it as token(for:) does, with its errors.
        do {
            return (try OAuthToken(storedForm: data), nil)
        } catch let error as VaultError where error.code == .integrityFailure {
            throw VaultError(.invalidInput, "The entry \(key) holds an opaque secret, not a token.", underlying: error)
        }
    }

    /// The earlier spelling of ``saveToken(_:for:registration:)``.
    @available(*, deprecated, renamed: "saveToken(_:for:registration:)")
    public func saveToken(_ token: OAuthToken, for key: CredentialKey, refresh: ClientRegistration?) async throws {
        try await saveToken(token, for: key, registration: refresh)
    }

    /// The earlier name of ``registration(for:)``.
    @available(*, deprecated, renamed: "registration(for:)")
    public func refreshDescription(for key: CredentialKey) async throws -> ClientRegistration? {
        try await registration(for: key)
    }
}
