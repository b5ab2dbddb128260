#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
import Synchronization
@testable import TokenVaultTestSupport
import TokenVault
@testable import TokenVaultPostgres

extension PostgresTests {
    /// A get and a lone save are statements prepared once per connection. postgres-nio keeps a
    /// failed preparation for the life of its connection, so a statement that once failed there
    /// must not keep failing after the cause is gone.
    @Suite struct PreparedStatements {
        @Test func aGetThatFailedToPrepareWorksOnceTheCauseIsGone() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let keyFile = try dir.keyFile()
            let database = try postgres.freshDatabase()
            let key = try CredentialKey(service: "prepared", account: "a")
            do {
                let store = try await postgres.open(database, keySource: .keyFile(keyFile))
                try await store.save(Data("kept".utf8), for: key)
                store.close()
            }

            // A connection runs a get unprepared the first time and prepares it the second
            // time, when the table it reads is away.
            let store = try await postgres.open(database, keySource: .keyFile(keyFile))
            defer { store.close() }
            #expect(try await store.load(key) == Data("kept".utf8))
            #expect(store.statementUse.withLock { Array($0.values) } == [true])
            try postgres.sql(database, "ALTER TABLE tokenvault_entries RENAME TO tokenvault_entries_away")
            await #expect(throws: VaultError.self) { try await store.load(key) }
            #expect(store.statementUse.withLock { Array($0.values) } == [false])

            try postgres.sql(database, "ALTER TABLE tokenvault_entries_away RENAME TO tokenvault_entries")
            for _ in 0..<3 {
                #expect(try await store.load(key) == Data("kept".utf8))
            }
            try await store.save(Data("new".utf8), for: key)
            #expect(try await store.load(key) == Data("new".utf8))
        }

        @Test func preparedGetsAndSavesRoundTripOnOneConnection() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let database = try postgres.freshDatabase()
            let store = try await postgres.open(database, keySource: .keyFile(try dir.keyFile()))
            defer { store.close() }
            // Many gets and saves in a row reuse the prepared statements: each still reads what
            // the last save wrote, and a missing entry is still nil.
            let keys = try (0..<20).map { try CredentialKey(service: "prepared", account: "a\($0)") }
            for round in 0..<3 {
                for (index, key) in keys.enumerated() {
                    try await store.save(Data("\(round)-\(index)".utf8), for: key)
                }
                for (index, key) in keys.enumerated() {
                    #expect(try await store.load(key) == Data("\(round)-\(index)".utf8))
                }
            }
            #expect(try await store.load(try CredentialKey(service: "prepared", account: "missing")) == nil)
            #expect(store.statementUse.withLock { !$0.isEmpty && $0.values.allSatisfy { $0 } })
        }
    }
}
#endif
