package import FoundationEssentials

/// A token entry as stored: the token's own stored form, plus, when present, two fields that
/// earlier releases do not write and ignore when reading:
///
/// - `refresh`: the entry's ``ClientRegistration``, with the client secret sealed in the entry;
/// - `refresh_rejected`: the server's verdict on the entry's refresh token after it rejected it
///   (`invalid_grant`), bound to that refresh token by a hash, so that no process presents it again;
/// - `refresh_presenting`: the journal of a refresh in flight, written (and synced) before the
///   request leaves: this refresh token, by hash, is being presented. A save of the answer drops
///   it, so a process that finds it knows the presenter died after the request may have reached
///   the server, and presents the same refresh token again at once (see ``RefreshPresenting``).
///
/// An entry with neither is byte for byte what ``OAuthToken/storedForm()`` writes.
package struct StoredEntry: Codable, Sendable {
    package var token: OAuthToken
    package var refresh: ClientRegistration?
    package var rejection: RefreshRejection?
    package var presenting: RefreshPresenting?
    /// The DPoP key every token request and resource request of this entry is signed with.
    package var dpop: DPoPKey?

    package init(
        token: OAuthToken, refresh: ClientRegistration? = nil, rejection: RefreshRejection? = nil,
        presenting: RefreshPresenting? = nil, dpop: DPoPKey? = nil
    ) {
        self.token = token
        self.refresh = refresh
        self.rejection = rejection
        self.presenting = presenting
        self.dpop = dpop
    }

    private enum ExtraKeys: String, CodingKey {
        case refresh
        case rejection = "refresh_rejected"
        case presenting = "refresh_presenting"
        case dpop
    }

    package init(from decoder: any Decoder) throws {
        token = try OAuthToken(from: decoder)
        let container = try decoder.container(keyedBy: ExtraKeys.self)
        refresh = try container.decodeIfPresent(ClientRegistration.self, forKey: .refresh)
        rejection = try container.decodeIfPresent(RefreshRejection.self, forKey: .rejection)
        presenting = try container.decodeIfPresent(RefreshPresenting.self, forKey: .presenting)
        dpop = try container.decodeIfPresent(StoredDPoPKey.self, forKey: .dpop)?.key()
    }

    package func encode(to encoder: any Encoder) throws {
        try token.encode(to: encoder)
        var container = encoder.container(keyedBy: ExtraKeys.self)
        try container.encodeIfPresent(refresh, forKey: .refresh)
        try container.encodeIfPresent(rejection, forKey: .rejection)
        try container.encodeIfPresent(presenting, forKey: .presenting)
        try container.encodeIfPresent(dpop.map(StoredDPoPKey.init), forKey: .dpop)
    }

    package func storedForm() throws -> Data {
        if refresh == nil && rejection == nil && presenting == nil && dpop == nil { return try token.storedForm() }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return OAuthToken.escapingBracesInStrings(try encoder.encode(self))
    }

    /// Reads an entry; errors as ``OAuthToken/init(storedForm:)`` throws them.
    package init(storedForm data: Data) throws {
        do {
            self = try JSONDecoder().decode(StoredEntry.self, from: data)
        } catch let error as VaultError {
            throw error
        } catch {
            throw VaultError(.integrityFailure, "The stored entry is not a TokenVault token.")
        }
    }

    /// Whether the server has already rejected the refresh token this entry holds.
    package func refreshTokenRejected() throws -> OAuthErrorResponse? {
        guard let rejection, let refreshToken = token.refreshToken,
            rejection.refreshTokenHash == (try RefreshRejection.hash(refreshToken))
        else { return nil }
        return OAuthErrorResponse(error: rejection.error, errorDescription: rejection.errorDescription)
    }

    /// Whether an earlier refresh presented this entry's refresh token and died before saving
    /// the answer (its journal names this very refresh token).
    package func wasInterrupted() throws -> RefreshPresenting? {
        guard let presenting, let refreshToken = token.refreshToken,
            presenting.refreshTokenHash == (try RefreshRejection.hash(refreshToken))
        else { return nil }
        return presenting
    }
}

/// The journal of a refresh in flight: the refresh token (by hash) that a process is about to
/// present, and when. Written before the request leaves and dropped by the save of the answer; a
/// process that finds it presents the same refresh token again at once, since a server with a
/// reuse interval (Auth0's overlap period, Okta's grace period, Keycloak's max reuse, Hydra's grace
/// period) accepts it within that interval, and a request that never reached the server simply works.
package struct RefreshPresenting: Codable, Sendable, Equatable {
    /// The same hash as ``RefreshRejection/refreshTokenHash``.
    var refreshTokenHash: String
    /// When the request was about to leave, Unix seconds (the presenting host's clock).
    var at: Int64
    /// The same in milliseconds; absent in records written before it was added.
    var atMilliseconds: Int64? = nil
    /// The process that presented it (diagnostics only).
    var pid: Int32

    enum CodingKeys: String, CodingKey {
        case refreshTokenHash = "rt_hash"
        case at
        case atMilliseconds = "at_ms"
        case pid
    }

    /// The latest moment, in Unix seconds by the presenting host's clock, at which the request
    /// may have left: `at_ms`, or the end of the second `at` was rounded to.
    package var latestStart: Double {
        atMilliseconds.map { Double($0) / 1000 } ?? Double(at) + 0.5
    }
}

/// The server's verdict on a refresh token, stored with the entry.
package struct RefreshRejection: Codable, Sendable, Equatable {
    var error: String
    var errorDescription: String?
    /// BLAKE2b-128 of the refresh token, hex: says which refresh token was rejected without
    /// storing it twice.
    var refreshTokenHash: String
    /// When the verdict came, Unix seconds.
    var at: Int64
    /// Whether the refused token was presented again after an interrupted refresh (its journal):
    /// the grant was lost with the process that died, and the message says so.
    var interrupted: Bool? = nil

    enum CodingKeys: String, CodingKey {
        case error
        case errorDescription = "error_description"
        case refreshTokenHash = "rt_hash"
        case at
        case interrupted
    }

    static func hash(_ refreshToken: String) throws -> String {
        try Sodium.ensureInitialized()
        var input = Data("tokenvault-rejected-refresh-v1".utf8)
        input.append(Data(refreshToken.utf8))
        return hexString(Sodium.shortHash(input))
    }
}
