// swift-tools-version:6.2

import PackageDescription

let package = Package(
    name: "TokenVault",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "TokenVault", targets: ["TokenVault"]),
        .executable(name: "vault", targets: ["vault"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        // System libraries. Both are imported `internal` only: no C type reaches the public API.
        .systemLibrary(
            name: "CLibSecret",
            pkgConfig: "libsecret-1",
            providers: [.apt(["libsecret-1-dev"])]
        ),
        .systemLibrary(
            name: "CSodium",
            pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"])]
        ),
        .target(
            name: "TokenVault",
            dependencies: [
                "CLibSecret",
                "CSodium",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "vault",
            dependencies: [
                "TokenVault",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // A child process for the encrypted file tests (crash, multi-process, disk full). Not a
        // product: `swift build` puts it next to the test bundle, where the tests look for it.
        .executableTarget(
            name: "vault-file-stress",
            dependencies: ["TokenVault"]
        ),
        // A child process for the Secret Service tests: the store always uses its process's session
        // bus, so tests of a locked, frozen or vanished keyring run it on a private bus. Not a product.
        .executableTarget(
            name: "secret-service-check",
            dependencies: ["TokenVault"]
        ),
        // Writes the token shapes that OAuth tutorials leave in UserDefaults, with Foundation's
        // own UserDefaults, for the migration tests and Scripts/demo. Not a product.
        .executableTarget(
            name: "tutorial-defaults",
            dependencies: ["TokenVault"]
        ),
        // An example OAuth client (device grant + refresh over URLSession) that keeps its tokens in
        // the vault. Not a product: it shows how a client depends on TokenVault.
        .executableTarget(
            name: "oauth-example",
            dependencies: [
                "TokenVault",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // Test helper for the cross-process refresh tests. Not a product.
        .executableTarget(
            name: "refresh-stress",
            dependencies: ["TokenVault"]
        ),
        // The TokenVault side of Scripts/bench: W1, scale, multi-process writers and the fsync
        // floor, through the public API. Not a product: Scripts/bench builds and runs it.
        .executableTarget(
            name: "tokenvault-bench",
            dependencies: ["TokenVault"]
        ),
        // The fuzz properties (Fuzz/FuzzHarness), shared by the libFuzzer targets and the regression
        // tests that replay their fixtures. Not a product; uses only TokenVault's public API.
        .target(
            name: "FuzzHarness",
            dependencies: ["TokenVault", "CSodium"],
            path: "Fuzz/FuzzHarness"
        ),
        .testTarget(
            name: "TokenVaultTests",
            dependencies: [
                "TokenVault", "FuzzHarness", "vault", "tutorial-defaults", "vault-file-stress", "secret-service-check",
            ],
            resources: [.copy("Fixtures")]
        ),
        .testTarget(
            name: "vaultTests",
            dependencies: ["TokenVault", "vault", "tutorial-defaults"]
        ),
        // Refresh tests against the real OAuth server (Tests/oauth-server) that Scripts/test starts,
        // across processes. Depends on the executables so that they are built for it to run.
        .testTarget(
            name: "RefreshServerTests",
            dependencies: ["TokenVault", "oauth-example", "refresh-stress"]
        ),
    ]
)

// Fuzz targets (libFuzzer) are built only by Scripts/fuzz, which sets TOKENVAULT_FUZZ: they have
// no `main` of their own and link only with -sanitize=fuzzer. Their seeds (Fuzz/<name>/corpus)
// are data, not sources. FuzzSeeds writes those seeds (`Scripts/fuzz seeds`).
if Context.environment["TOKENVAULT_FUZZ"] != nil {
    for name in ["FuzzTokenResponse", "FuzzVaultFile", "FuzzMigrationDetector"] {
        package.products.append(.executable(name: name, targets: [name]))
        package.targets.append(
            .executableTarget(
                name: name,
                dependencies: ["FuzzHarness"],
                path: "Fuzz/\(name)",
                exclude: ["corpus"],
                swiftSettings: [.unsafeFlags(["-parse-as-library"])]
            )
        )
    }
    package.targets.append(
        .executableTarget(name: "FuzzSeeds", dependencies: ["TokenVault", "FuzzHarness"], path: "Fuzz/FuzzSeeds"))
}

// Strict settings, applied to every Swift target in one place (as swift-log does).
for target in package.targets where [.executable, .test, .regular].contains(target.type) {
    var settings = target.swiftSettings ?? []
    // Require `any` for existential types (SE-0335).
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    // Only what a file imports is visible in it (SE-0444).
    settings.append(.enableUpcomingFeature("MemberImportVisibility"))
    // Every public type says whether it is Sendable.
    settings.append(.unsafeFlags(["-Xfrontend", "-require-explicit-sendable"]))
    // CI builds with warnings as errors; local builds keep warnings as warnings.
    if Context.environment["TOKENVAULT_WERROR"] != nil {
        settings.append(.treatAllWarnings(as: .error))
    }
    target.swiftSettings = settings
}
