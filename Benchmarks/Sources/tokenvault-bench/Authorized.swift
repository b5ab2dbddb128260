import Foundation
import TokenVault
import TokenVaultURLSession

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `tokenvault-bench authorized`: an authorized request through the URLSession adapter
/// (`data(for:authorizedBy:)`, which reads the entry's fresh token from the vault each time)
/// against the same request with the `Authorization` header set by hand, from `freshToken` each
/// time (what a user wrote without the adapter) and from a token read once (the floor: no vault
/// read), interleaved in one process against the test OAuth server's resource endpoint (`/api/data`).
/// The token lives an hour: no refresh happens, which the server's count confirms.
enum Authorized {
    static func run(
        path: String, keyFile: String, url: URL, tokenResponse: Data, tokenEndpoint: URL, rounds: Int, warmup: Int
    ) async throws -> [String: Any] {
        let store = try await EncryptedFileStore.open(path: path, keySource: .keyFile(keyFile))
        let vault = Vault(store: store)
        let key = try CredentialKey(service: "bench-authorized", account: "acct")
        let token = try OAuthToken(tokenResponse: tokenResponse)
        try await vault.saveToken(token, for: key, registration: try ClientRegistration(tokenEndpoint: tokenEndpoint, clientID: "tokenvault-example"))
        let authorizer = TokenAuthorizer(vault: vault, key: key)
        let session = URLSession(configuration: .ephemeral)
        let header = "Bearer \(token.accessToken)"

        func byHand() async throws {
            var request = URLRequest(url: url)
            request.setValue(header, forHTTPHeaderField: "Authorization")
            let (_, response) = try await session.data(for: request)
            guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw BenchFailure("by hand: not 200") }
        }
        // What the user wrote before the adapter: a fresh token from the vault, the header, the request.
        func byHandFresh() async throws {
            let fresh = try await vault.freshToken(for: key)
            var request = URLRequest(url: url)
            request.setValue("Bearer \(fresh.accessToken)", forHTTPHeaderField: "Authorization")
            let (_, response) = try await session.data(for: request)
            guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw BenchFailure("by hand, fresh: not 200") }
        }
        func throughAdapter() async throws {
            let (_, response) = try await session.data(for: URLRequest(url: url), authorizedBy: authorizer)
            guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw BenchFailure("adapter: not 200") }
        }

        // 0: the header from a token read once; 1: a fresh token read by hand each time; 2: the adapter.
        var latencies: [[UInt64]] = [[], [], []]
        var cpu = [0.0, 0.0, 0.0]
        for round in 0..<(warmup + rounds) {
            // Rotate the order, so that none always meets a warmer connection.
            for slot in 0..<3 {
                let variant = (slot + round) % 3
                let before = processCPUSeconds()
                let start = monotonicNanoseconds()
                switch variant {
                case 0: try await byHand()
                case 1: try await byHandFresh()
                default: try await throughAdapter()
                }
                let elapsed = monotonicNanoseconds() - start
                let used = processCPUSeconds() - before
                guard round >= warmup else { continue }
                latencies[variant].append(elapsed)
                cpu[variant] += used
            }
        }
        let medians = latencies.map { (percentile($0.sorted(), 0.5) ?? 0) / 1000 }
        return [
            "rounds": rounds,
            "hand_median_ms": medians[0],
            "hand_fresh_median_ms": medians[1],
            "adapter_median_ms": medians[2],
            "hand_cpu_ms_per_request": cpu[0] * 1000 / Double(rounds),
            "hand_fresh_cpu_ms_per_request": cpu[1] * 1000 / Double(rounds),
            "adapter_cpu_ms_per_request": cpu[2] * 1000 / Double(rounds),
        ]
    }

    struct BenchFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
