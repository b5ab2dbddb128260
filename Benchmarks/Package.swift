// swift-tools-version:6.2

import PackageDescription

// The TokenVault side of Scripts/bench (W1, scale, multi-process writers and the fsync floor),
// through the public API only: a package of its own that depends on TokenVault as any client
// would, so the root manifest holds the products alone (as swift-log's Benchmarks/ does).
// Scripts/bench builds it in release mode; bench.py and peers.py drive it and the Python peers.
let package = Package(
    name: "TokenVaultBenchmarks",
    products: [
        .executable(name: "tokenvault-bench", targets: ["tokenvault-bench"]),
        // The agent section's memory floor: a Swift program linked as `vault` is, that waits.
        .executable(name: "swift-rss-floor", targets: ["swift-rss-floor"]),
    ],
    dependencies: [
        // The CLI trait builds the `vault` command, which the benchmark times beside the peers;
        // AsyncHTTPClientAdapter, the AsyncHTTPClient adapter whose DPoP call the bench measures.
        .package(name: "TokenVault", path: "../", traits: ["CLI", "AsyncHTTPClientAdapter"]),
        // The AsyncHTTPClient adapter's requests are built and read with these (as the root's).
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.81.0"),
    ],
    targets: [
        .executableTarget(
            name: "tokenvault-bench",
            dependencies: [
                .product(name: "TokenVault", package: "TokenVault"),
                // The authorized-request benchmark goes through the URLSession adapter.
                .product(name: "TokenVaultURLSession", package: "TokenVault"),
                // The DPoP benchmark (issue 32) signs with it; the CLI trait enables DPoP.
                .product(name: "TokenVaultDPoP", package: "TokenVault"),
                // ... and its resource call goes through each adapter, AsyncHTTPClient's too.
                .product(name: "TokenVaultAsyncHTTPClient", package: "TokenVault"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: [
                .enableUpcomingFeature("ExistentialAny"),
                .enableUpcomingFeature("MemberImportVisibility"),
                .enableUpcomingFeature("InternalImportsByDefault"),
            ]
        ),
        .executableTarget(name: "swift-rss-floor"),
    ]
)
