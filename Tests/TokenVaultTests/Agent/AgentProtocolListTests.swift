import Foundation
import Testing
@_spi(AgentWire) import TokenVault

/// The agent's `list` request and answer as bytes: what one side frames the other decodes, a
/// request that names half a position or an invalid service is refused, and an answer's entries
/// become `vault list`'s rows as the direct path makes them. The agent answering it (a real
/// agent, a real passphrase vault, page after page) is AgentHeldVaultTests'.
@Suite struct AgentProtocolListTests {
    @Test func listRequestsAndAnswersSurviveTheirFrames() throws {
        let after = try CredentialKey(service: "github", account: "default")
        for request in [
            AgentRequest.list(AgentListRequest(service: nil, vault: "file /tmp/v")),
            .list(AgentListRequest(service: "github", vault: "file /tmp/v", after: after)),
        ] {
            #expect(try AgentRequest(body: request.encoded().dropFirst(AgentProtocol.headerLength)) == request)
        }
        let listing = AgentResponse.listing(AgentListing(entries: [
            AgentListing.Entry(service: "github", account: "octocat", kind: "token", expiresAt: 1_700_003_600, refresh: "self"),
            AgentListing.Entry(service: "github", account: "pat", kind: "secret"),
        ], more: true))
        #expect(try AgentResponse(body: listing.encoded().dropFirst(AgentProtocol.headerLength)) == listing)
    }

    @Test func aRequestWithHalfAPositionOrNoValidServiceIsRefused() throws {
        var half = AgentListRequest(service: "github", vault: "file /tmp/v")
        half.afterService = "github"
        var badService = AgentListRequest(service: "", vault: "file /tmp/v")
        badService.service = ""
        for request in [half, badService] {
            #expect(throws: AgentProtocol.DecodingError.self) {
                try AgentRequest(body: AgentRequest.list(request).encoded().dropFirst(AgentProtocol.headerLength))
            }
        }
    }

    @Test func anAnswersEntriesAreTheDirectPathsRows() throws {
        let key = try CredentialKey(service: "github", account: "octocat")
        let expiry = Date(timeIntervalSince1970: 1_700_003_600)
        let rows = [
            ListedEntry(key: key, kind: .token, expiresAt: expiry, refresh: .rejected),
            ListedEntry(key: key, kind: .secret),
            ListedEntry(key: key, kind: .unreadable, unreadable: VaultError(.unsupportedVersion, "Written by a later release.")),
        ]
        for row in rows {
            #expect(AgentListing.Entry(row).listed == row)
        }
        // What no agent writes is no row: an unknown kind, a name that is not a key.
        #expect(AgentListing.Entry(service: "github", account: "x", kind: "folder").listed == nil)
        #expect(AgentListing.Entry(service: "", account: "x", kind: "token").listed == nil)
    }
}
