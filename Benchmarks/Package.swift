// swift-tools-version:6.2

import PackageDescription

// The TokenVault side of Scripts/bench (W1, scale, multi-process writers and the fsync floor),
// through the public API only: a package of its own that depends on TokenVault as any client
// would, so the root manifest holds the products alone (as swift-log's Benchmarks/ does).
// Scripts/bench builds it in release mode; bench.py and peers.py drive it and the Python peers.
let package = Package(
    name: "TokenVaultBenchmarks",
    products: [
        .executable(name: "tokenvault-bench", targets: ["tokenvault-bench"])
    ],
    dependencies: [
        // The CLI trait builds the `vault` command, which the benchmark times beside the peers.
        .package(name: "TokenVault", path: "../", traits: ["CLI"])
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
            ],
            swiftSettings: [
                .enableUpcomingFeature("ExistentialAny"),
                .enableUpcomingFeature("MemberImportVisibility"),
                .enableUpcomingFeature("InternalImportsByDefault"),
            ]
        )
    ]
)
