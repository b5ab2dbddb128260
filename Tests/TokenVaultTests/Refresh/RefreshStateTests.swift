import Foundation
import Testing
@testable import TokenVault

/// What the vault tells about an entry's refresh without a request (`vault list`/`vault status`
/// build on it), and the injected clock of the closure form.
@Suite struct RefreshStateTests {
    let client: ClientRegistration

    init() throws {
        client = try ClientRegistration(
            tokenEndpoint: try #require(URL(string: "https://auth.example.com/token")), clientID: "cli",
            clientAuthentication: .clientSecretPost("tv-client-secret-5c1e"))
    }

    @Test func eachEntryStateIsNamedWithoutShowingASecret() async throws {
        let vault = Vault(store: MemoryStore())
        let later = Date().addingTimeInterval(3_600)
        func key(_ name: String) throws -> CredentialKey { try CredentialKey(service: "state", account: name) }

        try await vault.saveToken(OAuthToken(accessToken: "at-self", refreshToken: "rt-self", expiresAt: later), for: key("self"), registration: client)
        try await vault.saveToken(OAuthToken(accessToken: "at-norefresh", expiresAt: later), for: key("no-rt"), registration: client)
        try await vault.saveToken(
            OAuthToken(accessToken: "at-rtexpired", refreshToken: "rt-old", expiresAt: later, refreshTokenExpiresAt: Date().addingTimeInterval(-60)),
            for: key("rt-expired"), registration: client)
        try await vault.saveToken(OAuthToken(accessToken: "at-manual", refreshToken: "rt-manual", expiresAt: later), for: key("manual"))
        try await vault.saveToken(OAuthToken(accessToken: "at-none", expiresAt: later), for: key("none"))
        try await vault.saveSecret(Data("opaque".utf8), for: key("secret"))

        #expect(try await vault.tokenEntry(for: key("self"))?.refreshability() == .refreshesItself)
        #expect(try await vault.tokenEntry(for: key("self"))?.refreshability().isAutomatic == true)
        #expect(try await vault.tokenEntry(for: key("no-rt"))?.refreshability() == .noRefreshToken)
        #expect(try await vault.tokenEntry(for: key("rt-expired"))?.refreshability() == .noRefreshToken)
        #expect(try await vault.tokenEntry(for: key("manual"))?.refreshability() == .noDescription)
        #expect(try await vault.tokenEntry(for: key("none"))?.refreshability() == .notRefreshable)
        #expect(try await vault.tokenEntry(for: key("absent")) == nil)
        await #expect(throws: VaultError.self) { try await vault.tokenEntry(for: key("secret")) }

        let shown = try await vault.tokenEntry(for: key("self")).map { "\($0)" } ?? ""
        #expect(shown.contains("refreshes itself"))
        for secret in ["tv-client-secret-5c1e", "rt-self", "at-self"] {
            #expect(!shown.contains(secret), "\(shown)")
        }
    }

    @Test func aStoredRejectionMakesTheEntryRejected() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "state", account: "rejected")
        let token = OAuthToken(accessToken: "at-1", refreshToken: "rt-1", expiresAt: Date().addingTimeInterval(-10))
        try await vault.saveToken(token, for: key, registration: client)
        // The closure form stores the verdict the same way the description form does.
        await #expect(throws: VaultError.self) {
            try await vault.freshToken(for: key) { _ in throw OAuthErrorResponse(error: "invalid_grant") }
        }
        let entry = try #require(try await vault.tokenEntry(for: key))
        #expect(entry.refreshability() == .rejected)
        #expect(entry.rejection?.error == "invalid_grant")
        #expect(entry.registration == client)
        #expect(entry.token.accessToken == "at-1", "the token itself is untouched")
        #expect(!"\(entry)".contains("tv-client-secret-5c1e") && !"\(entry)".contains("rt-1"))

        // A new login clears it.
        try await vault.saveToken(OAuthToken(accessToken: "at-2", refreshToken: "rt-2"), for: key, registration: client)
        #expect(try await vault.tokenEntry(for: key)?.refreshability() == .refreshesItself)
    }

    static func clock(offset: TimeInterval) -> VaultClock {
        VaultClock(now: { Date().addingTimeInterval(offset) }, sleep: { _ in })
    }

    @Test func theClosureFormTakesAnInjectedClock() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "state", account: "clock")
        // Valid for ten minutes by the real clock.
        try await vault.saveToken(OAuthToken(accessToken: "at-1", refreshToken: "rt-1", expiresAt: Date().addingTimeInterval(600)), for: key)
        let recorder = RefreshRecorder()
        let refresh: @Sendable (OAuthToken) async throws -> OAuthToken = { stale in
            let call = await recorder.record(stale)
            return OAuthToken(accessToken: "at-new-\(call)", refreshToken: "rt-new-\(call)", expiresAt: Date().addingTimeInterval(4_000))
        }

        let now = try await vault.freshToken(for: key, clock: .system, refresh: refresh)
        #expect(now.accessToken == "at-1")
        #expect(await recorder.calls == 0)

        // An hour later, by the injected clock: stale, so refreshed once, without waiting.
        let later = try await vault.freshToken(for: key, clock: Self.clock(offset: 3_600), refresh: refresh)
        #expect(later.accessToken == "at-new-1")
        #expect(await recorder.calls == 1)
        #expect(await recorder.staleRefreshTokens == ["rt-1"])
        #expect(try await vault.token(for: key)?.accessToken == "at-new-1")
    }
}
