#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

import Glibc

/// What differs between Secret Service providers, on the one that serves the shared bus: gnome-keyring
/// in Scripts/test's main run, KeePassXC and KWallet in its runs through Scripts/providers/run.
@Suite(.timeLimit(.minutes(3))) struct SecretServiceProviderTests {
    private func freshKey(_ account: String = "octocat") throws -> CredentialKey {
        try CredentialKey(service: "tv-provider-\(UUID().uuidString.prefix(8).lowercased())", account: account)
    }

    /// Secrets that KeePassXC treats as its own syntax: placeholders it expands when the secret is
    /// read, and references it refuses to store. Every provider either keeps them byte for byte, or
    /// the save fails loudly and leaves nothing behind: never "saved" with an altered or empty item.
    @Test(arguments: [
        #"{"access_token":"gho_{USERNAME}","token_type":"bearer"}"#,
        #"{"access_token":"gho_{S:service}x","token_type":"bearer"}"#,
        #"{"access_token":"gho_{REF:P@I:46C9B1FFBD4ABC4BBB260C6190BAD20C}","token_type":"bearer"}"#,
        #"{"access_token":"REF:{}{{}}","token_type":"bearer"}"#,
    ])
    func secretsWithBracesAreKeptOrRefusedLoudly(_ token: String) async throws {
        let store = try await SharedKeyring.store()
        let key = try freshKey()
        let secret = Data(token.utf8)
        do {
            try await store.save(secret, for: key, contentType: .json)
            #expect(try await store.load(key) == secret, "a save that succeeded must read back as written")
            #expect(try await store.delete(key))
        } catch let error as VaultError {
            #expect(error.code == .integrityFailure, "\(error)")
            #expect(error.message.contains("did not keep the secret"))
            #expect(!error.message.contains("gho_"), "the message must not show the secret")
            #expect(try await store.load(key) == nil, "a refused save leaves no item behind")
            #expect(try await store.keys(service: key.service).isEmpty)
        }
    }

    /// KeePassXC alters these on read (a placeholder that is not inside another brace pair, as a
    /// bare token's would be); the other providers keep them.
    @Test(arguments: ["gho_{USERNAME}", "gho_{S:service}x", "gho_{REF:P@I:46C9B1FFBD4ABC4BBB260C6190BAD20C}"])
    func keePassXCPlaceholdersAreRefusedOtherProvidersKeepThem(_ token: String) async throws {
        let store = try await SharedKeyring.store()
        let key = try freshKey()
        let secret = Data(token.utf8)
        if SharedKeyring.provider == "keepassxc" {
            let error = await vaultError { try await store.save(secret, for: key, contentType: .json) }
            #expect(error?.code == .integrityFailure)
            #expect(try await store.load(key) == nil, "a refused save leaves no item behind")
        } else {
            try await store.save(secret, for: key, contentType: .json)
            #expect(try await store.load(key) == secret)
            #expect(try await store.delete(key))
        }
    }

    /// A token whose scope and extra fields hold KeePassXC placeholders survives every provider:
    /// the stored JSON writes a brace inside a string as `\u007b`/`\u007d` (issue 33), so
    /// KeePassXC has nothing to expand, and reading back gives the original.
    @Test func aTokenWhoseScopeHoldsPlaceholdersSurvives() async throws {
        let vault = Vault(store: try await SharedKeyring.store())
        let key = try freshKey()
        let scope = "{USERNAME} {S:service} repo:{PASSWORD} {REF:P@I:46C9B1FFBD4ABC4BBB260C6190BAD20C}"
        var token = try OAuthToken(tokenResponse: Data(
            #"{"access_token":"gho_placeholders","token_type":"bearer","refresh_token":"ghr_x","expires_in":3600,"tenant":"{URL:HOST}"}"#.utf8))
        token.scope = scope
        try await vault.saveToken(token, for: key, registration: try ClientRegistration(
            tokenEndpoint: try #require(URL(string: "https://auth.example.com/{USERNAME}/token")), clientID: "{S:client}"))
        let stored = try #require(try await vault.store.load(key))
        let text = String(decoding: stored, as: UTF8.self)
        #expect(!text.contains("{USERNAME}") && text.contains(#"\u007bUSERNAME\u007d"#), "no placeholder for KeePassXC to expand")
        let read = try #require(try await vault.token(for: key))
        #expect(read.scope == scope)
        #expect(read.additionalFields["tenant"] == .string("{URL:HOST}"))
        #expect(read.accessToken == token.accessToken && read.refreshToken == token.refreshToken)
        #expect(try await vault.registration(for: key)?.clientID == "{S:client}")
        #expect(try await vault.delete(key))
    }

    /// A failed overwrite puts the previous value back.
    @Test func aRefusedOverwriteKeepsThePreviousValue() async throws {
        let store = try await SharedKeyring.store()
        let key = try freshKey()
        let before = Data(#"{"access_token":"gho_before","token_type":"bearer"}"#.utf8)
        try await store.save(before, for: key, contentType: .json)
        let refused = Data("gho_{REF:P@I:46C9B1FFBD4ABC4BBB260C6190BAD20C}".utf8)
        do {
            try await store.save(refused, for: key, contentType: .json)
            #expect(SharedKeyring.provider != "keepassxc", "KeePassXC refuses {REF:…}")
            #expect(try await store.load(key) == refused)
        } catch let error as VaultError {
            #expect(error.code == .integrityFailure, "\(error)")
            #expect(error.message.contains("previous value was put back") || error.message.contains("value is unchanged"))
            #expect(try await store.load(key) == before)
        }
        #expect(try await store.keys(service: key.service) == [key])
        #expect(try await store.delete(key))
    }

    /// Items that earlier releases stored with the content type `application/json` read as before,
    /// and are overwritten in place.
    @Test func itemsStoredAsApplicationJSONStillRead() async throws {
        let store = try await SharedKeyring.store()
        let key = try freshKey()
        let old = Data(#"{"access_token":"gho_legacy","token_type":"bearer"}"#.utf8)
        try await store.save(old, for: key, contentType: .json, wireContentType: "application/json")
        #expect(try await store.load(key) == old)
        let new = Data(#"{"access_token":"gho_current","token_type":"bearer"}"#.utf8)
        try await store.save(new, for: key, contentType: .json)
        #expect(try await store.load(key) == new)
        #expect(try await store.keys(service: key.service) == [key])
        #expect(try await store.delete(key))
    }

    @Test func tokensGoAsTextOtherBytesAsOctetStream() {
        #expect(SecretServiceStore.wireContentType(.json) == "text/plain")
        #expect(SecretServiceStore.wireContentType(.text) == "text/plain")
        #expect(SecretServiceStore.wireContentType(.binary) == "application/octet-stream")
    }
}

/// A locked collection on the provider of the shared bus is `locked`, fast, for every operation:
/// KeePassXC answers a search in a locked database with no items at all, so "absent" would be a lie.
///
/// It locks the provider for good (no headless unlock), so Scripts/test runs it last, on its own,
/// for KeePassXC and KWallet. On gnome-keyring it locks a keyring of its own instead of the one
/// every other test shares.
@Suite(.timeLimit(.minutes(2))) struct SecretServiceLockedProviderTests {
    @Test func aLockedCollectionIsLockedNeverAbsent() async throws {
        var privateBus: PrivateBus?
        let environment: [String: String]
        if SharedKeyring.provider == "gnome-keyring" {
            _ = try SharedKeyring.environment()
            let bus = try await PrivateBus.start()
            try await bus.startKeyring(password: "locked-provider-password")
            privateBus = bus
            environment = bus.environment
        } else {
            environment = try SharedKeyring.environment()
        }
        let check = try await SecretServiceCheck.start(environment: environment)
        let service = "tv-locked-\(UUID().uuidString.prefix(8).lowercased())"
        #expect(try await check.send("open 10000 0").ok)
        #expect(try await check.send("save \(service) octocat before-the-lock").ok)

        let address = try #require(environment["DBUS_SESSION_BUS_ADDRESS"])
        try await ProviderBus(address: address).lockDefaultCollection()

        for command in ["load \(service) octocat", "load \(service) nobody", "keys", "save \(service) octocat after-the-lock",
                        "save \(service) newcomer value", "delete \(service) octocat"] {
            let answer = try await check.send(command)
            #expect(answer.code == "locked", "\(command) on a locked \(SharedKeyring.provider): \(answer.fields)")
            #expect(answer.message.contains("no unlock prompt can be shown"), "\(answer.fields)")
            #expect(answer.elapsed < .seconds(2), "\(command) took \(answer.elapsed)")
        }
        await privateBus?.stop()
    }
}

/// `dbus-send` on a provider's bus.
struct ProviderBus {
    let address: String

    @discardableResult
    func send(_ arguments: [String]) async throws -> String {
        let address = self.address
        return try await offPool {
            let result = try ChildProcess.run(
                "/usr/bin/dbus-send", ["--bus=\(address)", "--print-reply", "--dest=org.freedesktop.secrets"] + arguments,
                environment: ["PATH": "/usr/bin:/bin"])
            guard result.status == 0 else { throw SetupFailure("dbus-send \(arguments): \(result.stderr)") }
            return result.stdoutText
        }
    }

    private static func objectPath(_ reply: String) -> String? {
        guard let range = reply.range(of: "object path \"") else { return nil }
        return String(reply[range.upperBound...].prefix { $0 != "\"" })
    }

    /// Locks the default collection through the Secret Service's own `Lock` (and the prompt that
    /// KeePassXC returns for it), then waits until the collection says it is locked.
    func lockDefaultCollection() async throws {
        let alias = try await send(["/org/freedesktop/secrets", "org.freedesktop.Secret.Service.ReadAlias", "string:default"])
        let collection = try #require(Self.objectPath(alias))
        let reply = try await send(["/org/freedesktop/secrets", "org.freedesktop.Secret.Service.Lock", "array:objpath:\(collection)"])
        // The reply holds the locked objects, then the prompt ("/" when none is needed).
        if let range = reply.range(of: "/org/freedesktop/secrets/prompt/") {
            let prompt = "/org/freedesktop/secrets/prompt/" + reply[range.upperBound...].prefix { $0 != "\"" }
            try await send([prompt, "org.freedesktop.Secret.Prompt.Prompt", "string:"])
        }
        for _ in 0..<100 {
            let locked = try await send([
                collection, "org.freedesktop.DBus.Properties.Get", "string:org.freedesktop.Secret.Collection", "string:Locked",
            ])
            if locked.contains("boolean true") { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw SetupFailure("\(collection) did not lock within 5 s")
    }
}
#endif
