#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// A write that did not finish leaves a torn tail, which every command ignores (the save never
/// succeeded). `vault status` says it is there, and that the next write cuts it off.
@Suite struct UnfinishedWriteStatusTests {
    @Test func statusNamesATornTailUntilTheNextWrite() throws {
        let sandbox = try CLISandbox()
        for service in ["first", "second"] {
            #expect(try sandbox.vault("set", service, stdin: Data("gho_fake\(service)Torn1\n".utf8)).status == 0)
        }
        #expect(try sandbox.vault("status").stdout.contains("warning:") == false)
        // The second record loses its last 10 bytes, as a write killed half-way leaves it.
        let handle = try FileHandle(forUpdating: sandbox.vaultFile)
        let size = try handle.seekToEnd()
        try handle.truncate(atOffset: size - 10)
        try handle.close()

        let list = try sandbox.vault("list", "--json")
        #expect(list.status == 0, "\(list)")
        #expect((list.json as? [[String: Any]])?.compactMap { $0["service"] as? String } == ["first"], "\(list)")
        let status = try sandbox.vault("status")
        #expect(status.status == 0, "\(status)")
        #expect(status.stdout.contains("a write that did not finish"), "\(status)")
        let json = try #require(try sandbox.vault("status", "--json").json as? [String: Any])
        #expect((json["warnings"] as? [String])?.count == 1, "\(json)")

        #expect(try sandbox.vault("set", "third", stdin: Data("gho_fakeThirdTorn1\n".utf8)).status == 0)
        let after = try sandbox.vault("status")
        #expect(!after.stdout.contains("did not finish"), "the next write did not cut the tail: \(after)")
        #expect(after.stdout.contains("entries:            2"), "\(after)")
    }
}
#endif
