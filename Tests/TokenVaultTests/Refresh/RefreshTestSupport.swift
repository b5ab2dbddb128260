import Foundation
import TokenVault

/// Counts calls and remembers what the refresh closure was given.
actor RefreshRecorder {
    private(set) var calls = 0
    private(set) var staleRefreshTokens: [String?] = []

    /// Keeps a refresh open so that other callers pile up behind it: until `callers` refreshes
    /// have started (which only happens when single flight is broken) or `grace` has passed.
    /// With single flight working this always waits out the grace; it never decides the result.
    func holdOpen(untilCalls callers: Int, grace: Duration = .milliseconds(300)) async throws {
        let deadline = ContinuousClock.now.advanced(by: grace)
        while calls < callers, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    func record(_ stale: OAuthToken) -> Int {
        calls += 1
        staleRefreshTokens.append(stale.refreshToken)
        return calls
    }
}

/// A rendezvous: `arrive()` counts, `wait(for:)` returns once that many have arrived, or throws
/// after a generous bound so that a broken single flight fails instead of hanging.
actor Gate {
    private var arrived = 0

    func arrive() { arrived += 1 }

    var count: Int { arrived }

    func wait(for expected: Int, bound: Duration = .seconds(20)) async throws {
        let deadline = ContinuousClock.now.advanced(by: bound)
        while arrived < expected {
            guard ContinuousClock.now < deadline else {
                throw GateTimeout(expected: expected, arrived: arrived)
            }
            try await Task.sleep(for: .milliseconds(2))
        }
    }
}

struct GateTimeout: Error, CustomStringConvertible {
    let expected: Int
    let arrived: Int
    var description: String { "only \(arrived) of \(expected) arrived within the bound" }
}

enum RefreshFixtures {
    /// A key under a random service, so tests can share stores and lock directories.
    static func key(_ account: String = "default") throws -> CredentialKey {
        try CredentialKey(service: "tv-refresh-\(UUID().uuidString.prefix(8).lowercased())", account: account)
    }

    /// A token that expired ten seconds ago and can be refreshed with `refreshToken`.
    static func expired(access: String = "access-old", refreshToken: String? = "refresh-1") -> OAuthToken {
        OAuthToken(
            accessToken: access, refreshToken: refreshToken, scope: "read",
            issuedAt: Date().addingTimeInterval(-3_610), expiresAt: Date().addingTimeInterval(-10))
    }

    /// What a token endpoint returns on refresh, parsed the way a client would parse it.
    static func response(access: String, refreshToken: String?, expiresIn: Int = 3_600) throws -> OAuthToken {
        var fields = #"{"access_token":"\#(access)","token_type":"Bearer","expires_in":\#(expiresIn)"#
        if let refreshToken { fields += #","refresh_token":"\#(refreshToken)""# }
        return try OAuthToken(tokenResponse: fields + "}")
    }

    /// The error a client gets from parsing `{"error":"<code>"}`.
    static func endpointError(_ code: String) -> any Error {
        do {
            _ = try OAuthToken(tokenResponse: #"{"error":"\#(code)","error_description":"test"}"#)
            return VaultError(.invalidInput, "expected the error response to throw")
        } catch {
            return error
        }
    }
}

/// A store of the caller's own that is a value type, with a backend name TokenVault does not
/// know: freshToken must fall back to the runtime-directory lock for it.
struct ValueTypeStore: CredentialStore {
    let inner: MemoryStore
    var backend: BackendKind { .custom("tv-test-value-store") }
    func load(_ key: CredentialKey) async throws -> Data? { await inner.load(key) }
    func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) async throws {
        await inner.save(secret, for: key, contentType: contentType)
    }
    func delete(_ key: CredentialKey) async throws -> Bool { await inner.delete(key) }
    func keys(service: String?) async throws -> [CredentialKey] { await inner.keys(service: service) }
}
