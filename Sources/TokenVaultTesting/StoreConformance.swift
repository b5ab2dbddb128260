public import Foundation
public import Testing
public import TokenVault

/// The one conformance suite every ``CredentialStore`` must pass: TokenVault's own backends, and
/// a store you write yourself.
///
/// A test target runs every case in ``StoreConformance/cases`` against a store of its own
/// (Swift Testing), for example:
///
/// ```swift
/// @Test(arguments: StoreConformance.cases)
/// func conformance(_ check: StoreConformance.Case) async throws {
///     try await check.run(on: MemoryStore(), traits: .init())
/// }
/// ```
///
/// Every case uses service names that start with a fresh random namespace, so cases can run in
/// parallel against one shared store (such as the one keyring of a Secret Service daemon) and
/// never see each other's entries.
public enum StoreConformance: Sendable {
    /// What a backend declares about itself.
    public struct Traits: Sendable {
        /// The largest secret the backend carries; larger ones must be refused with `tooLarge`.
        public var maximumSecretSize: Int = .max
        /// How many keys the "many keys" case writes.
        public var manyKeysCount: Int = 1_000

        public init(maximumSecretSize: Int = .max, manyKeysCount: Int = 1_000) {
            self.maximumSecretSize = maximumSecretSize
            self.manyKeysCount = manyKeysCount
        }
    }

    /// One guarantee of the ``CredentialStore`` contract, checked on a store.
    public struct Case: Sendable, CustomTestStringConvertible {
        /// What it checks, in words.
        public let name: String
        let body: @Sendable (any CredentialStore, Traits, Namespace) async throws -> Void

        public var testDescription: String { name }

        /// Runs the check on `store`; a failed expectation is recorded as a Swift Testing issue.
        public func run(on store: any CredentialStore, traits: Traits = Traits()) async throws {
            try await body(store, traits, Namespace())
        }

        /// Runs the check with the service names of `namespace` (every one starts with its
        /// ``Namespace/prefix``), so that the caller can clean a shared store up afterwards.
        public func run(on store: any CredentialStore, traits: Traits = Traits(), namespace: Namespace) async throws {
            try await body(store, traits, namespace)
        }
    }

    /// A random prefix for service names, unique to one run of one case.
    public struct Namespace: Sendable {
        public init() {}
        public let prefix = "tv-conformance-\(UUID().uuidString.prefix(8).lowercased())"
        public func service(_ name: String = "svc") -> String { "\(prefix)-\(name)" }
        public func key(_ account: String = "default", service: String = "svc") throws -> CredentialKey {
            try CredentialKey(service: self.service(service), account: account)
        }
    }

    /// Every case of the contract.
    public static let cases: [Case] = [
        Case(name: "missing key loads nil and deletes as false", body: missingKey),
        Case(name: "round trip of every size", body: roundTripSizes),
        Case(name: "round trip of awkward bytes", body: awkwardBytes),
        Case(name: "unicode services and accounts", body: unicodeNames),
        Case(name: "overwrite replaces the value", body: overwrite),
        Case(name: "delete removes exactly one entry", body: delete),
        Case(name: "list is sorted and filtered by service", body: list),
        Case(name: "batch save keeps every entry", body: batch),
        Case(name: "many keys", body: manyKeys),
        Case(name: "concurrent writers of different keys lose nothing", body: concurrentWriters),
        Case(name: "no secret escapes", body: noSecretEscapes),
    ]

    // MARK: Guarantees that need the backend's help

    /// What a backend whose entries outlive the process supplies for ``durableOnReturn(_:)``.
    public struct Storage: Sendable {
        /// Has a child process save a secret under a key of `service` and kills it with SIGKILL
        /// as soon as the child reports that the save has returned; returns what it saved.
        public var saveInChildThenKill: @Sendable (_ service: String) async throws -> (key: CredentialKey, secret: Data)
        /// A new store on the same storage, as a new process would open it.
        public var reopen: @Sendable () async throws -> any CredentialStore

        public init(
            saveInChildThenKill: @escaping @Sendable (_ service: String) async throws -> (key: CredentialKey, secret: Data),
            reopen: @escaping @Sendable () async throws -> any CredentialStore
        ) {
            self.saveInChildThenKill = saveInChildThenKill
            self.reopen = reopen
        }
    }

    /// **Durable on return**: a save that returned in a process killed right after it is there
    /// for the next process. Each persistent backend runs it (the memory store does not persist
    /// by design): Tests/TokenVaultTests/Conformance/DurabilityConformanceTests.swift for the
    /// encrypted file, Tests/Integration/SecretService/SecretServiceDurabilityTests.swift for the
    /// Secret Service.
    ///
    /// **Failures throw** needs a failure that only the backend can cause, so each backend's own
    /// suite checks it: the encrypted file in EncryptedFileTamperTests (every flipped byte, every
    /// truncation, damage seen by an open store: `integrityFailure`, never absence),
    /// EncryptedFileStoreTests (wrong key or passphrase, unreadable and foreign files, each with
    /// its code) and EncryptedFileProcessTests (disk full); the Secret Service in
    /// SecretServiceFailureTests (locked, frozen and vanished keyrings, no provider: each call
    /// throws, never returns nil or false). The memory store has no failure to report.
    public static func durableOnReturn(_ storage: Storage) async throws {
        let namespace = Namespace()
        let (key, secret) = try await storage.saveInChildThenKill(namespace.service("durable"))
        let store = try await storage.reopen()
        #expect(try await store.load(key) == secret, "a save that had returned was lost when its process was killed")
        #expect(try await store.delete(key))
    }

    // MARK: Cases

    static func missingKey(_ store: any CredentialStore, _ traits: Traits, _ ns: Namespace) async throws {
        let key = try ns.key("nobody")
        #expect(try await store.load(key) == nil)
        #expect(try await store.delete(key) == false)
        #expect(try await store.keys(service: ns.service()).isEmpty)
    }

    static func roundTripSizes(_ store: any CredentialStore, _ traits: Traits, _ ns: Namespace) async throws {
        for size in [0, 1, 600, 64 * 1024, 1024 * 1024] {
            let key = try ns.key("size-\(size)")
            let secret = pattern(count: size, seed: UInt8(truncatingIfNeeded: size))
            if size <= traits.maximumSecretSize {
                try await store.save(secret, for: key)
                let loaded = try await store.load(key)
                #expect(loaded == secret, "size \(size): loaded \(loaded?.count ?? -1) bytes")
            } else {
                let error = await #expect(throws: VaultError.self) { try await store.save(secret, for: key) }
                #expect(error?.code == .tooLarge, "size \(size) must be refused as too large")
                #expect(try await store.load(key) == nil, "a refused secret must leave nothing behind")
            }
            try await store.delete(key)
        }
    }

    static func awkwardBytes(_ store: any CredentialStore, _ traits: Traits, _ ns: Namespace) async throws {
        let secrets: [(String, Data)] = [
            ("newlines", Data("line one\nline two\r\nline three\n".utf8)),
            ("nul", Data([0x61, 0x00, 0x62, 0x00, 0x00])),
            ("only-nul", Data([0x00])),
            ("not-utf8", Data([0xff, 0xfe, 0xc3, 0x28, 0x80, 0xa0])),
            ("all-bytes", Data((0...255).map { UInt8($0) })),
            ("trailing-space", Data("token \n\n".utf8)),
        ]
        for (name, secret) in secrets {
            let key = try ns.key(name)
            try await store.save(secret, for: key)
            #expect(try await store.load(key) == secret, "secret \(name) did not round-trip")
        }
    }

    static func unicodeNames(_ store: any CredentialStore, _ traits: Traits, _ ns: Namespace) async throws {
        let names: [(service: String, account: String)] = [
            ("日本語サービス", "ユーザー"),
            ("émoji 🔑 service", "ünïcødé@example.com"),
            ("עברית", "مستخدم"),
            ("with spaces and / slashes", "a:b=c&d"),
        ]
        for (index, name) in names.enumerated() {
            let key = try CredentialKey(service: ns.service(name.service), account: name.account)
            let secret = Data("secret \(index)".utf8)
            try await store.save(secret, for: key)
            #expect(try await store.load(key) == secret)
            #expect(try await store.keys(service: key.service) == [key])
        }
        // The same name typed precomposed and decomposed is one key.
        let precomposed = try CredentialKey(service: ns.service("caf\u{E9}"), account: "r\u{E9}sum\u{E9}")
        let decomposed = try CredentialKey(service: ns.service("cafe\u{301}"), account: "re\u{301}sume\u{301}")
        try await store.save(Data("nfc".utf8), for: decomposed)
        #expect(try await store.load(precomposed) == Data("nfc".utf8))
    }

    static func overwrite(_ store: any CredentialStore, _ traits: Traits, _ ns: Namespace) async throws {
        let key = try ns.key()
        try await store.save(Data("first value, the longer one".utf8), for: key)
        try await store.save(Data("second".utf8), for: key)
        #expect(try await store.load(key) == Data("second".utf8))
        #expect(try await store.keys(service: ns.service()) == [key])
        try await store.save(Data(), for: key)
        #expect(try await store.load(key) == Data())
    }

    static func delete(_ store: any CredentialStore, _ traits: Traits, _ ns: Namespace) async throws {
        let keep = try ns.key("keep")
        let drop = try ns.key("drop")
        try await store.save(Data("keep".utf8), for: keep)
        try await store.save(Data("drop".utf8), for: drop)
        #expect(try await store.delete(drop) == true)
        #expect(try await store.load(drop) == nil)
        #expect(try await store.delete(drop) == false)
        #expect(try await store.load(keep) == Data("keep".utf8))
        #expect(try await store.keys(service: ns.service()) == [keep])
        // A deleted key can be written again.
        try await store.save(Data("again".utf8), for: drop)
        #expect(try await store.load(drop) == Data("again".utf8))
    }

    static func list(_ store: any CredentialStore, _ traits: Traits, _ ns: Namespace) async throws {
        let alpha = ns.service("alpha")
        let beta = ns.service("beta")
        let keys = try [
            CredentialKey(service: beta, account: "zed"),
            CredentialKey(service: alpha, account: "bob"),
            CredentialKey(service: alpha, account: "alice"),
            CredentialKey(service: beta, account: "amy"),
        ]
        for key in keys {
            try await store.save(Data("secret for \(key.account)".utf8), for: key)
        }
        #expect(try await store.keys(service: alpha).map(\.account) == ["alice", "bob"])
        #expect(try await store.keys(service: beta).map(\.account) == ["amy", "zed"])
        #expect(try await store.keys(service: ns.service("gamma")).isEmpty)
        // Unfiltered listing is sorted and holds ours (a shared store may hold others' too).
        let all = try await store.keys()
        #expect(all == all.sorted())
        #expect(Set(keys).isSubset(of: Set(all)))
        // A service name is matched exactly, not as a prefix.
        #expect(try await store.keys(service: ns.service("alph")).isEmpty)
    }

    static func batch(_ store: any CredentialStore, _ traits: Traits, _ ns: Namespace) async throws {
        let entries = try (0..<50).map { index in
            CredentialWrite(key: try ns.key("batch-\(index)"), secret: Data("batch secret \(index)".utf8), contentType: .json)
        }
        try await store.saveAll(entries)
        for entry in entries {
            #expect(try await store.load(entry.key) == entry.secret)
        }
        #expect(try await store.keys(service: ns.service()).count == 50)
    }

    static func manyKeys(_ store: any CredentialStore, _ traits: Traits, _ ns: Namespace) async throws {
        let count = traits.manyKeysCount
        let keys = try (0..<count).map { try ns.key(String(format: "account-%05d", $0)) }
        for (index, key) in keys.enumerated() {
            try await store.save(pattern(count: 600, seed: UInt8(truncatingIfNeeded: index)), for: key)
        }
        #expect(try await store.keys(service: ns.service()) == keys)
        for (index, key) in keys.enumerated().shuffled() {
            #expect(try await store.load(key) == pattern(count: 600, seed: UInt8(truncatingIfNeeded: index)))
        }
        for key in keys {
            #expect(try await store.delete(key))
        }
        #expect(try await store.keys(service: ns.service()).isEmpty)
    }

    /// **No secret escapes**: what the store says about itself, its keys and the errors it throws
    /// (a refused secret carries the marker too) never contain secret bytes.
    static func noSecretEscapes(_ store: any CredentialStore, _ traits: Traits, _ ns: Namespace) async throws {
        let marker = "tv-escape-\(UUID().uuidString)"
        let key = try ns.key("escape")
        try await store.save(Data(marker.utf8), for: key)
        var texts = [String(describing: store), String(reflecting: store), "\(try await store.keys(service: ns.service()))"]
        if traits.maximumSecretSize < 64 << 20 {
            // One byte too many, the marker at both ends: refused, and the error does not quote it.
            var tooLarge = Data(marker.utf8)
            tooLarge.append(Data(repeating: 0x2E, count: traits.maximumSecretSize - 2 * marker.utf8.count + 1))
            tooLarge.append(Data(marker.utf8))
            do {
                try await store.save(tooLarge, for: key)
                Issue.record("a secret of \(tooLarge.count) bytes was not refused")
            } catch let error as VaultError {
                #expect(error.code == .tooLarge)
                texts += [String(describing: error), String(reflecting: error), error.message]
            }
        }
        for text in texts {
            #expect(!text.contains(marker), "a secret escaped into: \(text.prefix(200))")
        }
        #expect(try await store.load(key) == Data(marker.utf8))
        #expect(try await store.delete(key))
    }

    static func concurrentWriters(_ store: any CredentialStore, _ traits: Traits, _ ns: Namespace) async throws {
        let writers = 16
        let perWriter = 8
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask {
                    for item in 0..<perWriter {
                        let key = try ns.key("w\(writer)-i\(item)")
                        try await store.save(Data("writer \(writer) item \(item)".utf8), for: key)
                    }
                }
            }
            try await group.waitForAll()
        }
        let listed = try await store.keys(service: ns.service())
        #expect(listed.count == writers * perWriter)
        for writer in 0..<writers {
            for item in 0..<perWriter {
                let key = try ns.key("w\(writer)-i\(item)")
                #expect(try await store.load(key) == Data("writer \(writer) item \(item)".utf8))
            }
        }
    }

    // MARK: Helpers

    /// Deterministic bytes that differ by position and seed, so a shifted or truncated copy shows.
    static func pattern(count: Int, seed: UInt8) -> Data {
        var data = Data(count: count)
        for index in 0..<count {
            data[index] = UInt8(truncatingIfNeeded: index &* 31 &+ Int(seed) &+ (index >> 8))
        }
        return data
    }
}
