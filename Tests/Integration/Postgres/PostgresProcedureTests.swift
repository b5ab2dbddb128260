#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
@testable import TokenVaultPostgres

extension PostgresTests {
    /// A lone save or delete is one CALL of a procedure that commits before it replies
    /// (tokenvault_save_v1, tokenvault_delete_v1; PostgresSchema.procedureStatements). A vault made
    /// before the procedures gets them on its first save; a database user who may not create them
    /// still saves and deletes, in BEGIN ... COMMIT.
    @Suite struct Procedures {
        static let count = "SELECT count(*) FROM pg_proc WHERE proname IN ('tokenvault_save_v1', 'tokenvault_delete_v1')"

        @Test func aNewVaultHasTheProceduresAndLoneWritesUseThem() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let database = try postgres.freshDatabase()
            let store = try await postgres.open(database, keySource: .keyFile(try dir.keyFile()))
            defer { store.close() }
            #expect(try postgres.sql(database, Self.count) == "2")
            let key = try CredentialKey(service: "procedures", account: "a")
            try await store.save(Data("one".utf8), for: key)
            try await store.save(Data("two".utf8), for: key)
            #expect(try await store.load(key) == Data("two".utf8))
            #expect(try await store.delete(key))
            #expect(try await !store.delete(key))
            #expect(try await store.load(key) == nil)
            #expect(store.usesProcedures)

            // The saves went through the procedure: one that refuses makes a save fail.
            try postgres.sql(
                database,
                """
                CREATE OR REPLACE PROCEDURE tokenvault_save_v1(
                    p_row_hash bytea, p_service_hash bytea, p_version bigint, p_sealed bytea, p_vault_id bytea,
                    p_channel text, p_payload text, INOUT written boolean DEFAULT NULL)
                LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'tokenvault_save_v1 was called'; END $$
                """)
            do {
                try await store.save(Data("three".utf8), for: key)
                Issue.record("a save did not call tokenvault_save_v1")
            } catch let error as VaultError {
                #expect(error.message.contains("tokenvault_save_v1 was called"), "\(error.message)")
            }
        }

        @Test func aVaultFromBeforeTheProceduresGetsThemOnItsFirstSave() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let keyFile = try dir.keyFile()
            let database = try postgres.freshDatabase()
            let old = try CredentialKey(service: "procedures", account: "old")
            do {
                let store = try await postgres.open(database, keySource: .keyFile(keyFile))
                try await store.save(Data("old".utf8), for: old)
                store.close()
            }
            try postgres.sql(database, "DROP PROCEDURE tokenvault_save_v1; DROP PROCEDURE tokenvault_delete_v1")
            #expect(try postgres.sql(database, Self.count) == "0")

            let store = try await postgres.open(database, keySource: .keyFile(keyFile))
            defer { store.close() }
            #expect(try await store.load(old) == Data("old".utf8))
            let new = try CredentialKey(service: "procedures", account: "new")
            try await store.save(Data("new".utf8), for: new)
            #expect(try postgres.sql(database, Self.count) == "2")
            #expect(try await store.load(new) == Data("new".utf8))
            #expect(try await store.delete(old))
            #expect(try await store.keys(service: "procedures") == [new])
            #expect(store.usesProcedures)
        }

        @Test func aUserWhoMayNotCreateTheProceduresSavesAndDeletesInATransaction() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let keyFile = try dir.keyFile()
            let database = try postgres.freshDatabase()
            do {
                let store = try await postgres.open(database, keySource: .keyFile(keyFile))
                store.close()
            }
            try postgres.sql(database, "DROP PROCEDURE tokenvault_save_v1; DROP PROCEDURE tokenvault_delete_v1")
            try postgres.sql(database, "REVOKE CREATE ON SCHEMA public FROM pg_database_owner")

            let store = try await postgres.open(database, keySource: .keyFile(keyFile))
            defer { store.close() }
            let key = try CredentialKey(service: "procedures", account: "a")
            try await store.save(Data("one".utf8), for: key)
            #expect(!store.usesProcedures)
            try await store.save(Data("two".utf8), for: key)
            #expect(try await store.load(key) == Data("two".utf8))
            #expect(try await store.delete(key))
            #expect(try await store.load(key) == nil)
            #expect(try postgres.sql(database, Self.count) == "0")
        }
    }
}
#endif
