import Foundation
import Testing
@testable import TokenVault

/// The all-or-nothing engine behind `vault copy` and the defaults migration.
@Suite struct EntryTransferTests {
    private static func item(_ name: String, _ value: String) throws -> EntryTransfer.Item {
        EntryTransfer.Item(key: try CredentialKey(service: name, account: "default"), secret: Data(value.utf8), contentType: .binary)
    }

    @Test func equalValuesAreLeftAloneAndOthersAreConflicts() async throws {
        let vault = Vault(store: MemoryStore())
        try await vault.saveSecret(Data("same".utf8), for: try CredentialKey(service: "a", account: "default"))
        try await vault.saveSecret(Data("old".utf8), for: try CredentialKey(service: "b", account: "default"))
        let transfer = EntryTransfer(into: vault, destinationName: "the test vault")
        let plan = try await transfer.plan([try Self.item("a", "same"), try Self.item("b", "new"), try Self.item("c", "fresh")], overwrite: false)
        #expect(plan.alreadyThere.map(\.service) == ["a"])
        #expect(plan.conflicts.map(\.service) == ["b"])
        #expect(plan.toWrite.map(\.item.key.service) == ["b", "c"])
        // Without overwrite, a plan with a conflict writes nothing.
        await #expect(throws: VaultError.self) { try await transfer.apply(plan) }
        #expect(try await vault.secret(for: try CredentialKey(service: "b", account: "default")) == Data("old".utf8))
        #expect(try await vault.secret(for: try CredentialKey(service: "c", account: "default")) == nil)
    }

    /// A commit step that fails (the migration's plist rewrite) undoes every write: replaced
    /// values come back, new entries go.
    @Test func aFailingCommitPutsEverythingBack() async throws {
        let vault = Vault(store: MemoryStore())
        let b = try CredentialKey(service: "b", account: "default")
        try await vault.saveSecret(Data("old".utf8), for: b)
        let transfer = EntryTransfer(into: vault, destinationName: "the test vault")
        let plan = try await transfer.plan([try Self.item("b", "new"), try Self.item("c", "fresh")], overwrite: true)
        struct CommitFailed: Error {}
        await #expect(throws: CommitFailed.self) {
            try await transfer.apply(plan) {
                // Written and verified before the commit runs.
                #expect(try await vault.secret(for: b) == Data("new".utf8))
                throw CommitFailed()
            }
        }
        #expect(try await vault.secret(for: b) == Data("old".utf8))
        #expect(try await vault.secret(for: try CredentialKey(service: "c", account: "default")) == nil)
    }

    @Test func anAppliedPlanIsWrittenAndASecondPlanFindsItThere() async throws {
        let vault = Vault(store: MemoryStore())
        let transfer = EntryTransfer(into: vault, destinationName: "the test vault")
        let items = [try Self.item("a", "1"), try Self.item("b", "2")]
        try await transfer.apply(try await transfer.plan(items, overwrite: false))
        let again = try await transfer.plan(items, overwrite: false)
        #expect(again.toWrite.isEmpty && again.conflicts.isEmpty && again.alreadyThere.count == 2)
    }
}
