// swift-tools-version:6.2

import PackageDescription

// The PostgreSQL section of the benchmarks (Scripts/bench-postgres): PostgresStore's get and set
// side by side with a bare postgres-nio SELECT by primary key and a bare upsert on the same server
// (the round-trip floors), get latency at 1,000 and at 1,000,000 rows, and one refresh across
// processes. A package of its own, so that the main bench (Benchmarks/) never builds postgres-nio.
let package = Package(
    name: "TokenVaultPostgresBenchmarks",
    products: [
        .executable(name: "tokenvault-postgres-bench", targets: ["tokenvault-postgres-bench"])
    ],
    dependencies: [
        .package(name: "TokenVault", path: "../../", traits: ["Postgres"]),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        .executableTarget(
            name: "tokenvault-postgres-bench",
            dependencies: [
                .product(name: "TokenVault", package: "TokenVault"),
                .product(name: "TokenVaultPostgres", package: "TokenVault"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: [
                .enableUpcomingFeature("ExistentialAny"),
                .enableUpcomingFeature("MemberImportVisibility"),
                .enableUpcomingFeature("InternalImportsByDefault"),
            ]
        )
    ]
)
