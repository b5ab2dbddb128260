import Foundation
import Testing
@testable import TokenVaultSystem

/// `SystemCall.environment()` stands in for `ProcessInfo.processInfo.environment` in the `vault`
/// command (it reads `environ` in one pass over its bytes): the two must give the same
/// dictionary for a real environment, and odd entries must read as Foundation reads them. (The
/// odd entries are given as an array of their own: changing this process's environment while
/// other tests run would race with their reads of it.)
@Suite struct SystemEnvironmentTests {
    @Test func itIsTheDictionaryFoundationGives() {
        let ours = SystemCall.environment()
        #expect(!ours.isEmpty)
        #expect(ours == ProcessInfo.processInfo.environment)
    }

    @Test func oddEntriesAreReadAsFoundationReadsThem() {
        let entries: [[UInt8]] = [
            Array("PLAIN=value".utf8),
            Array("EQUALS=a=b==c".utf8),  // split at the first `=`
            Array("EMPTY=".utf8),
            Array("NO_EQUALS_SIGN".utf8),  // left out
            Array("=nameless".utf8),  // an empty name is kept
            [0x42, 0x59, 0x54, 0x45, 0x53, 0x3d, 0x61, 0xff, 0x62],  // BYTES=a\xffb: replaced
            Array("UNICODE=Grüße, 東京".utf8),
            Array("TWICE=first".utf8),
            Array("TWICE=second".utf8),  // the later one wins
        ]
        let strings = entries.map { bytes -> UnsafeMutablePointer<CChar>? in
            let string = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
            for (index, byte) in bytes.enumerated() { string[index] = CChar(bitPattern: byte) }
            string[bytes.count] = 0
            return string
        }
        defer { for string in strings { string?.deallocate() } }
        let environment = (strings + [nil]).withUnsafeBufferPointer { SystemCall.environment(from: $0.baseAddress!) }
        #expect(
            environment == [
                "PLAIN": "value", "EQUALS": "a=b==c", "EMPTY": "", "": "nameless", "BYTES": "a\u{fffd}b",
                "UNICODE": "Grüße, 東京", "TWICE": "second",
            ])
    }
}
