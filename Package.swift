// swift-tools-version:6.2

import PackageDescription

// TokenVault builds on Linux only: the Secret Service backend is libsecret over D-Bus, and the
// encrypted file relies on Linux's flock, fdatasync and /proc. No `platforms:` entry is declared,
// and Sources/TokenVault/Internal/SupportedPlatform.swift stops other systems with one `#error`.
//
// The root package holds the products and their tests only. Benchmarks/ and Fuzz/ are packages
// of their own that depend on this one (`swift build --package-path Benchmarks`), and the example
// client lives in Examples/.

// Traits (SE-0450) keep what a dependent does not use out of its build and out of its
// resolution: SwiftPM resolves no package that only a disabled trait's targets use (measured: a
// package naming only the `TokenVault` product resolves swift-log alone, where it resolved 14
// packages, postgres-nio, NIO, BoringSSL and swift-argument-parser among them, before the traits).
// None is on by default. This repository's scripts pass them; see the README's "Building".
let package = Package(
    name: "TokenVault",
    // MARK: - Products
    products: [
        // The library: `Vault`, `CredentialStore` and its backends, `OAuthToken`, the OAuth client.
        .library(name: "TokenVault", targets: ["TokenVault"]),
        // For users' tests (as swift-log ships InMemoryLogging): the conformance suite every
        // CredentialStore passes, and a token endpoint in process (no socket) for refresh, rejection
        // and 401 tests. `MemoryStore` itself is in TokenVault (TOKEN_VAULT_BACKEND=memory opens it).
        .library(name: "TokenVaultTesting", targets: ["TokenVaultTesting"]),
        // Moving tokens out of plain-defaults plists (`vault migrate` and its library API).
        .library(name: "TokenVaultMigration", targets: ["TokenVaultMigration"]),
        // The vault as a git credential helper (`vault git-credential` is a thin shell around it).
        .library(name: "TokenVaultGit", targets: ["TokenVaultGit"]),
        // Authorized requests and the token endpoint's transport over URLSession
        // (FoundationNetworking, which TokenVault itself does not import).
        .library(name: "TokenVaultURLSession", targets: ["TokenVaultURLSession"]),
        // Verified OpenID Connect ID tokens (signature from the issuer's JWKS, iss, aud, exp, iat,
        // nonce); needs the IDTokenVerification trait (jwt-kit, swift-crypto). Issue 31 point 6.
        .library(name: "TokenVaultIDToken", targets: ["TokenVaultIDToken"]),
        // The same over AsyncHTTPClient; needs the AsyncHTTPClientAdapter trait (async-http-client, NIO).
        .library(name: "TokenVaultAsyncHTTPClient", targets: ["TokenVaultAsyncHTTPClient"]),
        // DPoP (RFC 9449) signing with swift-crypto; needs the DPoP trait. (issue 32)
        .library(name: "TokenVaultDPoP", targets: ["TokenVaultDPoP"]),
        // The PostgreSQL backend for fleets; needs the Postgres trait (postgres-nio, NIO, BoringSSL).
        .library(name: "TokenVaultPostgres", targets: ["TokenVaultPostgres"]),
        // The command for administrators; needs the CLI trait. It links neither postgres-nio nor
        // swift-crypto nor jwt-kit: a command that needs one of them (a postgres backend, a DPoP
        // proof, an ID-token check, `login`, `agent`) is handed over to `vault-full` (below),
        // installed beside it.
        .executable(name: "vault", targets: ["vault"]),
        // The same command with the PostgreSQL backend, the DPoP signer and the ID-token verifier.
        .executable(name: "vault-full", targets: ["vault-full"]),
    ],
    traits: [
        .trait(name: "Postgres", description: "Builds the TokenVaultPostgres product (postgres-nio, NIO, BoringSSL)."),
        // issue 32: swift-crypto is already in the graph through postgres-nio, so CLI pays nothing to build it.
        .trait(name: "DPoP", description: "Builds the TokenVaultDPoP product: DPoP proofs signed with swift-crypto."),
        // Issue 31 point 6 (ID-token verification): its own trait, so that a TokenVault-only
        // dependent resolves neither jwt-kit nor swift-crypto.
        .trait(
            name: "IDTokenVerification",
            description: "Builds the TokenVaultIDToken product (jwt-kit, swift-crypto): verified ID tokens."),
        .trait(
            name: "CLI", description: "Builds the vault and vault-full commands (swift-argument-parser).",
            enabledTraits: ["Postgres", "DPoP", "IDTokenVerification"]),
        .trait(
            name: "AsyncHTTPClientAdapter",
            description: "Builds the TokenVaultAsyncHTTPClient product (async-http-client, NIO)."),
        .trait(
            name: "Integration",
            description: "Links the integration tests (Tests/Integration) into the test bundle. Scripts/test, which starts their daemons, enables it.",
            enabledTraits: ["CLI", "AsyncHTTPClientAdapter"]
        ),
        .default(enabledTraits: []),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        // Only with the CLI trait: the `vault` command.
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        // Only with the Postgres trait: TokenVaultPostgres and `vault-full`.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // Only with the Postgres trait, already in the graph through postgres-nio: NIOTLS, whose
        // handshake event TokenVaultPostgres waits for before it checks the host name (issue 34).
        .package(url: "https://github.com/apple/swift-nio", from: "2.81.0"),
        // Only with the AsyncHTTPClientAdapter trait: TokenVaultAsyncHTTPClient.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        // Only with the DPoP trait: TokenVaultDPoP (issue 32).
        .package(url: "https://github.com/apple/swift-crypto", "3.9.0"..<"5.0.0"),
        // Only with the IDTokenVerification trait: TokenVaultIDToken (issue 31 point 6). jwt-kit
        // brings swift-crypto (RSA and ECDSA signature checks) and swift-certificates.
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.8.0"),
    ]
        // `swift package generate-documentation` (the DocC catalog in Sources/TokenVault/Docs.docc):
        // a command plugin, which no trait can hold back, so it is declared only for Scripts/docs.
        + (Context.environment["TOKENVAULT_DOCS"] != nil
            ? [.package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0")] : []),
    targets: []
)

// MARK: - Library

package.targets += [
    .target(
        name: "TokenVault",
        dependencies: [
            "CCurl",
            "CLibSecret",
            "CPrefetch",
            "CSodium",
            // Its files, locks, sockets, inotify and terminals go through the system layer.
            "TokenVaultSystem",
            .product(name: "Logging", package: "swift-log"),
        ]
    ),
    // The system layer (issue 29 point 2): the one module that calls libc for files, locks,
    // sockets, inotify and terminals, with one EINTR policy and swift-nio's rule for close. Not a
    // product: its API is `package`, for the targets that make such calls (TokenVault,
    // TokenVaultMigration, TokenVaultPostgres, VaultCLI, vault, vault-full).
    // Tests/TokenVaultTests/SystemLayerTests fails on such a call anywhere else in Sources.
    .target(name: "TokenVaultSystem"),
    // libsecret and GLib through dlopen, on first use of the Secret Service (issue 17): a C target
    // that declares the few GLib types TokenVault uses and resolves libsecret-1.so.0 at run time,
    // so nothing links them and a process that never uses the Secret Service never maps them.
    // Building needs no libsecret or GLib headers; running the Secret Service backend needs the
    // libsecret-1-0 package (without it, that backend is a clear `backendUnavailable`).
    .target(name: "CLibSecret"),
    // libcurl through dlopen, on the first HTTP request (issue 17): the token endpoint client's
    // transport. Nothing links libcurl, so a command that sends no request never maps it and its
    // ~28 libraries, and a package that depends on TokenVault builds with --static-swift-stdlib
    // without libcurl.so (FoundationNetworking, which named -lcurl, is no longer imported).
    // Running a refresh or a login needs the libcurl4 package.
    .target(name: "CCurl"),
    // One inline function, __builtin_prefetch, for the vault's index (Swift cannot spell it).
    .target(name: "CPrefetch"),
    // The test kit for users' tests: StoreConformance and FakeTokenEndpoint (Swift Testing).
    .target(name: "TokenVaultTesting", dependencies: ["TokenVault"]),
    // Migration out of plain-defaults plists: a module of its own, so that a package that uses
    // only TokenVault does not compile it.
    .target(name: "TokenVaultMigration", dependencies: ["TokenVault", "TokenVaultSystem"]),
    // The git credential helper, likewise a module of its own.
    .target(name: "TokenVaultGit", dependencies: ["TokenVault"]),
    // System library, imported `internal` only: no C type reaches the public API.
    .systemLibrary(
        name: "CSodium",
        pkgConfig: "libsodium",
        providers: [.apt(["libsodium-dev"])]
    ),
]

// MARK: - HTTP adapters

package.targets += [
    // TokenAuthorizer over URLSession (`data(for:authorizedBy:)`) and URLSessionTokenTransport.
    // A module of its own: FoundationNetworking links libcurl, which TokenVault opens only on demand.
    .target(name: "TokenVaultURLSession", dependencies: ["TokenVault"]),
    // TokenAuthorizer over AsyncHTTPClient (`execute(_:authorizedBy:timeout:)`) and
    // AsyncHTTPClientTokenTransport. Empty without the AsyncHTTPClientAdapter trait, and then
    // async-http-client is neither resolved nor built.
    .target(
        name: "TokenVaultAsyncHTTPClient",
        dependencies: [
            "TokenVault",
            .product(name: "AsyncHTTPClient", package: "async-http-client", condition: .when(traits: ["AsyncHTTPClientAdapter"])),
        ]
    ),
]

// MARK: - DPoP (issue 32)

package.targets += [
    // The curve code of DPoP: swift-crypto's P-256 and Ed25519, registered with the core by
    // `DPoP.install()`. Empty without the DPoP trait, and then swift-crypto is not built.
    .target(
        name: "TokenVaultDPoP",
        dependencies: [
            "TokenVault",
            .product(name: "Crypto", package: "swift-crypto", condition: .when(traits: ["DPoP"])),
        ]
    )
]

// MARK: - ID tokens (issue 31 point 6)

package.targets += [
    // IDTokenVerifier: an ID token's signature checked by jwt-kit against the issuer's JWKS (fetched
    // over the vault's TokenTransport, cached, refetched once on an unknown kid), then iss, aud,
    // exp, iat and nonce. Empty without the IDTokenVerification trait, and then jwt-kit is neither
    // resolved nor built. Kept out of TokenVault so that a cold `vault get` never runs it.
    .target(
        name: "TokenVaultIDToken",
        dependencies: [
            "TokenVault",
            .product(name: "JWTKit", package: "jwt-kit", condition: .when(traits: ["IDTokenVerification"])),
        ]
    )
]

// MARK: - PostgreSQL

package.targets += [
    // PostgresStore: rows sealed on the client with the file vault's record crypto, found by keyed
    // hashes, and one refresh across hosts under pg_advisory_xact_lock.
    .target(
        name: "TokenVaultPostgres",
        dependencies: [
            "TokenVault",
            "TokenVaultSystem",
            .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
            .product(name: "NIOTLS", package: "swift-nio", condition: .when(traits: ["Postgres"])),
            .product(name: "Logging", package: "swift-log"),
        ]
    )
]

// MARK: - CLI

package.targets += [
    // Every subcommand, its options and messages; the PostgreSQL backend reaches it through one
    // protocol (VaultCLI/PostgresBackend.swift), so that the library itself does not link it.
    .target(
        name: "VaultCLI",
        dependencies: [
            "TokenVault",
            "TokenVaultGit",
            "TokenVaultSystem",
            .product(name: "ArgumentParser", package: "swift-argument-parser", condition: .when(traits: ["CLI"])),
        ]
    ),
    // `vault migrate`'s work (TokenVaultMigration, which needs Foundation for plists), for
    // `vault-full` only: `vault` links FoundationEssentials alone, so that a cold `vault get`
    // neither loads nor initializes Foundation, CoreFoundation and ICU, and hands `migrate` over.
    .target(name: "VaultCLIMigration", dependencies: ["VaultCLI", "TokenVault", "TokenVaultMigration"]),
    // Without postgres-nio, NIO, BoringSSL, swift-crypto and jwt-kit: measured, a cold file-vault
    // `vault get` took 25 % less CPU and started 4 ms sooner once postgres-nio was out of the binary
    // (issue 17), and 15 % fewer instructions once swift-crypto and jwt-kit were (issue 32: 10.30 M ->
    // 8.74 M, callgrind; 8.66 M before they came).
    .executableTarget(name: "vault", dependencies: ["VaultCLI", "TokenVaultSystem"]),
    .executableTarget(
        name: "vault-full", dependencies: ["VaultCLI", "VaultCLIMigration", "TokenVault", "TokenVaultSystem", "TokenVaultPostgres", "TokenVaultDPoP", "TokenVaultIDToken"]),
]

// MARK: - Tests

package.targets += [
    // What the test targets share: finding and running the helper executables below, scratch
    // directories, plist reading, and the conformance suite every backend passes.
    .target(
        name: "TokenVaultTestSupport",
        dependencies: ["TokenVault", "TokenVaultTesting"],
        path: "Tests/TokenVaultTestSupport"
    ),
    // Child processes the tests run (Tests/Helpers). Not products: `swift build --build-tests`
    // puts them next to the test bundles, where TokenVaultTestSupport finds them.
    //   vault-file-stress: crash, multi-process and disk-full runs of the encrypted file.
    .executableTarget(name: "vault-file-stress", dependencies: ["TokenVault"], path: "Tests/Helpers/vault-file-stress"),
    //   secret-service-check: the store on a private bus (locked, frozen, vanished keyring).
    .executableTarget(name: "secret-service-check", dependencies: ["TokenVault"], path: "Tests/Helpers/secret-service-check"),
    //   tutorial-defaults: Foundation's own UserDefaults writes the shapes OAuth tutorials leave
    //   (migration tests, Scripts/demo).
    .executableTarget(name: "tutorial-defaults", dependencies: ["TokenVault", "TokenVaultMigration"], path: "Tests/Helpers/tutorial-defaults"),
    //   refresh-stress: one process of the cross-process refresh tests.
    //   (with TOKEN_VAULT_BACKEND=postgres, one "host" of the cross-host tests: Tests/Integration/Postgres).
    .executableTarget(name: "refresh-stress", dependencies: ["TokenVault", "TokenVaultPostgres", "TokenVaultDPoP"], path: "Tests/Helpers/refresh-stress"),
    // The example OAuth client (Examples/oauth-example), run by the integration tests. Not a product.
    .executableTarget(
        name: "oauth-example",
        // No ArgumentParser: `swift package generate-manual` documents every executable that
        // depends on it, and the manual is for the products only.
        dependencies: ["TokenVault"],
        path: "Examples/oauth-example"
    ),

    // Unit tests: no daemon, no server. Plain `swift test` runs them.
    .testTarget(
        name: "TokenVaultTests",
        dependencies: [
            "TokenVault", "TokenVaultGit", "TokenVaultMigration", "TokenVaultSystem", "TokenVaultTesting", "TokenVaultTestSupport",
            "tutorial-defaults", "vault-file-stress", "TokenVaultDPoP",
        ],
        resources: [.copy("Fixtures")]
    ),
    // End-to-end tests of the `vault` binary, and of its parser in process (FastPathTests).
    .testTarget(
        name: "vaultTests",
        dependencies: [
            "TokenVault", "TokenVaultMigration", "TokenVaultTestSupport", "VaultCLI", "vault", "vault-full", "tutorial-defaults",
        ]
    ),
    // Integration tests (Tests/Integration): the real gnome-keyring on a private D-Bus and the
    // test OAuth server (Tests/oauth-server), which Scripts/test starts. They are a library that
    // the test target links only with the Integration trait (Scripts/test passes --traits
    // Integration), so plain `swift test` runs the unit tests and says in one line how to run these.
    .target(
        name: "TokenVaultIntegration",
        dependencies: [
            "TokenVault", "TokenVaultGit", "TokenVaultMigration", "TokenVaultPostgres", "TokenVaultTesting", "TokenVaultTestSupport",
            "TokenVaultURLSession", "TokenVaultAsyncHTTPClient", "TokenVaultDPoP", "TokenVaultIDToken",
            .product(name: "AsyncHTTPClient", package: "async-http-client", condition: .when(traits: ["AsyncHTTPClientAdapter"])),
            // PostgresPoolTests drive a pooled connection directly.
            .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
        ],
        path: "Tests/Integration"
    ),
    .testTarget(
        name: "TokenVaultIntegrationTests",
        dependencies: [
            .target(name: "TokenVaultIntegration", condition: .when(traits: ["Integration"])),
            "vault", "vault-full", "secret-service-check", "oauth-example", "refresh-stress",
        ]
    ),
]

// MARK: - Strict settings

// Applied to every Swift target in one place (as swift-log does). No unsafe flags: a package with
// them cannot be depended upon by version.
let warningsAsErrors = Context.environment["TOKENVAULT_WERROR"] != nil
for target in package.targets where [.executable, .test, .regular].contains(target.type) {
    var settings = target.swiftSettings ?? []
    // Require `any` for existential types (SE-0335).
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    // Only what a file imports is visible in it (SE-0444).
    settings.append(.enableUpcomingFeature("MemberImportVisibility"))
    // Imports are internal unless written `public import` (SE-0409).
    settings.append(.enableUpcomingFeature("InternalImportsByDefault"))
    // Every public type says whether it is Sendable (the diagnostic group behind the old
    // -require-explicit-sendable flag).
    settings.append(.treatWarning("ExplicitSendable", as: warningsAsErrors ? .error : .warning))
    // CI builds with warnings as errors; local builds keep warnings as warnings.
    if warningsAsErrors {
        settings.append(.treatAllWarnings(as: .error))
    }
    target.swiftSettings = settings
}
