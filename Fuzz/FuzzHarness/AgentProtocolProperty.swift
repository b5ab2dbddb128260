import Foundation
@_spi(AgentWire) import TokenVault

/// The property of FuzzAgentProtocol: arbitrary bytes as what arrives on the agent's socket
/// (a 4-byte length, then a body), decoded as the agent decodes a request and as a client
/// decodes a response.
///
/// No input crashes, hangs or allocates past the announced length's bound: a length above
/// ``AgentProtocol/maximumBodyLength`` is refused before any body is read, and bad bytes only
/// throw ``AgentProtocol/DecodingError``. A message that decodes survives being encoded again,
/// and its description does not depend on its access token (nor, for a `store` request, on the
/// entry it carries, whose secrets go only to the agent). A payload the client reads by hand
/// (``AgentToken/init(flatJSON:)``) reads as JSONDecoder reads it.
public enum AgentProtocolProperty: Sendable {
    public enum Outcome: Sendable, Equatable {
        /// The header was refused (too short a body, or too long).
        case headerRefused
        /// Fewer bytes than the header announced.
        case incomplete
        /// The body decoded as a request, as a response, or as both or neither.
        case decoded(request: Bool, response: Bool)
    }

    /// - Throws: ``PropertyViolation`` only.
    public static func check(_ bytes: [UInt8]) throws -> Outcome {
        guard bytes.count >= AgentProtocol.headerLength else { return .incomplete }
        let length: Int
        do {
            length = try AgentProtocol.bodyLength(header: bytes.prefix(AgentProtocol.headerLength))
        } catch {
            return .headerRefused
        }
        guard length <= AgentProtocol.maximumBodyLength else { throw PropertyViolation("a length past the maximum was accepted") }
        let body = bytes.dropFirst(AgentProtocol.headerLength)
        guard body.count >= length else { return .incomplete }
        let frame = body.prefix(length)
        // A token response's payload that the client reads by hand reads as JSONDecoder reads it.
        if frame.count >= 2, let byHand = AgentToken(flatJSON: frame.dropFirst(2)) {
            guard byHand == (try? JSONDecoder().decode(AgentToken.self, from: Data(frame.dropFirst(2)))) else {
                throw PropertyViolation("a token response read by hand differs from JSONDecoder's reading")
            }
        }
        var request = false
        var response = false
        if let decoded = try? AgentRequest(body: frame) {
            request = true
            let again = try reencoded(decoded.encoded()) { try AgentRequest(body: $0) }
            guard again == decoded else { throw PropertyViolation("a request did not survive encoding") }
            if case .store(let store) = decoded {
                var other = try AgentStoreRequest(
                    key: try store.key(), keepingRegistration: OAuthToken(accessToken: "other-fuzz-token"), vault: store.vault)
                other.registration = store.registration
                guard store.description == other.description, String(reflecting: store) == String(reflecting: other) else {
                    throw PropertyViolation("a store request's description shows its entry")
                }
            }
        }
        if let decoded = try? AgentResponse(body: frame) {
            response = true
            let again = try reencoded(decoded.encoded()) { try AgentResponse(body: $0) }
            guard again == decoded else { throw PropertyViolation("a response did not survive encoding") }
            // The description does not depend on the access token (a substring test would trip on
            // a short token such as "ess", which is in the word "access").
            if case .token(let token) = decoded {
                var other = token
                other.accessToken = "other-" + token.accessToken
                guard token.description == other.description else {
                    throw PropertyViolation("a token's description shows its access token")
                }
            }
        }
        return .decoded(request: request, response: response)
    }

    private static func reencoded<Message>(_ bytes: [UInt8], _ decode: (ArraySlice<UInt8>) throws -> Message) throws -> Message {
        do {
            let length = try AgentProtocol.bodyLength(header: bytes.prefix(AgentProtocol.headerLength))
            guard length == bytes.count - AgentProtocol.headerLength else { throw PropertyViolation("an encoded frame's length is wrong") }
            return try decode(bytes.dropFirst(AgentProtocol.headerLength))
        } catch let violation as PropertyViolation {
            throw violation
        } catch {
            throw PropertyViolation("an encoded message did not decode: \(error)")
        }
    }

    /// Seeds: one frame of every kind.
    public static func seeds() throws -> [(name: String, bytes: [UInt8])] {
        let key = try CredentialKey(service: "github", account: "octocat")
        let token = AgentToken(accessToken: "fuzz-access", tokenType: "Bearer", expiresAt: nil, scope: "repo", fresh: true)
        let status = AgentStatus(
            pid: 42, unlocked: true, vault: "file /tmp/v", refreshAt: 0.75,
            entries: [AgentStatus.Entry(service: "github", account: "octocat", nextRefresh: 1_700_000_000, state: "scheduled")], count: 3)
        return [
            ("token-request", AgentRequest.token(AgentTokenRequest(key: key, fresh: true, vault: "auto /tmp/v")).encoded()),
            ("status-request", AgentRequest.status.encoded()),
            ("unlock-request", AgentRequest.unlock(passphrase: try SecretBytes(copying: Array("fuzz-pass".utf8))).encoded()),
            ("lock-request", AgentRequest.lock.encoded()),
            ("token-response", AgentResponse.token(token).encoded()),
            ("status-response", AgentResponse.status(status).encoded()),
            ("proof-request", AgentRequest.proof(AgentProofRequest(
                token: AgentTokenRequest(key: key, fresh: true, vault: "auto /tmp/v"), method: "GET",
                url: URL(string: "https://api.example.com/me")!, nonce: "n-1")).encoded()),
            ("proof-response", AgentResponse.authorization(AgentAuthorization(
                token: AgentToken(accessToken: "fuzz-access", tokenType: "DPoP", expiresAt: nil, scope: nil, fresh: true),
                dpopProof: "eyJ0.eyJ0.c2ln")).encoded()),
            ("done-response", AgentResponse.done.encoded()),
            ("store-request", AgentRequest.store(try AgentStoreRequest(
                key: key, keepingRegistration: OAuthToken(
                    accessToken: "fuzz-access", refreshToken: "fuzz-refresh", issuedAt: Date(timeIntervalSince1970: 1_700_000_000),
                    expiresAt: Date(timeIntervalSince1970: 1_700_003_600)),
                vault: "auto /tmp/v")).encoded()),
            ("store-replace-request", AgentRequest.store(try AgentStoreRequest(
                key: key, token: OAuthToken(accessToken: "fuzz-access", issuedAt: Date(timeIntervalSince1970: 1_700_000_000)),
                registration: try ClientRegistration(tokenEndpoint: URL(string: "https://auth.example.com/token")!, clientID: "fuzz-client"),
                vault: "auto /tmp/v")).encoded()),
            ("delete-request", AgentRequest.delete(AgentDeleteRequest(key: key, vault: "auto /tmp/v")).encoded()),
            ("write-response", AgentResponse.written(AgentWriteResult(backend: "file", existed: true)).encoded()),
            ("accounts-request", AgentRequest.accounts(AgentAccountsRequest(service: "github", vault: "auto /tmp/v")).encoded()),
            ("accounts-response", AgentResponse.accounts(AgentAccounts(accounts: ["default", "octocat"])).encoded()),
            ("list-request", AgentRequest.list(AgentListRequest(
                service: "github", vault: "auto /tmp/v", after: try CredentialKey(service: "github", account: "default"))).encoded()),
            ("list-response", AgentResponse.listing(AgentListing(entries: [
                AgentListing.Entry(service: "github", account: "octocat", kind: "token", expiresAt: 1_700_003_600, refresh: "self"),
                AgentListing.Entry(service: "github", account: "pat", kind: "secret"),
                AgentListing.Entry(
                    service: "github", account: "later", kind: "unreadable", errorCode: "unsupported-version",
                    errorMessage: "The entry was written by a later release."),
            ], more: true)).encoded()),
            ("failure-response", AgentResponse.failure(code: "not-found", message: "No token.").encoded()),
            ("other-version", AgentResponse.done.encoded(version: 2)),
        ]
    }
}
