import Foundation
import Testing
import TokenVault

@Suite struct CredentialKeyTests {
    @Test(arguments: [
        ("", "a"), ("s", ""), ("line\nbreak", "a"), ("s", "tab\there"), ("s", "nul\u{0}"),
        ("del\u{7F}", "a"), ("s", "c1\u{85}control"), ("bell\u{07}", "a"),
    ])
    func refusesEmptyPartsAndControlCharacters(service: String, account: String) {
        let error = #expect(throws: VaultError.self) { try CredentialKey(service: service, account: account) }
        #expect(error?.code == .invalidInput)
    }

    @Test func refusesOverlongParts() {
        let long = String(repeating: "é", count: 513)  // 1026 UTF-8 bytes
        #expect(throws: VaultError.self) { try CredentialKey(service: long) }
        #expect(throws: Never.self) { try CredentialKey(service: String(repeating: "a", count: 1024)) }
    }

    @Test func accountDefaultsToDefault() throws {
        #expect(try CredentialKey(service: "github").account == "default")
    }

    @Test func acceptsUnicodeAndPunctuation() throws {
        let key = try CredentialKey(service: "com.example.app 🔑", account: "user@example.com")
        #expect(key.service == "com.example.app 🔑")
        #expect(key.description == "com.example.app 🔑/user@example.com")
    }

    @Test func normalisesToNFC() throws {
        let decomposed = try CredentialKey(service: "cafe\u{301}", account: "a")
        #expect(Array(decomposed.service.unicodeScalars) == Array("caf\u{E9}".unicodeScalars))
    }

    @Test func decodingValidatesToo() throws {
        let bad = Data(#"{"service":"","account":"a"}"#.utf8)
        #expect(throws: VaultError.self) { try JSONDecoder().decode(CredentialKey.self, from: bad) }
        let good = try JSONDecoder().decode(CredentialKey.self, from: Data(#"{"service":"s","account":"a"}"#.utf8))
        #expect(good == (try CredentialKey(service: "s", account: "a")))
    }

    @Test func sortsByServiceThenAccount() throws {
        let keys = try [
            CredentialKey(service: "b", account: "a"), CredentialKey(service: "a", account: "z"),
            CredentialKey(service: "a", account: "b"),
        ]
        #expect(keys.sorted().map(\.description) == ["a/b", "a/z", "b/a"])
    }
}
