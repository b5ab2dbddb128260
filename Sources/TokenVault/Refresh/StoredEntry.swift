package import Foundation

/// A token entry as stored: the token's own stored form, plus, when present, two fields that
/// earlier releases do not write and ignore when reading:
///
/// - `refresh`: the entry's ``ClientRegistration``, with the client secret sealed in the entry;
/// - `refresh_rejected`: the server's verdict on the entry's refresh token after it rejected it
///   (`invalid_grant`), bound to that refresh token by a hash, so that no process presents it again.
///
/// An entry with neither is byte for byte what ``OAuthToken/storedForm()`` writes.
package struct StoredEntry: Codable, Sendable {
    package var token: OAuthToken
    package var refresh: ClientRegistration?
    package var rejection: RefreshRejection?

    package init(token: OAuthToken, refresh: ClientRegistration? = nil, rejection: RefreshRejection? = nil) {
        self.token = token
        self.refresh = refresh
        self.rejection = rejection
    }

    private enum ExtraKeys: String, CodingKey {
        case refresh
        case rejection = "refresh_rejected"
    }

    package init(from decoder: any Decoder) throws {
        token = try OAuthToken(from: decoder)
        let container = try decoder.container(keyedBy: ExtraKeys.self)
        refresh = try container.decodeIfPresent(ClientRegistration.self, forKey: .refresh)
        rejection = try container.decodeIfPresent(RefreshRejection.self, forKey: .rejection)
    }

    package func encode(to encoder: any Encoder) throws {
        try token.encode(to: encoder)
        var container = encoder.container(keyedBy: ExtraKeys.self)
        try container.encodeIfPresent(refresh, forKey: .refresh)
        try container.encodeIfPresent(rejection, forKey: .rejection)
    }

    package func storedForm() throws -> Data {
        if refresh == nil && rejection == nil { return try token.storedForm() }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
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

    enum CodingKeys: String, CodingKey {
        case error
        case errorDescription = "error_description"
        case refreshTokenHash = "rt_hash"
        case at
    }

    static func hash(_ refreshToken: String) throws -> String {
        try Sodium.ensureInitialized()
        var input = Data("tokenvault-rejected-refresh-v1".utf8)
        input.append(Data(refreshToken.utf8))
        return Sodium.shortHash(input).map { String(format: "%02x", $0) }.joined()
    }
}
