import Foundation
import Testing
@testable import TokenVault
import TokenVaultTesting

/// `Vault.freshToken` on a ``MemoryStore``: single flight within a process and every error path.
@Suite struct RefreshFreshTokenTests {
    @Test func aValidTokenIsReturnedWithoutRefreshing() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try RefreshFixtures.key()
        let stored = OAuthToken(accessToken: "access-valid", refreshToken: "refresh-1", expiresAt: Date().addingTimeInterval(3_600))
        try await vault.saveToken(stored, for: key)
        let recorder = RefreshRecorder()

        let token = try await vault.freshToken(for: key, leeway: 60) { stale in
            _ = await recorder.record(stale)
            return try RefreshFixtures.response(access: "access-new", refreshToken: "refresh-2")
        }

        #expect(token.accessToken == stored.accessToken)
        #expect(token.refreshToken == stored.refreshToken)
        #expect(await recorder.calls == 0)
    }

    @Test func concurrentCallersOfOneKeyShareOneRefresh() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try RefreshFixtures.key()
        try await vault.saveToken(RefreshFixtures.expired(), for: key)
        let recorder = RefreshRecorder()
        let witness = FlightWitness()
        let callers = 32

        let tokens = try await SingleFlight.callers(callers, witness: witness) {
            try await vault.freshToken(for: key) { stale in
                let call = await recorder.record(stale)
                // Hold the refresh open until the next callers have each joined it or, without
                // single flight, started a refresh of their own.
                try await witness.holdRefresh(untilEvents: SingleFlight.heldUntil)
                return try RefreshFixtures.response(access: "access-new-\(call)", refreshToken: "refresh-\(call + 1)")
            }
        }.map { try $0.get() }

        #expect(await recorder.calls == 1)
        #expect(tokens.count == callers)
        #expect(Set(tokens.map(\.accessToken)) == ["access-new-1"])
        #expect(await recorder.staleRefreshTokens == ["refresh-1"])
        let stored = try #require(try await vault.token(for: key))
        #expect(stored.accessToken == "access-new-1")
        #expect(stored.refreshToken == "refresh-2")
        #expect(stored.scope == "read", "the scope of the old token is kept when the response has none")
    }

    @Test func copiesOfAVaultShareFlights() async throws {
        let store = MemoryStore()
        let key = try RefreshFixtures.key()
        try await Vault(store: store).saveToken(RefreshFixtures.expired(), for: key)
        let recorder = RefreshRecorder()
        let witness = FlightWitness()

        let tokens = try await SingleFlight.callers(8, witness: witness) {
            // A new Vault value over the same store for every caller.
            let vault = Vault(store: store, reason: "copy")
            return try await vault.freshToken(for: key) { stale in
                let call = await recorder.record(stale)
                try await witness.holdRefresh(untilEvents: SingleFlight.heldUntil)
                return try RefreshFixtures.response(access: "access-new-\(call)", refreshToken: "refresh-2")
            }
        }.map { try $0.get() }

        #expect(await recorder.calls == 1)
        #expect(Set(tokens.map(\.accessToken)) == ["access-new-1"])
    }

    @Test func differentKeysRefreshInParallel() async throws {
        let vault = Vault(store: MemoryStore())
        let first = try RefreshFixtures.key("first")
        let second = try RefreshFixtures.key("second")
        try await vault.saveToken(RefreshFixtures.expired(access: "old-first"), for: first)
        try await vault.saveToken(RefreshFixtures.expired(access: "old-second"), for: second)
        let recorder = RefreshRecorder()
        let inRefresh = Gate()

        let tokens = try await withThrowingTaskGroup(of: (CredentialKey, OAuthToken).self) { group in
            for key in [first, second] {
                for _ in 0..<4 {
                    group.addTask {
                        let token = try await vault.freshToken(for: key) { stale in
                            _ = await recorder.record(stale)
                            // Each key's refresh waits for the other's: if keys were refreshed one
                            // after the other, this would never be reached and the bound would fail.
                            await inRefresh.arrive()
                            try await inRefresh.wait(for: 2)
                            return try RefreshFixtures.response(access: "new-\(key.account)", refreshToken: "refresh-2")
                        }
                        return (key, token)
                    }
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }

        #expect(await recorder.calls == 2)
        for (key, token) in tokens {
            #expect(token.accessToken == "new-\(key.account)")
        }
    }

    @Test func separateStoresDoNotShareFlights() async throws {
        let key = try RefreshFixtures.key()
        let vaults = [Vault(store: MemoryStore()), Vault(store: MemoryStore())]
        for (index, vault) in vaults.enumerated() {
            try await vault.saveToken(RefreshFixtures.expired(access: "old-\(index)", refreshToken: "refresh-\(index)"), for: key)
        }
        let recorder = RefreshRecorder()

        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for vault in vaults {
                group.addTask {
                    try await vault.freshToken(for: key) { stale in
                        _ = await recorder.record(stale)
                        return try RefreshFixtures.response(access: "new-for-\(stale.refreshToken ?? "")", refreshToken: "r")
                    }.accessToken
                }
            }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }

        #expect(await recorder.calls == 2)
        #expect(tokens == ["new-for-refresh-0", "new-for-refresh-1"])
    }

    @Test func aResponseWithoutARefreshTokenKeepsTheOldOne() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try RefreshFixtures.key()
        try await vault.saveToken(RefreshFixtures.expired(refreshToken: "refresh-keep"), for: key)

        let token = try await vault.freshToken(for: key) { _ in
            try RefreshFixtures.response(access: "access-new", refreshToken: nil)
        }

        #expect(token.accessToken == "access-new")
        #expect(token.refreshToken == "refresh-keep")
        let stored = try #require(try await vault.token(for: key))
        #expect(stored.refreshToken == "refresh-keep")
        #expect(stored.accessToken == "access-new")
    }

    @Test func invalidGrantAsksForANewLoginAndLeavesTheTokenAlone() async throws {
        let store = MemoryStore()
        let vault = Vault(store: store)
        let key = try RefreshFixtures.key()
        try await vault.saveToken(RefreshFixtures.expired(), for: key)
        let before = try #require(try await vault.store.load(key))
        let recorder = RefreshRecorder()
        let witness = FlightWitness()

        let errors: [(any Error)?] = try await SingleFlight.callers(8, witness: witness) {
            _ = try await vault.freshToken(for: key) { stale in
                _ = await recorder.record(stale)
                try await witness.holdRefresh(untilEvents: SingleFlight.heldUntil)
                throw RefreshFixtures.endpointError("invalid_grant")
            }
        }.map { result in
            if case .failure(let error) = result { return error }
            return nil
        }

        // One request, no retry loop, and every caller is told to log in again.
        #expect(await recorder.calls == 1)
        #expect(errors.count == 8)
        for error in errors {
            let vaultError = try #require(error as? VaultError)
            #expect(vaultError.code == .reauthenticationRequired)
            #expect(vaultError.oauthError?.error == "invalid_grant")
        }
        // The token is untouched; the server's verdict is stored beside it, so that no process
        // presents that refresh token again.
        #expect(try OAuthToken(storedForm: try #require(try await vault.store.load(key))) == (try OAuthToken(storedForm: before)))
        #expect(try await vault.refreshTokenRejection(for: key)?.error == "invalid_grant")
    }

    @Test func aRejectedRefreshTokenIsNotPresentedAgainUntilANewLogin() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try RefreshFixtures.key()
        try await vault.saveToken(RefreshFixtures.expired(refreshToken: "refresh-dead"), for: key)
        let recorder = RefreshRecorder()
        let refresh: @Sendable (OAuthToken) async throws -> OAuthToken = { stale in
            _ = await recorder.record(stale)
            if stale.refreshToken == "refresh-dead" { throw RefreshFixtures.endpointError("invalid_grant") }
            return try RefreshFixtures.response(access: "access-after-login", refreshToken: "refresh-next")
        }

        for _ in 0..<3 {
            let error = try await #require(throws: VaultError.self) { try await vault.freshToken(for: key, refresh: refresh) }
            #expect(error.code == .reauthenticationRequired)
            #expect(error.oauthError?.error == "invalid_grant")
        }
        #expect(await recorder.calls == 1)

        // After a new login stores a new refresh token, refreshing works again.
        try await vault.saveToken(RefreshFixtures.expired(refreshToken: "refresh-from-login"), for: key)
        let token = try await vault.freshToken(for: key, refresh: refresh)
        #expect(token.accessToken == "access-after-login")
        #expect(await recorder.calls == 2)
    }

    @Test func anOAuthErrorResponseThrownDirectlyIsRecognisedToo() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try RefreshFixtures.key()
        try await vault.saveToken(RefreshFixtures.expired(), for: key)

        let error = try await #require(throws: VaultError.self) {
            try await vault.freshToken(for: key) { _ in throw OAuthErrorResponse(error: "invalid_grant") }
        }
        #expect(error.code == .reauthenticationRequired)
        #expect(error.oauthError == OAuthErrorResponse(error: "invalid_grant"))
    }

    @Test func otherEndpointErrorsPassThroughAndLeaveTheTokenAlone() async throws {
        let store = MemoryStore()
        let vault = Vault(store: store)
        let key = try RefreshFixtures.key()
        try await vault.saveToken(RefreshFixtures.expired(), for: key)
        let before = try #require(try await vault.store.load(key))

        let error = try await #require(throws: VaultError.self) {
            try await vault.freshToken(for: key) { _ in throw RefreshFixtures.endpointError("temporarily_unavailable") }
        }
        #expect(error.code == .tokenEndpointError)
        #expect(error.oauthError?.error == "temporarily_unavailable")
        #expect(try await vault.store.load(key) == before)
    }

    @Test func aThrowingRefreshPassesItsErrorOnAndLeavesTheTokenAlone() async throws {
        struct NetworkDown: Error, Equatable {}
        let store = MemoryStore()
        let vault = Vault(store: store)
        let key = try RefreshFixtures.key()
        try await vault.saveToken(RefreshFixtures.expired(), for: key)
        let before = try #require(try await vault.store.load(key))

        await #expect(throws: NetworkDown()) {
            try await vault.freshToken(for: key) { _ in throw NetworkDown() }
        }
        #expect(try await vault.store.load(key) == before)

        // The failure is not sticky: the next call refreshes.
        let token = try await vault.freshToken(for: key) { _ in
            try RefreshFixtures.response(access: "access-after-outage", refreshToken: "refresh-2")
        }
        #expect(token.accessToken == "access-after-outage")
    }

    @Test func aMissingTokenIsNotFoundAndNothingIsRefreshed() async throws {
        let vault = Vault(store: MemoryStore())
        let recorder = RefreshRecorder()
        let error = try await #require(throws: VaultError.self) {
            try await vault.freshToken(for: try RefreshFixtures.key()) { stale in
                _ = await recorder.record(stale)
                return stale
            }
        }
        #expect(error.code == .notFound)
        #expect(await recorder.calls == 0)
    }

    @Test(arguments: [
        RefreshFixtures.expired(refreshToken: nil),
        {
            var token = RefreshFixtures.expired(refreshToken: "refresh-old")
            token.refreshTokenExpiresAt = Date().addingTimeInterval(-1)
            return token
        }(),
    ])
    func anExpiredTokenThatCannotBeRefreshedAsksForANewLogin(_ token: OAuthToken) async throws {
        let store = MemoryStore()
        let vault = Vault(store: store)
        let key = try RefreshFixtures.key()
        try await vault.saveToken(token, for: key)
        let before = try #require(try await vault.store.load(key))
        let recorder = RefreshRecorder()

        let error = try await #require(throws: VaultError.self) {
            try await vault.freshToken(for: key) { stale in
                _ = await recorder.record(stale)
                return stale
            }
        }
        #expect(error.code == .reauthenticationRequired)
        #expect(error.oauthError == nil)
        #expect(await recorder.calls == 0)
        #expect(try await vault.store.load(key) == before)
    }

    @Test func anEntryThatIsNotATokenIsRefused() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try RefreshFixtures.key()
        try await vault.saveSecret(Data([0, 1, 2, 0xFF]), for: key)
        let error = try await #require(throws: VaultError.self) {
            try await vault.freshToken(for: key) { stale in stale }
        }
        #expect(error.code == .invalidInput)
    }

    @Test func tokensShorterThanTheLeewayAreReturnedWithoutARefreshLoop() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try RefreshFixtures.key()
        try await vault.saveToken(RefreshFixtures.expired(), for: key)
        let recorder = RefreshRecorder()

        let token = try await vault.freshToken(for: key, leeway: 60) { stale in
            let call = await recorder.record(stale)
            return try RefreshFixtures.response(access: "short-\(call)", refreshToken: "refresh-\(call + 1)", expiresIn: 5)
        }

        #expect(token.accessToken == "short-1")
        #expect(await recorder.calls == 1)
    }

    @Test func aCancelledCallerDoesNotAbandonARefreshInFlight() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try RefreshFixtures.key()
        try await vault.saveToken(RefreshFixtures.expired(), for: key)
        let entered = Gate()
        let release = Gate()

        let caller = Task {
            try await vault.freshToken(for: key) { _ in
                await entered.arrive()
                // Ignores cancellation, as a URLSession request that is already on the wire would.
                while await release.count == 0 { await Task.yield() }
                return try RefreshFixtures.response(access: "access-rotated", refreshToken: "refresh-rotated")
            }
        }
        try await entered.wait(for: 1)
        caller.cancel()
        await release.arrive()
        _ = await caller.result

        // The rotated refresh token was saved even though its caller went away.
        let stored = try #require(try await vault.token(for: key))
        #expect(stored.refreshToken == "refresh-rotated")
    }

    @Test func aValueTypeStoreIsSerialisedByTheLockFile() async throws {
        // A store TokenVault does not know: no in-process identity, so the flock alone must make
        // the later callers re-read instead of refreshing again.
        let vault = Vault(store: ValueTypeStore(inner: MemoryStore()))
        let key = try RefreshFixtures.key()
        try await vault.saveToken(RefreshFixtures.expired(), for: key)
        let recorder = RefreshRecorder()
        let witness = FlightWitness()
        let callers = 6
        let lockDirectory = try RefreshLockDirectory.forRuntime(scope: "any").path

        let tokens = try await withThrowingTaskGroup(of: OAuthToken.self) { group in
            for _ in 0..<callers {
                group.addTask {
                    return try await vault.freshToken(for: key, timeout: .seconds(20)) { stale in
                        let call = await recorder.record(stale)
                        witness.refreshStarted()
                        // Hold the refresh (and so the lock) until every other caller is waiting
                        // for the lock, holding its lock file open, or, were the lock broken, has
                        // started a refresh of its own.
                        try await SingleFlight.holdUntil("every caller waiting for the lock or refreshing") {
                            let waiting = SingleFlight.lockWaiters(lockDirectory).values.max() ?? 0
                            return waiting >= callers || witness.refreshesStarted >= callers
                        }
                        return try RefreshFixtures.response(access: "access-new-\(call)", refreshToken: "refresh-2")
                    }
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }

        #expect(await recorder.calls == 1)
        #expect(Set(tokens.map(\.accessToken)) == ["access-new-1"])
    }
}

/// `Vault.freshTokenOutcome`: one read, and the caller learns which of the three things happened
/// (the `vault` command judges expiry from it once).
@Suite struct FreshTokenOutcomeTests {
    @Test func aTokenFreshAsStoredIsCurrentAndNothingIsSent() async throws {
        let endpoint = FakeTokenEndpoint()
        let vault = Vault(store: MemoryStore())
        let key = try RefreshFixtures.key()
        let issued = try await endpoint.issueToken(expiresIn: 3_600)
        try await vault.saveToken(issued, for: key, registration: try endpoint.registration())
        let outcome = try await vault.freshTokenOutcome(for: key, leeway: 60, client: endpoint.client)
        guard case .current(let token) = outcome else { Issue.record("\(outcome)"); return }
        #expect(token.accessToken == issued.accessToken)
        #expect(await endpoint.requestCount == 0)
    }

    @Test func aStaleTokenWithARegistrationIsRefreshedAndSaysSo() async throws {
        let endpoint = FakeTokenEndpoint(lifetime: 30)
        let vault = Vault(store: MemoryStore())
        let key = try RefreshFixtures.key()
        let issued = try await endpoint.issueToken(expiresIn: 0)
        try await vault.saveToken(issued, for: key, registration: try endpoint.registration())
        // The server's lifetime (30 s) is inside the leeway (60 s): still `.refreshed`, not stale.
        let outcome = try await vault.freshTokenOutcome(for: key, leeway: 60, client: endpoint.client)
        guard case .refreshed(let token) = outcome else { Issue.record("\(outcome)"); return }
        #expect(token.accessToken != issued.accessToken)
        #expect(await endpoint.refreshCount == 1)
    }

    @Test func aStaleTokenWithoutARegistrationIsHandedBackNotThrown() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try RefreshFixtures.key()
        try await vault.saveToken(RefreshFixtures.expired(), for: key)
        let outcome = try await vault.freshTokenOutcome(for: key)
        guard case .stale(let token) = outcome else { Issue.record("\(outcome)"); return }
        #expect(token.accessToken == RefreshFixtures.expired().accessToken)
        // The plain call still throws `expired` for it, as documented.
        await #expect(throws: VaultError.self) { _ = try await vault.freshToken(for: key) }
    }
}
