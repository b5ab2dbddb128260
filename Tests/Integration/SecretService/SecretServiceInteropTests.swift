#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Dispatch
import Glibc
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

/// TokenVault and the real `secret-tool` (libsecret-tools) read each other's items through the
/// documented attributes, `service` and `account`, on the shared gnome-keyring.
@Suite(.timeLimit(.minutes(3))) struct SecretServiceInteropTests {
    private func secretTool(_ arguments: [String], input: Data? = nil) throws -> (status: Int32, output: String) {
        try SecretToolProcess.run(arguments, input: input)
    }

    private func freshKey(_ account: String = "octocat") throws -> CredentialKey {
        try CredentialKey(service: "tv-interop-\(UUID().uuidString.prefix(8))", account: account)
    }

    @Test func secretToolReadsWhatTheStoreWrote() async throws {
        let store = try await SharedKeyring.store()
        let key = try freshKey()
        let token = #"{"access_token":"gho_interopToken","token_type":"bearer"}"#
        try await store.save(Data(token.utf8), for: key, contentType: .json)

        let lookup = try secretTool(["lookup", "service", key.service, "account", key.account])
        #expect(lookup.status == 0)
        #expect(lookup.output == token)

        // The item's label and attributes are the documented ones.
        let search = try secretTool(["search", "service", key.service, "account", key.account])
        #expect(search.status == 0)
        #expect(search.output.contains("label = \(key.service) token for \(key.account)"))
        #expect(search.output.contains("schema = \(SecretServiceStore.schemaName)"))
        #expect(search.output.contains("attribute.service = \(key.service)"))
        #expect(search.output.contains("attribute.account = \(key.account)"))
        #expect(try await store.delete(key))
    }

    @Test func theStoreReadsAndDeletesWhatSecretToolWrote() async throws {
        let store = try await SharedKeyring.store()
        let key = try freshKey("alice")
        let stored = try secretTool(
            ["store", "--label=made by secret-tool", "service", key.service, "account", key.account],
            input: Data("typed-by-hand".utf8))
        #expect(stored.status == 0, "secret-tool store failed: \(stored.output)")

        #expect(try await store.load(key) == Data("typed-by-hand".utf8))
        #expect(try await store.delete(key))
        #expect(try secretTool(["lookup", "service", key.service, "account", key.account]).status != 0)
    }

    @Test func secretToolItemsOfTheSchemaAreListed() async throws {
        // Listing is a search by schema; secret-tool can give an item the schema as an attribute.
        let store = try await SharedKeyring.store()
        let key = try freshKey("bob")
        let stored = try secretTool(
            ["store", "--label=listed", "xdg:schema", SecretServiceStore.schemaName, "service", key.service, "account", key.account],
            input: Data("listed-by-schema".utf8))
        #expect(stored.status == 0, "secret-tool store failed: \(stored.output)")
        #expect(try await store.keys(service: key.service) == [key])
        #expect(try await store.load(key) == Data("listed-by-schema".utf8))
        #expect(try await store.delete(key))
        #expect(try await store.keys(service: key.service).isEmpty)
    }

    @Test func savingOverASecretToolItemLeavesOneItemThatBothSee() async throws {
        let store = try await SharedKeyring.store()
        let key = try freshKey()
        _ = try secretTool(["store", "--label=old", "service", key.service, "account", key.account], input: Data("old".utf8))

        try await store.save(Data("new".utf8), for: key, contentType: .json)

        #expect(try await store.load(key) == Data("new".utf8))
        #expect(try secretTool(["lookup", "service", key.service, "account", key.account]).output == "new")
        let search = try secretTool(["search", "--all", "service", key.service, "account", key.account])
        let items = search.output.components(separatedBy: "\n").filter { $0.hasPrefix("[/") }
        #expect(items.count == 1, "expected one item, found: \(search.output)")
        #expect(try await store.keys(service: key.service) == [key])
        #expect(try await store.delete(key))
    }

    @Test func opaqueSecretsGetASecretLabel() async throws {
        let store = try await SharedKeyring.store()
        let key = try freshKey("ci-bot")
        try await store.save(Data([0x00, 0xff, 0x10]), for: key)
        let search = try secretTool(["search", "service", key.service, "account", key.account])
        #expect(search.output.contains("label = \(key.service) secret for \(key.account)"))
        #expect(try await store.load(key) == Data([0x00, 0xff, 0x10]))
        #expect(try await store.delete(key))
    }

    /// An overwrite replaces the item in place (gnome-keyring: CreateItem with replace; the
    /// others: SetSecret), label included: one item, the new label, the new bytes.
    @Test func anOverwriteKeepsOneItemWithTheNewLabel() async throws {
        let store = try await SharedKeyring.store()
        let key = try freshKey("relabel")
        try await store.save(Data(#"{"access_token":"gho_first","token_type":"bearer"}"#.utf8), for: key, contentType: .json)
        try await store.save(Data([0x00, 0xfe, 0x7b]), for: key)
        let search = try secretTool(["search", "--all", "service", key.service, "account", key.account])
        #expect(search.output.components(separatedBy: "\n").filter { $0.hasPrefix("[/") }.count == 1, "\(search.output)")
        #expect(search.output.contains("label = \(key.service) secret for \(key.account)"), "\(search.output)")
        #expect(try await store.load(key) == Data([0x00, 0xfe, 0x7b]))
        #expect(try await store.delete(key))
    }

    /// The README's own habit: `echo -n "$TOKEN" | secret-tool store --label=GitHub service …
    /// account …` stores the bare token as text. It reads as a token with no known expiry (or
    /// its JWT `exp`), not as an opaque secret.
    @Test func aBareTokenSecretToolStoredReadsAsAToken() async throws {
        let store = try await SharedKeyring.store()
        let vault = Vault(store: store)
        let key = try freshKey()
        let bare = "gho_16C7e42F292c6912E7710c838347Ae178B4a"
        let stored = try secretTool(
            ["store", "--label=GitHub", "service", key.service, "account", key.account], input: Data(bare.utf8))
        #expect(stored.status == 0, "secret-tool store failed: \(stored.output)")
        let token = try #require(try await vault.token(for: key))
        #expect(token.accessToken == bare)
        #expect(token.tokenType == "Bearer")
        #expect(token.expiresAt == nil)

        // A JWT keeps its exp claim; `echo` without -n adds a line break, which is not the token's.
        // The first item is deleted first: `secret-tool store` over an existing item replaces it
        // through CreateItem, which KeePassXC 2.7.4 answers with an access dialog that headless
        // nobody can click (the store itself uses Item.SetSecret for that reason).
        #expect(try await store.delete(key))
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjE1MDAwMDAwMDB9.c2ln"  // {"exp":1500000000}
        _ = try secretTool(
            ["store", "--label=GitHub", "service", key.service, "account", key.account], input: Data("\(jwt)\n".utf8))
        let expiring = try #require(try await vault.token(for: key))
        #expect(expiring.accessToken == jwt)
        #expect(expiring.expiresAt == Date(timeIntervalSince1970: 1_500_000_000))
        #expect(try await store.delete(key))
    }
}
#endif
