// swift-tools-version:6.2

import PackageDescription

// Fuzzing TokenVault, as a package of its own that depends on TokenVault's public API (as the
// benchmarks do), so the root manifest has no fuzz targets, no environment branch and no unsafe
// flags.
//
// - FuzzHarness: the properties each fuzz target checks.
// - FuzzTokenResponse, FuzzVaultFile, FuzzMigrationDetector, FuzzAgentProtocol: libFuzzer entry points. Scripts/fuzz
//   builds them with -sanitize=fuzzer,address and -DTOKENVAULT_LIBFUZZER; any other build makes
//   them small programs that say so, so that `swift test` here can build every target.
// - FuzzSeeds: writes the seed corpora (`Scripts/fuzz seeds`).
// - FuzzRegressionTests: replays the inputs worth keeping through the same properties
//   (`swift test --package-path Fuzz`, which Scripts/test runs).
let fuzzTargets = ["FuzzTokenResponse", "FuzzVaultFile", "FuzzMigrationDetector", "FuzzAgentProtocol"]

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "TokenVaultFuzz",
    products: fuzzTargets.map { .executable(name: $0, targets: [$0]) } + [
        .executable(name: "FuzzSeeds", targets: ["FuzzSeeds"])
    ],
    dependencies: [
        .package(name: "TokenVault", path: "../")
    ],
    targets: [
        // libsodium for the harness, which forges sealed records as an attacker with the key
        // would. A module of its own name: TokenVault's CSodium is not a product.
        .systemLibrary(name: "CSodiumFuzz", path: "CSodiumFuzz", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .target(
            name: "FuzzHarness",
            dependencies: [
                .product(name: "TokenVault", package: "TokenVault"), .product(name: "TokenVaultMigration", package: "TokenVault"),
                "CSodiumFuzz",
            ],
            path: "FuzzHarness",
            swiftSettings: strict
        ),
        .executableTarget(
            name: "FuzzSeeds",
            dependencies: [.product(name: "TokenVault", package: "TokenVault"), "FuzzHarness"],
            path: "FuzzSeeds",
            swiftSettings: strict
        ),
        .testTarget(
            name: "FuzzRegressionTests",
            dependencies: [
                .product(name: "TokenVault", package: "TokenVault"), .product(name: "TokenVaultMigration", package: "TokenVault"),
                "FuzzHarness",
            ],
            resources: [.copy("Fixtures")],
            swiftSettings: strict
        ),
    ]
        + fuzzTargets.map { name in
            .executableTarget(
                name: name,
                dependencies: ["FuzzHarness"],
                path: name,
                // Seeds are data, not sources (FuzzTokenResponse's are the unit tests' responses).
                exclude: name == "FuzzTokenResponse" ? [] : ["corpus"],
                // One entry point in a file not named main.swift: it is a library file.
                swiftSettings: strict + [.unsafeFlags(["-parse-as-library"])]
            )
        }
)
