#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
import TokenVaultTesting
@testable import TokenVaultTestSupport
@testable import TokenVault

/// The conformance suite and the store's own behaviour, against the real provider that Scripts/test
/// runs on a private session bus (gnome-keyring, then KeePassXC and KWallet).
// The limit is a guard against a hang: "many keys" makes gnome-keyring rewrite (and fsync) its
// whole file twice per key while the other suites use the same daemon.
@Suite(.timeLimit(.minutes(10))) struct SecretServiceStoreTests {
    @Test(arguments: StoreConformance.cases)
    func conformance(_ check: StoreConformance.Case) async throws {
        let store = try await SharedKeyring.store()
        let namespace = StoreConformance.Namespace()
        // "Many keys" on a provider: enough that a listing or a lookup that loses or mixes up
        // entries shows. gnome-keyring rewrites and fsyncs its whole file on each change, about
        // 0.1 s a key here: with 1,000 keys this one case took 103 s on an idle machine and was
        // the whole library stage of Scripts/test (the next longest test took 39 s), so 300.
        // KeePassXC searches its entries one by one, so a thousand keys cost it minutes: 200.
        let manyKeys = SharedKeyring.provider == "gnome-keyring" ? 300 : 200
        try await check.run(
            on: store, traits: .init(maximumSecretSize: SecretServiceStore.maximumSecretSize, manyKeysCount: manyKeys), namespace: namespace)
        // Leave the shared keyring as it was: gnome-keyring rewrites its whole file on each
        // change, so leftovers would slow every later test down.
        for key in try await store.keys() where key.service.hasPrefix(namespace.prefix) {
            try await store.delete(key)
        }
    }

    @Test func backendName() async throws {
        #expect(try await SharedKeyring.store().backendName == "secret-service")
    }

    @Test func largestSecretRoundTripsAndOneByteMoreIsRefused() async throws {
        // On a keyring of its own: gnome-keyring rewrites its whole file on every change, so a
        // 16 MiB item in the shared keyring would slow every other test down.
        let bus = try await PrivateBus.start()
        try await bus.startKeyring(password: "largest-secret-password")
        let check = try await SecretServiceCheck.start(environment: bus.environment, wholeStacks: false)
        let largest = SecretServiceStore.maximumSecretSize
        #expect(try await check.send("open 60000 0").ok)
        #expect(try await check.send("save-size big secret \(largest)").ok)
        let loaded = try await check.send("load-size big secret \(largest)")
        #expect(loaded["bytes"] as? Int == largest)
        #expect(loaded["matches"] as? Bool == true)

        let tooLarge = try await check.send("save-size big secret \(largest + 1)")
        #expect(tooLarge.code == "too-large", "\(tooLarge.fields)")
        #expect(tooLarge.message.contains("\(largest)"))
        #expect(tooLarge.elapsed < .seconds(1), "refused before anything is sent")
        // The refused save left the stored value alone.
        #expect(try await check.send("load-size big secret \(largest)")["matches"] as? Bool == true)
    }

    @Test func storesOpenedSeparatelySeeEachOthersWrites() async throws {
        let writer = try await SharedKeyring.store()
        let reader = try await SharedKeyring.store()
        let key = try CredentialKey(service: "tv-ss-two-\(UUID().uuidString.prefix(8))", account: "octocat")
        #expect(try await reader.load(key) == nil)
        try await writer.save(Data("one".utf8), for: key, contentType: .json)
        #expect(try await reader.load(key) == Data("one".utf8))
        try await reader.save(Data("two".utf8), for: key, contentType: .json)
        #expect(try await writer.load(key) == Data("two".utf8))
        #expect(try await writer.delete(key))
        #expect(try await reader.load(key) == nil)
    }

    @Test func tokensRoundTripThroughTheVaultFacade() async throws {
        _ = try SharedKeyring.environment()
        // The shared keyring's deadline (see SharedKeyring.store): other tests keep it busy.
        let vault = try await Vault.open(VaultConfiguration(
            backend: .secretService, secretService: .init(timeout: .seconds(30), unlockPrompt: false)))
        #expect(vault.selection.backend == .secretService)
        // Named, it is connected to without a probe first (issue 17).
        #expect(vault.selection.probe == nil)
        #expect(vault.selection.reason == "the Secret Service was requested")
        let key = try CredentialKey(service: "tv-ss-facade-\(UUID().uuidString.prefix(8))", account: "octocat")
        let token = try OAuthToken(
            tokenResponse: Data(#"{"access_token":"gho_facadeAccessToken1234","token_type":"bearer","expires_in":3600,"refresh_token":"ghr_facadeRefresh5678"}"#.utf8),
            receivedAt: Date(timeIntervalSince1970: 1_900_000_000))
        try await vault.saveToken(token, for: key)
        #expect(try await vault.token(for: key) == token)
        #expect(try await vault.keys(service: key.service) == [key])
        #expect(try await vault.delete(key))
    }

    @Test func autoPicksTheSecretServiceWhenTheKeyringIsUp() async throws {
        _ = try SharedKeyring.environment()
        let directory = try TemporaryDirectory()
        let vault = try await Vault.open(VaultConfiguration(
            backend: .auto, filePath: directory.file("vault"), keySource: .keyFile(directory.keyFile()),
            secretService: .init(unlockPrompt: false)))
        #expect(vault.selection.backend == .secretService)
        #expect(vault.selection.reason.contains("available"))
        #expect(!FileManager.default.fileExists(atPath: directory.file("vault")), "auto must not touch the file when it uses the keyring")
    }
}
#endif
