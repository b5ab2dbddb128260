import Foundation
import Testing
@testable import TokenVault

/// The helpers that replaced Foundation's NSString, CharacterSet and `String(format:)` when
/// TokenVault moved to FoundationEssentials give what Foundation gave, on the inputs TokenVault
/// hands them and on the awkward ones (this test target still links Foundation to compare).
@Suite struct TextAndPathsTests {
    /// (path, its last component, without it, with `x` appended), as NSString gives them. Written
    /// out rather than asked of NSString here: Foundation 6.3's `deletingLastPathComponent` traps
    /// on some one-character strings ("a"), one reason TokenVault no longer calls it.
    static let paths: [(String, String, String, String)] = [
        ("/", "/", "/", "/x"), ("", "", "", "x"), ("a", "a", "", "a/x"), ("a/", "a", "", "a/x"), ("/a", "a", "/", "/a/x"),
        ("/a/", "a", "/", "/a/x"), ("/a/b", "b", "/a", "/a/b/x"), ("/a/b/", "b", "/a", "/a/b/x"), ("a/b", "b", "a", "a/b/x"),
        ("/a/b/c.vault", "c.vault", "/a/b", "/a/b/c.vault/x"), ("/a/.", ".", "/a", "/a/./x"), ("./a", "a", ".", "./a/x"),
        ("/home/user/.local/share/token-vault/tokens.vault", "tokens.vault", "/home/user/.local/share/token-vault",
         "/home/user/.local/share/token-vault/tokens.vault/x"),
    ]

    @Test func pathArithmeticIsNSStrings() {
        for (path, last, parent, appended) in Self.paths {
            #expect(PathText.lastComponent(path) == last, "\(path)")
            #expect(PathText.deletingLastComponent(path) == parent, "\(path)")
            #expect(PathText.appending(path, "x") == appended, "\(path)")
        }
        #expect(PathText.appending("/run/credentials/x.service", "vault-key") == "/run/credentials/x.service/vault-key")
    }

    /// Symbolic links are resolved as NSString's `standardizingPath` resolves them on Linux; `.`,
    /// `..`, doubled and trailing slashes go; what does not exist is kept as written. A link with a
    /// relative target, which NSString left unresolved, is resolved as realpath(3) would.
    @Test func standardizingResolvesLinksAsNSStringDoes() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("tv-paths-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        let real = (root as NSString).resolvingSymlinksInPath + "/real"
        try FileManager.default.createDirectory(atPath: real + "/inner", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: root + "/link", withDestinationPath: real)
        try FileManager.default.createSymbolicLink(atPath: root + "/relative", withDestinationPath: "real/inner")
        let resolved = (root as NSString).resolvingSymlinksInPath
        for path in [
            root + "/link/tokens.vault", root + "/link/inner/../tokens.vault", root + "/./real//tokens.vault", root + "/real/",
            root + "/missing/tokens.vault", "/",
        ] {
            #expect(PathText.standardized(path) == (path as NSString).standardizingPath, "\(path)")
        }
        #expect(PathText.standardized(root + "/link/tokens.vault") == resolved + "/real/tokens.vault")
        #expect(PathText.standardized(root + "/relative/tokens.vault") == resolved + "/real/inner/tokens.vault")
        #expect(PathText.standardized(root + "/relative/../tokens.vault") == resolved + "/real/tokens.vault")
        #expect(PathText.standardized("~/x", home: "/home/someone") == "/home/someone/x")
    }

    @Test func trimmingIsCharacterSets() {
        for text in ["", " ", "  a b  ", "\ta\t", "\u{00A0}a\u{2003}", "\na\r\n", "a\u{2028}", "\u{85}x\u{85}", " \n x \n "] {
            #expect(text.trimmingWhitespace() == text.trimmingCharacters(in: .whitespaces), "\(text.debugDescription)")
            #expect(text.trimmingWhitespaceAndNewlines() == text.trimmingCharacters(in: .whitespacesAndNewlines), "\(text.debugDescription)")
        }
    }

    @Test func caseIsIgnoredAsCaseInsensitiveCompareIgnoresIt() {
        let pairs = [
            ("DPoP", "dpop"), ("Bearer", "BEARER"), ("WWW-Authenticate", "www-authenticate"), ("a", "b"), ("@", "`"), ("[", "{"),
            ("Content-Type", "Content-Typ"), ("É", "é"), ("", ""),
        ]
        for (left, right) in pairs {
            #expect(left.equalsIgnoringCase(right) == (left.caseInsensitiveCompare(right) == .orderedSame), "\(left) \(right)")
        }
    }

    @Test func numbersAreFormattedAsStringFormatFormatsThem() {
        for byte: UInt8 in [0, 1, 0x0F, 0x10, 0x7F, 0xAB, 0xFF] {
            #expect(hexString([byte, byte]) == String(format: "%02x%02x", byte, byte))
            #expect(hexDigits(byte, width: 2, uppercase: true) == String(format: "%02X", byte))
        }
        for value: UInt64 in [0, 8, 259, 0xFFFF_FFFF] {
            #expect(hexDigits(value, width: 8, uppercase: true) == String(format: "%08llX", value))
            #expect(hexDigits(value, width: 2) == String(format: "%02llx", value))
        }
        // Durations in messages; values halfway between two tenths may round the other way.
        for value in [0.0, 0.04, 0.06, 2.5, 7.0, 59.96, 123.44] {
            #expect(oneDecimal(value) == String(format: "%.1f", value), "\(value)")
        }
    }

    @Test func percentDecodingIsRemovingPercentEncodings() {
        for text in ["", "plain", "a%20b", "%E2%9C%93", "%zz", "%", "%4", "100%25", "%C3%28", "a+b", "%2F%2f"] {
            #expect(text.percentDecoded == text.removingPercentEncoding, "\(text)")
        }
    }
}
