#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
import TokenVaultTesting
@testable import TokenVaultTestSupport
import TokenVault
@testable import TokenVaultPostgres

extension PostgresTests {
    /// The store on the real cluster: conformance, sealing, tampering done in SQL, the key
    /// check, the schema version and what a dump shows.
    @Suite struct Store {
        @Test(arguments: StoreConformance.cases)
        func conformance(_ check: StoreConformance.Case) async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let store = try await postgres.open(try postgres.freshDatabase(), keySource: .keyFile(try dir.keyFile()))
            defer { store.close() }
            try await check.run(on: store, traits: .init(maximumSecretSize: PostgresStore.maximumSecretSize))
        }

        /// Two entries in a fresh database, and the store, for the tamper tests.
        private func twoEntries() async throws -> (TestPostgres, String, PostgresStore, CredentialKey, CredentialKey, TemporaryDirectory) {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let database = try postgres.freshDatabase()
            let store = try await postgres.open(database, keySource: .keyFile(try dir.keyFile()))
            let a = try CredentialKey(service: "tamper-svc", account: "alice")
            let b = try CredentialKey(service: "tamper-svc", account: "bob")
            try await store.save(Data("secret-of-alice".utf8), for: a)
            try await store.save(Data("secret-of-bob".utf8), for: b)
            return (postgres, database, store, a, b, dir)
        }

        private func expectIntegrityFailure(_ body: () async throws -> Void, _ what: Comment) async {
            do {
                try await body()
                Issue.record("no error: \(what)")
            } catch let error as VaultError {
                #expect(error.code == .integrityFailure, "\(what): \(error.code) \(error.message)")
                #expect(!error.message.contains("secret-of"))
            } catch {
                Issue.record("not a VaultError: \(error)")
            }
        }

        @Test func aCiphertextSwappedBetweenTwoRowsIsAnIntegrityFailure() async throws {
            let (postgres, database, store, a, b, _) = try await twoEntries()
            defer { store.close() }
            // Versions swapped too: the rows are then whole, just in each other's place.
            try postgres.sql(
                database,
                """
                UPDATE tokenvault_entries t SET sealed = o.sealed, version = o.version
                FROM tokenvault_entries o WHERE t.row_hash <> o.row_hash
                """)
            await expectIntegrityFailure({ _ = try await store.load(a) }, "swapped row a")
            await expectIntegrityFailure({ _ = try await store.load(b) }, "swapped row b")
            await expectIntegrityFailure({ _ = try await store.keys() }, "listing swapped rows")
        }

        @Test func aCiphertextCopiedToAnotherRowIsAnIntegrityFailure() async throws {
            let (postgres, database, store, a, b, _) = try await twoEntries()
            defer { store.close() }
            let hashes = try postgres.sql(database, "SELECT encode(row_hash, 'hex') FROM tokenvault_entries ORDER BY row_hash")
                .split(separator: "\n")
            try #require(hashes.count == 2)
            try postgres.sql(
                database,
                """
                UPDATE tokenvault_entries SET sealed = (SELECT sealed FROM tokenvault_entries WHERE row_hash = decode('\(hashes[0])', 'hex')),
                version = (SELECT version FROM tokenvault_entries WHERE row_hash = decode('\(hashes[0])', 'hex'))
                WHERE row_hash = decode('\(hashes[1])', 'hex')
                """)
            var failures = 0
            for key in [a, b] {
                do { _ = try await store.load(key) } catch let error as VaultError where error.code == .integrityFailure { failures += 1 }
            }
            #expect(failures == 1, "exactly the row that received the copy fails")
        }

        @Test func aFlippedByteAndAChangedVersionAreIntegrityFailures() async throws {
            let (postgres, database, store, a, b, _) = try await twoEntries()
            defer { store.close() }
            try postgres.sql(
                database,
                "UPDATE tokenvault_entries SET sealed = set_byte(sealed, 30, get_byte(sealed, 30) # 1)")
            await expectIntegrityFailure({ _ = try await store.load(a) }, "flipped byte")
            // A valid ciphertext under another version (a replayed row with its version bumped).
            try await store.save(Data("secret-of-bob-2".utf8), for: b)
            try postgres.sql(database, "UPDATE tokenvault_entries SET version = version + 1")
            await expectIntegrityFailure({ _ = try await store.load(b) }, "changed version")
        }

        @Test func aDeletedRowReadsAsAbsentAndADeletedHeaderIsAnIntegrityFailure() async throws {
            let (postgres, database, store, a, b, _) = try await twoEntries()
            defer { store.close() }
            try postgres.sql(database, "DELETE FROM tokenvault_entries WHERE ctid = (SELECT min(ctid) FROM tokenvault_entries)")
            // Documented (SECURITY.md): a deleted row cannot be told from one never written.
            let left = [try await store.load(a), try await store.load(b)].compactMap { $0 }
            #expect(left.count == 1)
            #expect(try await store.keys().count == 1)
            try postgres.sql(database, "DELETE FROM tokenvault_header")
            await expectIntegrityFailure({ _ = try await store.load(a) }, "header deleted")
        }

        @Test func aWrongKeyIsAnAuthenticationFailureAndAnAlteredHeaderAnIntegrityFailure() async throws {
            let (postgres, database, store, _, _, dir) = try await twoEntries()
            store.close()
            do {
                _ = try await postgres.open(database, keySource: .keyFile(try dir.keyFile("other")))
                Issue.record("a wrong key opened the vault")
            } catch let error as VaultError {
                #expect(error.code == .authenticationFailed, "\(error.message)")
            }
            do {
                let passphrase = dir.file("pass")
                try Data("a long passphrase".utf8).write(to: URL(fileURLWithPath: passphrase))
                try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: passphrase)
                _ = try await postgres.open(database, keySource: .passphraseFile(passphrase))
                Issue.record("a passphrase opened a key-file vault")
            } catch let error as VaultError {
                #expect(error.code == .authenticationFailed, "\(error.message)")
            }
            // The right key, a header changed in SQL (its Argon2id cost on a key-file vault).
            try postgres.sql(database, "UPDATE tokenvault_header SET vault_id = set_byte(vault_id, 0, get_byte(vault_id, 0) # 1)")
            do {
                _ = try await postgres.open(database, keySource: .keyFile(dir.file("key")))
                Issue.record("an altered header opened")
            } catch let error as VaultError {
                #expect(error.code == .integrityFailure, "\(error.message)")
            }
        }

        @Test func aNewerSchemaIsRefused() async throws {
            let (postgres, database, store, _, _, dir) = try await twoEntries()
            store.close()
            try postgres.sql(database, "UPDATE tokenvault_header SET schema_version = 3")
            do {
                _ = try await postgres.open(database, keySource: .keyFile(dir.file("key")))
                Issue.record("a newer schema opened")
            } catch let error as VaultError {
                #expect(error.code == .unsupportedVersion, "\(error.message)")
                #expect(error.message.contains("schema version 3"))
            }
        }

        @Test func aDumpHoldsNoNameAndNoToken() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let database = try postgres.freshDatabase()
            let store = try await postgres.open(database, keySource: .keyFile(try dir.keyFile()))
            defer { store.close() }
            let vault = Vault(store: store)
            let key = try CredentialKey(service: "dump-service-name", account: "dump-account-name")
            let token = OAuthToken(accessToken: "dump-access-token-value", refreshToken: "dump-refresh-token-value")
            try await vault.saveToken(token, for: key)
            try await vault.saveSecret(Data("dump-opaque-secret".utf8), for: CredentialKey(service: "dump-second-service"))
            let dump = try postgres.control("dump", [database])
            #expect(dump.contains("tokenvault_entries"), "the dump is of the vault's database")
            for needle in ["dump-service-name", "dump-account-name", "dump-access-token", "dump-refresh-token", "dump-opaque", "dump-second"] {
                #expect(!dump.contains(needle), "the dump shows \(needle)")
                let hex = needle.utf8.map { String(format: "%02x", $0) }.joined()
                #expect(!dump.contains(hex), "the dump shows \(needle) in hex")
            }
            #expect(try await vault.token(for: key) == token)
        }

        @Test func rekeySealsEveryRowAgainInOneTransaction() async throws {
            let (postgres, database, store, a, b, dir) = try await twoEntries()
            defer { store.close() }
            let other = try await postgres.open(database, keySource: .keyFile(dir.file("key")))
            defer { other.close() }
            let before = try postgres.sql(database, "SELECT encode(sealed, 'hex') FROM tokenvault_entries ORDER BY 1")
            let newKey = try dir.keyFile("new")
            #expect(try await store.rekey(to: .keyFile(newKey)) == 2)
            #expect(try await store.load(a) == Data("secret-of-alice".utf8))
            #expect(try await store.load(b) == Data("secret-of-bob".utf8))
            #expect(try postgres.sql(database, "SELECT encode(sealed, 'hex') FROM tokenvault_entries ORDER BY 1") != before)
            // Another process that opened it with the old key is told so, not shown an empty vault.
            do {
                _ = try await other.load(a)
                Issue.record("the old key still reads")
            } catch let error as VaultError {
                #expect(error.code == .authenticationFailed, "\(error.message)")
            }
            do {
                try await other.save(Data("x".utf8), for: a)
                Issue.record("the old key still writes")
            } catch let error as VaultError {
                #expect(error.code == .authenticationFailed, "\(error.message)")
            }
            let reopened = try await postgres.open(database, keySource: .keyFile(newKey))
            defer { reopened.close() }
            #expect(try await reopened.keys() == [a, b])
        }

        /// Issue 34 (11): two vaults sealed with one key file must not hash a name alike, or an
        /// administrator who reads both tables can tell which entries they share.
        @Test func twoVaultsSharingAKeyFileCannotBeLinkedByTheirHashes() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let keyFile = try dir.keyFile()
            let (first, second) = (try postgres.freshDatabase(), try postgres.freshDatabase())
            let key = try CredentialKey(service: "shared-svc", account: "shared-account")
            for database in [first, second] {
                let store = try await postgres.open(database, keySource: .keyFile(keyFile))
                try await store.save(Data("same-secret".utf8), for: key)
                store.close()
            }
            let hashes = "SELECT encode(row_hash, 'hex') || ' ' || encode(service_hash, 'hex') FROM tokenvault_entries"
            let (a, b) = (try postgres.sql(first, hashes), try postgres.sql(second, hashes))
            #expect(a.count == 2 * 64 + 1 && b.count == 2 * 64 + 1, "one row each: \(a) / \(b)")
            #expect(a.prefix(64) != b.prefix(64), "the row hashes match")
            #expect(a.suffix(64) != b.suffix(64), "the service hashes match")
        }

        /// A vault made before the hashes were scoped (header version 1) opens and works as
        /// before, and `rekey` writes it again as the current version, its entries intact.
        @Test func aVersionOneVaultStillOpensAndRekeyUpgradesIt() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let database = try postgres.freshDatabase()
            var old = TestPostgres.testOptions
            old.newVaultSchemaVersion = 1
            let key = try CredentialKey(service: "old-svc", account: "old-account")
            let made = try await postgres.open(database, keySource: .keyFile(try dir.keyFile()), options: old)
            try await made.save(Data("old-secret".utf8), for: key)
            made.close()
            #expect(try postgres.sql(database, "SELECT schema_version FROM tokenvault_header") == "1")
            // Opened by today's code: read, listed, written.
            let store = try await postgres.open(database, keySource: .keyFile(dir.file("key")))
            defer { store.close() }
            #expect(try await store.load(key) == Data("old-secret".utf8))
            #expect(try await store.keys() == [key])
            #expect(try await store.status().schemaVersion == 1)
            let hashesBefore = try postgres.sql(database, "SELECT encode(row_hash, 'hex') FROM tokenvault_entries")
            // A downgrade in SQL is caught by the header MAC.
            try postgres.sql(database, "UPDATE tokenvault_header SET schema_version = 2")
            await expectIntegrityFailure({ _ = try await postgres.open(database, keySource: .keyFile(dir.file("key"))) }, "a version changed in SQL")
            try postgres.sql(database, "UPDATE tokenvault_header SET schema_version = 1")
            let newKey = try dir.keyFile("new")
            #expect(try await store.rekey(to: .keyFile(newKey)) == 1)
            #expect(try postgres.sql(database, "SELECT schema_version FROM tokenvault_header") == "2")
            #expect(try postgres.sql(database, "SELECT encode(row_hash, 'hex') FROM tokenvault_entries") != hashesBefore)
            let reopened = try await postgres.open(database, keySource: .keyFile(newKey))
            defer { reopened.close() }
            #expect(try await reopened.load(key) == Data("old-secret".utf8))
            #expect(try await reopened.status().schemaVersion == 2)
        }

        @Test func statusTellsServerTLSSchemaAndCount() async throws {
            let (_, _, store, _, _, _) = try await twoEntries()
            defer { store.close() }
            let status = try await store.status()
            #expect(status.entries == 2)
            #expect(status.schemaVersion == 2)
            #expect(status.serverVersion.hasPrefix("1"))
            #expect(status.tls?.hasPrefix("TLSv1.") == true, "\(status.tls ?? "no TLS")")
        }
    }
}
#endif
