#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// What a Swift developer gets who depends on TokenVault: a new package in a scratch directory,
/// with a path dependency on this one, naming only the `TokenVault` library (and, for its tests,
/// `TokenVaultTesting`). It must resolve swift-log alone (no postgres-nio, NIO, BoringSSL,
/// async-http-client, jwt-kit, swift-crypto or swift-argument-parser: they sit behind package traits), compile neither the git helper nor
/// migration, and its own tests must pass: the conformance suite run on a store the developer
/// wrote, and refresh, rejection, 401 and 5xx tests against the in-process fake token endpoint.
///
/// It runs `swift package resolve`, `swift build` and `swift test` for real, so it takes a few
/// minutes; Scripts/test runs it with the command-line tests, away from the time-bound ones.
@Suite(.timeLimit(.minutes(20))) struct DependentPackageTests {
    @Test func aPackageNamingOnlyTokenVaultBuildsLeanAndTestsItsOwnStore() throws {
        let root = PackageFiles.path("")
        let identity = URL(fileURLWithPath: root).lastPathComponent.lowercased()
        let scratch = try TemporaryDirectory()
        let package = scratch.file("NoteApp")
        try write(Self.manifest(root: root, identity: identity), to: "\(package)/Package.swift")
        try write(Self.store, to: "\(package)/Sources/NoteStore/NoteStore.swift")
        try write(Self.tests, to: "\(package)/Tests/NoteStoreTests/NoteStoreTests.swift")

        let resolve = try swift(["package", "resolve"], in: package)
        #expect(resolve.status == 0, "\(resolve)")
        let resolved = try String(contentsOfFile: "\(package)/Package.resolved", encoding: .utf8)
        let identities = resolved.split(separator: "\n").compactMap { line -> String? in
            guard line.contains("\"identity\"") else { return nil }
            return line.split(separator: "\"").dropFirst(3).first.map(String.init)
        }
        #expect(identities == ["swift-log"], "the dependent resolved \(identities)")

        let test = try swift(["test"], in: package)
        #expect(test.status == 0, "\(test)")
        // Every case of the conformance suite, and the three endpoint tests, ran and passed.
        #expect(test.stdout.contains("Test conformance(_:) with 11 test cases passed"), "\(test.stdout.suffix(3000))")
        for name in ["aStaleTokenIsRefreshedOnce", "a401RefreshesOnceAndRetries", "aRevokedGrantAsksForANewLogin"] {
            #expect(test.stdout.contains("Test \(name)() passed"), "\(name): \(test.stdout.suffix(3000))")
        }

        // Nothing of what the dependent does not use was compiled: no object file or module of
        // it. (SwiftPM plans every target of a dependency and leaves an empty `<Target>.build`
        // directory with a file map for each; only what a used product needs is compiled.)
        let unused = [
            "TokenVaultGit", "TokenVaultMigration", "TokenVaultPostgres", "PostgresNIO", "NIOCore", "ArgumentParser", "VaultCLI",
            "TokenVaultURLSession", "TokenVaultAsyncHTTPClient", "AsyncHTTPClient",
            // ID-token verification (issue 31 point 6): behind the IDTokenVerification trait.
            "TokenVaultIDToken", "JWTKit", "Crypto", "CryptoExtras", "X509",
        ]
        let artifacts = try FileManager.default.subpathsOfDirectory(atPath: "\(package)/.build").filter {
            $0.hasSuffix(".o") || $0.hasSuffix(".swiftmodule")
        }
        let compiled = artifacts.filter { path in
            unused.contains { path.contains("/\($0).build/") || path.hasSuffix("/\($0).o") || path.hasSuffix("/\($0).swiftmodule") }
        }
        #expect(compiled.isEmpty, "the dependent compiled \(compiled.prefix(10))")
        // The control: the library itself was compiled, in the same layout.
        #expect(artifacts.contains { $0.hasSuffix("/TokenVault.swiftmodule") }, "no TokenVault module among \(artifacts.prefix(20))")
        #expect(artifacts.contains { $0.contains("/TokenVault.build/") && $0.hasSuffix(".o") }, "no TokenVault object file")
    }

    private func write(_ text: String, to path: String) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    private func swift(_ arguments: [String], in directory: String) throws -> ChildResult {
        var environment = ProcessInfo.processInfo.environment
        // The dependent's build is its own: not warnings-as-errors, not a sanitized one.
        environment["TOKENVAULT_WERROR"] = nil
        let swift = (environment["PATH"] ?? "/usr/bin").split(separator: ":")
            .map { "\($0)/swift" }.first { FileManager.default.isExecutableFile(atPath: $0) } ?? "/usr/bin/swift"
        return try ChildProcess.run(swift, arguments + ["--package-path", directory], environment: environment)
    }

    static func manifest(root: String, identity: String) -> String {
        """
        // swift-tools-version:6.2
        import PackageDescription

        let package = Package(
            name: "NoteApp",
            dependencies: [.package(path: "\(root)")],
            targets: [
                .target(name: "NoteStore", dependencies: [.product(name: "TokenVault", package: "\(identity)")]),
                .testTarget(
                    name: "NoteStoreTests",
                    dependencies: [
                        "NoteStore",
                        .product(name: "TokenVault", package: "\(identity)"),
                        .product(name: "TokenVaultTesting", package: "\(identity)"),
                    ]),
            ]
        )

        """
    }

    static let store = """
        import Foundation
        import TokenVault

        /// A store of the developer's own: a dictionary behind an actor.
        public actor NoteStore: CredentialStore {
            private var entries: [CredentialKey: Data] = [:]
            public init() {}
            public nonisolated var backend: BackendKind { .custom("note-store") }
            public func load(_ key: CredentialKey) async throws -> Data? { entries[key] }
            public func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) async throws {
                entries[key] = secret
            }
            public func delete(_ key: CredentialKey) async throws -> Bool { entries.removeValue(forKey: key) != nil }
            public func keys(service: String?) async throws -> [CredentialKey] {
                entries.keys.filter { service == nil || $0.service == service }.sorted()
            }
        }

        """

    static let tests = """
        import Foundation
        import NoteStore
        import Testing
        import TokenVault
        import TokenVaultTesting

        @Test(arguments: StoreConformance.cases)
        func conformance(_ check: StoreConformance.Case) async throws {
            try await check.run(on: NoteStore())
        }

        @Test func aStaleTokenIsRefreshedOnce() async throws {
            let endpoint = FakeTokenEndpoint()
            let vault = Vault(store: NoteStore())
            let key = try CredentialKey(service: "api", account: "me")
            try await vault.saveToken(try await endpoint.issueToken(expiresIn: 0), for: key, registration: try endpoint.registration())
            await endpoint.failNext(with: [503])  // a transient failure, retried
            async let first = vault.freshToken(for: key, client: endpoint.client)
            async let second = vault.freshToken(for: key, client: endpoint.client)
            let (a, b) = try await (first, second)
            #expect(a.accessToken == b.accessToken)
            #expect(await endpoint.refreshCount == 1)
            #expect(await endpoint.requestCount == 2)
            #expect(await endpoint.resourceStatus(for: a.accessToken) == 200)
        }

        @Test func a401RefreshesOnceAndRetries() async throws {
            let endpoint = FakeTokenEndpoint()
            let vault = Vault(store: NoteStore())
            let key = try CredentialKey(service: "api", account: "me")
            let issued = try await endpoint.issueToken()
            try await vault.saveToken(issued, for: key, registration: try endpoint.registration())
            await endpoint.invalidateAccessTokens()
            #expect(await endpoint.resourceStatus(for: issued.accessToken) == 401)
            let renewed = try await vault.refreshAfterRejection(of: issued.accessToken, for: key, client: endpoint.client)
            let again = try await vault.refreshAfterRejection(of: issued.accessToken, for: key, client: endpoint.client)
            #expect(renewed.accessToken == again.accessToken)
            #expect(await endpoint.resourceStatus(for: renewed.accessToken) == 200)
            #expect(await endpoint.refreshCount == 1)
        }

        @Test func aRevokedGrantAsksForANewLogin() async throws {
            let endpoint = FakeTokenEndpoint()
            let vault = Vault(store: NoteStore())
            let key = try CredentialKey(service: "api", account: "me")
            try await vault.saveToken(try await endpoint.issueToken(expiresIn: 0), for: key, registration: try endpoint.registration())
            await endpoint.revokeAll()
            do {
                _ = try await vault.freshToken(for: key, client: endpoint.client)
                Issue.record("a revoked grant was refreshed")
            } catch let error as VaultError {
                #expect(error.code == .reauthenticationRequired, "\\(error)")
            }
            #expect(await endpoint.refreshCount == 0)
        }

        """
}
#endif
