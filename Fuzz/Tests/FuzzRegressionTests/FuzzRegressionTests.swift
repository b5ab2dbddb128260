import Foundation
import FuzzHarness
import Testing
@_spi(AgentWire) import TokenVault
import TokenVaultMigration

/// Replays the inputs the fuzzers found worth keeping (Fixtures/fuzz/<target>/: crashers and
/// corpus entries that reach deep paths) through the same properties the fuzz targets check
/// (Fuzz/FuzzHarness), so that a fixed crash stays fixed without a fuzzing run.
@Suite struct FuzzRegressionTests {
    /// The fixtures of one fuzz target, by file name.
    static func fixtures(_ target: String) throws -> [(name: String, bytes: [UInt8])] {
        let directory = try #require(Bundle.module.url(forResource: "Fixtures/fuzz/\(target)", withExtension: nil))
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        return try names.map { name in
            (name, [UInt8](try Data(contentsOf: directory.appendingPathComponent(name))))
        }
    }

    static func fixture(_ target: String, _ name: String) throws -> [UInt8] {
        try #require(try fixtures(target).first { $0.name == name }).bytes
    }

    /// Replays every fixture of `target` through `check` and compares the outcome with
    /// `expected`, which must name every fixture: a new fixture needs its outcome written down.
    static func replay<Outcome: Equatable>(
        _ target: String, expected: [String: Outcome], _ check: ([UInt8]) async throws -> Outcome
    ) async throws {
        let fixtures = try Self.fixtures(target)
        #expect(Set(fixtures.map(\.name)) == Set(expected.keys), "\(target): fixtures and expected outcomes differ")
        for (name, bytes) in fixtures {
            do {
                let outcome = try await check(bytes)
                #expect(outcome == expected[name], "\(target) fixture \(name)")
            } catch {
                Issue.record("\(target) fixture \(name): \(error)")
            }
        }
    }

    // MARK: FuzzTokenResponse

    @Test func tokenResponseFixtures() async throws {
        let expected: [String: TokenResponseProperty.Outcome] = [
            "seed-github-form.txt": .parsed,
            "seed-google.json": .parsed,
            "corpus-form-minimal": .parsed,
            "corpus-form-error": .rejected(.tokenEndpointError),
            // Its access_token holds a ':', which a bearer token (RFC 6750 b64token) cannot.
            "corpus-form-and-json-mixed": .rejected(.invalidInput),
        ]
        try await Self.replay("FuzzTokenResponse", expected: expected) { try TokenResponseProperty.check($0) }
    }

    // MARK: FuzzVaultFile

    @Test func vaultFileFixtures() async throws {
        let directory = try TemporaryDirectory()
        let property = try VaultFileProperty(directory: directory.path)
        let expected: [String: VaultFileProperty.Outcome] = [
            // Seeds: files the library wrote, and sealed records.
            "seed-raw-history-vault": .opened(entries: 4),
            "seed-forged-passphrase-vault": .rejected(.authenticationFailed),
            "seed-header-then-frames": .opened(entries: 1),
            "seed-sealed-batch": .opened(entries: 1),
            "seed-sealed-one-put": .opened(entries: 1),
            "seed-sealed-unicode-empty-secret": .opened(entries: 2),
            // Grown by the fuzzer: many records and batches, a torn tail after the header, and
            // headers with forged checksums that reach the later header checks.
            "corpus-sealed-2-entries": .opened(entries: 2),
            "corpus-sealed-10-entries": .opened(entries: 10),
            "corpus-sealed-12-entries": .opened(entries: 12),
            "corpus-header-then-torn-tail": .opened(entries: 0),
            "corpus-forged-checksums-wrong-key": .rejected(.authenticationFailed),
            "corpus-forged-checksums-memlimit-over-cap": .rejected(.invalidInput),
            "corpus-forged-checksums-future-version": .rejected(.unsupportedVersion),
            "corpus-forged-checksums-truncated": .rejected(.truncated),
            // Crashed compaction before names were checked (see recordNamesMustBeShortValidUTF8).
            "crash-compaction-invalid-utf8-service": .rejected(.integrityFailure),
        ]
        try await Self.replay("FuzzVaultFile", expected: expected) { try await property.check($0) }
    }

    /// The harness seals records exactly as the library reads them: without this, the
    /// sealed-records mode would fuzz nothing past the tag check.
    @Test func vaultFileHarnessSealsRecordsTheLibraryOpens() async throws {
        let directory = try TemporaryDirectory()
        let property = try VaultFileProperty(directory: directory.path)
        let put = VaultFileInput.plaintext(
            operation: 1, service: Array("svc".utf8), account: Array("acct".utf8), secret: Array("s3cr3t-fake".utf8))
        let input = VaultFileInput.sealedRecordsInput([put])
        #expect(try await property.check(input) == .opened(entries: 1))

        // Read back through the library directly, not through the harness.
        try FileTestSupport.write(VaultFileInput.fileBytes(input), to: directory.path + "/probe")
        let reopened = try await EncryptedFileStore.open(path: directory.path + "/probe", keySource: .keyFile(directory.path + "/key"))
        #expect(try await reopened.load(CredentialKey(service: "svc", account: "acct")) == Data("s3cr3t-fake".utf8))

        // The same input sealed under the wrong sequence number is a torn last record: no entry.
        #expect(try await property.check(VaultFileInput.sealedRecordsInput([put], control: 0x20)) == .opened(entries: 0))
        // And a batch that never ends applies nothing.
        let open = VaultFileInput.plaintext(
            operation: 1, continues: true, service: Array("svc".utf8), account: Array("acct".utf8), secret: [1])
        #expect(try await property.check(VaultFileInput.sealedRecordsInput([put, open])) == .opened(entries: 1))
    }

    /// A record whose service name is not UTF-8 used to be repaired into U+FFFD characters on
    /// open; 21,846 bytes of 0xFF became a 65,538-byte name, and compaction trapped sealing it
    /// again (its length field is a u16). Names are now refused unless they are 1…1024 bytes of
    /// UTF-8, as the FileFormat article says.
    @Test func recordNamesMustBeShortValidUTF8() async throws {
        let directory = try TemporaryDirectory()
        let property = try VaultFileProperty(directory: directory.path)
        func put(service: [UInt8]) -> [UInt8] {
            VaultFileInput.sealedRecordsInput([
                VaultFileInput.plaintext(operation: 1, service: service, account: Array("a".utf8), secret: Array("x".utf8))
            ])
        }
        let crasher = try Self.fixture("FuzzVaultFile", "crash-compaction-invalid-utf8-service")
        #expect(try await property.check(crasher) == .rejected(.integrityFailure))
        #expect(try await property.check(put(service: [0x61, 0xFF])) == .rejected(.integrityFailure))
        #expect(try await property.check(put(service: [UInt8](repeating: 0x61, count: 1025))) == .rejected(.integrityFailure))
        #expect(try await property.check(put(service: [UInt8](repeating: 0x61, count: 1024))) == .opened(entries: 1))
        #expect(try await property.check(put(service: Array("café".utf8))) == .opened(entries: 1))
    }

    // MARK: FuzzAgentProtocol

    @Test func agentProtocolFixtures() async throws {
        let expected: [String: AgentProtocolProperty.Outcome] = [
            "seed-token-request": .decoded(request: true, response: false),
            "seed-unlock-request": .decoded(request: true, response: false),
            "seed-token-response": .decoded(request: false, response: true),
            "seed-status-response": .decoded(request: false, response: true),
            // A body of another version decodes as neither: the agent answers unsupported-version.
            "seed-other-version": .decoded(request: false, response: false),
            // A length of 4 GiB - 1: refused from the header, before any body is read.
            "crafted-oversized-length": .headerRefused,
            // The header announces more than arrives.
            "crafted-truncated-body": .incomplete,
            // A token request naming an empty service.
            "crafted-empty-service": .decoded(request: false, response: false),
            // A token request whose JSON is cut short.
            "crafted-cut-json": .decoded(request: false, response: false),
            // Found by the fuzzer in CI: a token response whose access token ("ess") is a word of
            // the redacted description ("access"); the description must not depend on the token.
            "short-token-inside-the-description-word": .decoded(request: false, response: true),
        ]
        try await Self.replay("FuzzAgentProtocol", expected: expected) { try AgentProtocolProperty.check($0) }
    }

    /// Every seed, the write requests and their answer included, decodes as what it is.
    @Test func agentProtocolSeedsDecodeAsTheirKind() throws {
        for (name, bytes) in try AgentProtocolProperty.seeds() where name != "other-version" {
            let outcome = try AgentProtocolProperty.check(bytes)
            #expect(outcome == .decoded(request: name.hasSuffix("-request"), response: name.hasSuffix("-response")), "\(name)")
        }
    }

    @Test func agentProtocolSeedsAreTheCommittedOnes() throws {
        for (name, bytes) in try AgentProtocolProperty.seeds() where ["token-request", "unlock-request", "token-response"].contains(name) {
            #expect(try Self.fixture("FuzzAgentProtocol", "seed-\(name)") == bytes, "seed-\(name)")
        }
    }

    // MARK: FuzzMigrationDetector

    @Test func migrationFixtures() async throws {
        let directory = try TemporaryDirectory()
        let property = MigrationProperty(directory: directory.path)
        let expected: [String: MigrationProperty.Outcome] = [
            // Seeds: the tutorials' shapes.
            "seed-mixed.binary.plist": .migrated,
            "seed-model.xml.plist": .migrated,
            "seed-dictionary-model.xml.plist": .migrated,
            // Grown by the fuzzer. The rewrite refusals are all or nothing: the vault and the
            // plist are checked unchanged. An OpenStep strings file cannot be rewritten in its
            // own format (invalidInput).
            "corpus-xml-access-token": .migrated,
            // Their fuzzed access tokens hold spaces and bytes outside RFC 6750's b64token, so
            // they are refused when validated, before anything is written.
            "corpus-binary-strings-and-id-token": .rejected(.invalidInput),
            "corpus-binary-rewrite-refused": .rejected(.invalidInput),
            "corpus-openstep-not-rewritable": .migrationRefused(.invalidInput),
            "corpus-xml-json-lookalike-string": .noTokens,
            // Crashers (see the tests below).
            "crash-binary-plist-top-level-set": .rejected(.invalidInput),
            "crash-set-inside-data-value.plist": .noTokens,
            "crash-nan-expiry-date": .migrated,
        ]
        try await Self.replay("FuzzMigrationDetector", expected: expected) { try await property.check($0) }
    }

    /// swift-corelibs-foundation crashes on a binary plist that holds a non-empty set (found by
    /// the fuzzer as a tutorial plist whose top-level dictionary marker became a set's); as a
    /// whole plist it is refused, and as a `Data` value it is not a token model.
    @Test func binaryPlistsWithSetsAreRefusedNotParsed() async throws {
        let directory = try TemporaryDirectory()
        let property = MigrationProperty(directory: directory.path)
        let topLevel = try Self.fixture("FuzzMigrationDetector", "crash-binary-plist-top-level-set")
        #expect(try await property.check(topLevel) == .rejected(.invalidInput))
        let inData = try Self.fixture("FuzzMigrationDetector", "crash-set-inside-data-value.plist")
        #expect(try await property.check(inData) == .noTokens)
    }

    /// A token model whose `expires_at` is a binary-plist date holding NaN crashed the migration
    /// when it wrote the token (Int64(NaN) in the stored form). A date that is not a time is now
    /// no expiry at all.
    @Test func aNaNDateInAPlistIsNoExpiry() async throws {
        let directory = try TemporaryDirectory()
        let bytes = try Self.fixture("FuzzMigrationDetector", "crash-nan-expiry-date")
        #expect(try await MigrationProperty(directory: directory.path).check(bytes) == .migrated)

        let url = URL(fileURLWithPath: directory.file("nan.plist"))
        try Data(bytes).write(to: url)
        let vault = Vault(store: MemoryStore())
        let report = try await vault.migrateDefaults(plistAt: url, options: MigrationOptions(removeSource: false))
        let entry = try #require(report.entries.first)
        let token = try #require(try await vault.token(for: entry))
        #expect(token.expiresAt == nil)
    }
}
