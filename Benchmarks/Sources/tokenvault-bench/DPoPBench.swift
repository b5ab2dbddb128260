import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import TokenVault
import TokenVaultAsyncHTTPClient
import TokenVaultDPoP
import TokenVaultURLSession

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `tokenvault-bench dpop` (issue 32):
/// - proofs signed per second in process, on one thread (one core), for ES256 and EdDSA: the
///   whole `DPoPKey.proof` (claims, `ath`, base64url, signature), for `seconds` each;
/// - proofs signed per second through the vault, as the agent signs for its clients: each one
///   `Vault.dpopProof` (the entry read and opened, its key loaded, a proof signed), on one thread;
/// - a resource call through each adapter, URLSession's and AsyncHTTPClient's, with a DPoP-bound
///   token (a proof per request, verified by the test server with joserfc) against the same call
///   with a Bearer token, both read from the vault each time, interleaved in one process against
///   the test server's `/api/data`.
/// Beside them, the client's own part of each call: the header fields the adapters set
/// (`Vault.authorizationHeaders`), made without sending anything.
/// The Bearer token response comes on stdin; the DPoP-bound one is got here (password grant for
/// `--dpop-user`, with a proof). Both live an hour: no refresh happens.
enum DPoPBench {
    static func run(
        path: String, keyFile: String, url: URL, tokenEndpoint: URL, dpopUser: String, bearerResponse: Data, rounds: Int, warmup: Int,
        seconds: Double
    ) async throws -> [String: Any] {
        DPoP.install()
        var result: [String: Any] = ["rounds": rounds]
        for algorithm in [DPoPAlgorithm.es256, .edDSA] {
            let key = try DPoPKey.generate(algorithm)
            var count = 0
            let cpuBefore = processCPUSeconds()
            let start = monotonicNanoseconds()
            let end = start + UInt64(seconds * 1e9)
            while monotonicNanoseconds() < end {
                for _ in 0..<100 {
                    _ = try key.proof(method: "GET", url: url, nonce: "bench-nonce", accessToken: "bench.access.token")
                }
                count += 100
            }
            let wall = Double(monotonicNanoseconds() - start) / 1e9
            let cpu = processCPUSeconds() - cpuBefore
            result["proofs_per_second_\(algorithm.name)"] = Double(count) / wall
            result["proofs_per_cpu_second_\(algorithm.name)"] = Double(count) / cpu
        }

        let store = try await EncryptedFileStore.open(path: path, keySource: .keyFile(keyFile))
        let vault = Vault(store: store)
        let registration = try ClientRegistration(tokenEndpoint: tokenEndpoint, clientID: "tokenvault-example")
        let bearerKey = try CredentialKey(service: "bench-dpop", account: "bearer")
        try await vault.saveToken(try OAuthToken(tokenResponse: bearerResponse), for: bearerKey, registration: registration)
        let dpopKey = try DPoPKey.generate(.es256)
        let dpopToken = try await TokenEndpointClient(dpopKey: dpopKey).requestToken(
            [("grant_type", "password"), ("username", dpopUser), ("password", "test-password")], registration: registration)
        guard dpopToken.tokenType == "DPoP" else { throw Authorized.BenchFailure("the server did not bind the token to the key") }
        let boundKey = try CredentialKey(service: "bench-dpop", account: "dpop")
        try await vault.saveToken(dpopToken, for: boundKey, registration: registration, dpopKey: dpopKey)
        // The client's own part of a call, without the network: the header fields the adapter sets
        // (the vault read, and for DPoP the key loaded from the entry and a proof signed), Bearer
        // and DPoP interleaved.
        var making: [[UInt64]] = [[], []]
        for round in 0..<(warmup + rounds) {
            for slot in 0..<2 {
                let variant = (slot + round) % 2
                let start = monotonicNanoseconds()
                let headers = try await vault.authorizationHeaders(for: variant == 0 ? bearerKey : boundKey, method: "GET", url: url)
                let elapsed = monotonicNanoseconds() - start
                guard headers.isDPoP == (variant == 1) else { throw Authorized.BenchFailure("the headers' scheme is not the entry's") }
                if round >= warmup { making[variant].append(elapsed) }
            }
        }
        result["bearer_headers_median_us"] = percentile(making[0].sorted(), 0.5) ?? 0
        result["dpop_headers_median_us"] = percentile(making[1].sorted(), 0.5) ?? 0

        // Proofs through the vault, as the agent makes them for its clients (Vault.dpopProof):
        // every one reads the entry and loads its key before it signs.
        do {
            var count = 0
            let cpuBefore = processCPUSeconds()
            let start = monotonicNanoseconds()
            let end = start + UInt64(seconds * 1e9)
            while monotonicNanoseconds() < end {
                for _ in 0..<20 {
                    _ = try await vault.dpopProof(for: boundKey, method: "GET", url: url, accessToken: dpopToken.accessToken)
                }
                count += 20
            }
            result["vault_proofs_per_second"] = Double(count) / (Double(monotonicNanoseconds() - start) / 1e9)
            result["vault_proofs_per_cpu_second"] = Double(count) / (processCPUSeconds() - cpuBefore)
        }

        let authorizers = [TokenAuthorizer(vault: vault, key: bearerKey), TokenAuthorizer(vault: vault, key: boundKey)]
        let session = URLSession(configuration: .ephemeral)
        try await interleaved(into: &result, prefix: "", rounds: rounds, warmup: warmup) { variant in
            let (_, response) = try await session.data(for: URLRequest(url: url), authorizedBy: authorizers[variant])
            return (response as? HTTPURLResponse)?.statusCode ?? 0
        }
        // The same calls through the AsyncHTTPClient adapter, in the same process and run (its own
        // client on NIO's shared event loops, its body read whole as URLSession's is).
        let httpClient = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
        do {
            try await interleaved(into: &result, prefix: "ahc_", rounds: rounds, warmup: warmup) { variant in
                let response = try await httpClient.execute(
                    HTTPClientRequest(url: url.absoluteString), authorizedBy: authorizers[variant], timeout: .seconds(30))
                _ = try await response.body.collect(upTo: 1 << 20)
                return Int(response.status.code)
            }
        } catch {
            try? await httpClient.shutdown()
            throw error
        }
        try await httpClient.shutdown()
        return result
    }

    /// `rounds` calls with the Bearer entry (variant 0) and with the DPoP-bound one (variant 1),
    /// interleaved (the order turns each round, so that neither always meets a warmer connection)
    /// after `warmup` rounds: each one's median wall time and CPU per call, under `prefix`.
    private static func interleaved(
        into result: inout [String: Any], prefix: String, rounds: Int, warmup: Int, _ call: (Int) async throws -> Int
    ) async throws {
        var latencies: [[UInt64]] = [[], []]
        var cpu = [0.0, 0.0]
        for round in 0..<(warmup + rounds) {
            for slot in 0..<2 {
                let variant = (slot + round) % 2
                let before = processCPUSeconds()
                let start = monotonicNanoseconds()
                let status = try await call(variant)
                let elapsed = monotonicNanoseconds() - start
                let used = processCPUSeconds() - before
                guard status == 200 else {
                    throw Authorized.BenchFailure("\(prefix.isEmpty ? "URLSession" : "AsyncHTTPClient") \(variant == 0 ? "Bearer" : "DPoP") request: \(status), not 200")
                }
                guard round >= warmup else { continue }
                latencies[variant].append(elapsed)
                cpu[variant] += used
            }
        }
        let medians = latencies.map { (percentile($0.sorted(), 0.5) ?? 0) / 1000 }
        result[prefix + "bearer_median_ms"] = medians[0]
        result[prefix + "dpop_median_ms"] = medians[1]
        result[prefix + "bearer_cpu_ms_per_request"] = cpu[0] * 1000 / Double(rounds)
        result[prefix + "dpop_cpu_ms_per_request"] = cpu[1] * 1000 / Double(rounds)
    }
}
