import Foundation
import Testing
import TokenVault

/// Names that are not UTF-8 would be repaired into U+FFFD, so two of them would name one entry;
/// bidirectional overrides make one name print as another.
@Suite struct CredentialKeyNameTests {
    @Test func bytesThatAreNotUTF8AreRefusedNotRepaired() throws {
        for bytes: [UInt8] in [[0x63, 0x61, 0x66, 0xE8], [0x63, 0x61, 0x66, 0xE9], [0xFF], [0xC0, 0x80]] {
            let error = try #require(throws: VaultError.self) {
                try CredentialKey(utf8Service: bytes, utf8Account: Array("a".utf8))
            }
            #expect(error.code == .invalidInput)
            #expect(error.message == "The service name is not valid UTF-8.")
            #expect(throws: VaultError.self) { try CredentialKey(utf8Service: Array("s".utf8), utf8Account: bytes) }
        }
        let key = try CredentialKey(utf8Service: Array("café".utf8), utf8Account: Array("a".utf8))
        #expect(key.service == "café")
    }

    /// What `String(decoding:as:)` or `CommandLine.arguments` make of those bytes is refused too.
    @Test func aRepairedNameIsRefused() throws {
        let repaired = String(decoding: [0x63, 0x61, 0x66, 0xE8] as [UInt8], as: UTF8.self)
        #expect(repaired == "caf\u{FFFD}")
        let error = try #require(throws: VaultError.self) { try CredentialKey(service: repaired) }
        #expect(error.code == .invalidInput)
        #expect(error.message.contains("U+FFFD"), "\(error)")
        #expect(throws: VaultError.self) { try CredentialKey(service: "s", account: repaired) }
    }

    @Test(arguments: ["\u{202A}", "\u{202B}", "\u{202C}", "\u{202D}", "\u{202E}", "\u{2066}", "\u{2067}", "\u{2068}", "\u{2069}"])
    func bidirectionalFormattingIsRefused(_ character: String) throws {
        let error = try #require(throws: VaultError.self) { try CredentialKey(service: "moc.\(character)elpmaxe") }
        #expect(error.code == .invalidInput)
        #expect(error.message.contains("bidirectional"), "\(error)")
        #expect(throws: VaultError.self) { try CredentialKey(service: "s", account: "user\(character)") }
    }

    /// Right-to-left text itself is a name like any other.
    @Test func rightToLeftLettersAreNames() throws {
        #expect(try CredentialKey(service: "שירות", account: "حساب").service == "שירות")
    }

    @Test func escapedForPrinting() {
        #expect(CredentialKey.escaped("a\u{202E}b\u{1B}c\u{FFFD}d") == #"a\u{202E}b\u{1B}c\u{FFFD}d"#)
        #expect(CredentialKey.escaped("plain café") == "plain café")
    }
}
