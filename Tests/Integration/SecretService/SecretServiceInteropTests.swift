import Foundation
import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

/// TokenVault and the real `secret-tool` (libsecret-tools) read each other's items through the
/// documented attributes, `service` and `account`, on the shared gnome-keyring.
@Suite(.timeLimit(.minutes(3))) struct SecretServiceInteropTests {
    /// Runs secret-tool against the shared keyring, `input` on its stdin.
    ///
    /// kwalletd5 5.103 now and then drops a client's fresh session while other clients open and
    /// close theirs (secret-tool then says "Can't find session …" and may leave an item with a
    /// garbled secret). That is secret-tool's session with KWallet, not TokenVault's reading, so a
    /// run that failed that way is retried with a new secret-tool process, up to twice. So is one
    /// that kwalletd5 refused with "Client public key size is invalid": libsecret sends its
    /// Diffie-Hellman key without leading zero bytes and kwalletd5 wants 128 of them, one session
    /// in 256 (TokenVault's store draws a new key itself; secret-tool cannot). On KWallet, a
    /// `lookup` that prints nothing and exits 1 is retried too: the same kwalletd5 fault can
    /// answer a fresh session's GetSecrets with nothing for an item its search just listed
    /// (Backends.md; TokenVault's store retries that on a new session itself), and secret-tool
    /// then reports "not found" (a clean-clone CI run, right after the store had saved and read
    /// the item back). An item that is really missing still fails all three attempts.
    private func secretTool(_ arguments: [String], input: Data? = nil) throws -> (status: Int32, output: String) {
        var result = try secretToolOnce(arguments, input: input)
        for _ in 0..<2 where result.status != 0
            && (result.output.contains("Can't find session") || result.output.contains("Client public key size is invalid")
                || (SharedKeyring.provider == "kwallet" && arguments.first == "lookup" && result.output.isEmpty)) {
            result = try secretToolOnce(arguments, input: input)
        }
        return result
    }

    private func secretToolOnce(_ arguments: [String], input: Data?) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/secret-tool")
        process.arguments = arguments
        process.environment = try SharedKeyring.environment()
        let output = Pipe()
        let stdin = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = stdin
        try process.run()
        // Bounded: a provider that waits on a dialog nobody can see (KeePassXC 2.7.4 asks before
        // `secret-tool store` replaces an item) must fail this test, not hang the whole run.
        // SIGKILL: Foundation's Process passes on the test runner's blocked signal mask, so a
        // SIGTERM would never arrive.
        let pid = process.processIdentifier
        let watchdog = DispatchWorkItem { if process.isRunning { _ = kill(pid, SIGKILL) } }
        DispatchQueue.global().asyncAfter(deadline: .now() + 30, execute: watchdog)
        defer { watchdog.cancel() }
        if let input { stdin.fileHandleForWriting.write(input) }
        try stdin.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
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
