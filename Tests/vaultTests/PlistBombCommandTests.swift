#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault

/// `vault migrate` refuses a plist bomb quickly, in bounded memory (measured by /usr/bin/time).
@Suite struct PlistBombCommandTests {
    /// A binary plist of a few hundred bytes that Foundation would expand into 2^40 objects.
    @Test func aPlistBombIsRefusedQuicklyInBoundedMemory() throws {
        let sandbox = try CLISandbox()
        let url = sandbox.root.appendingPathComponent("bomb.plist")
        let bomb = HostilePlist.sharedReferences(levels: 40)
        #expect(bomb.count < 600)
        try bomb.write(to: url)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/time")
        process.arguments =
            ["-f", "tv-measured %e %M", Products.directory.appendingPathComponent("vault").path, "migrate", "--dry-run", "--plist", url.path]
            + sandbox.fileVault
        process.environment = sandbox.environment
        let error = Pipe()
        process.standardError = error
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let stderr = String(decoding: error.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 1, "\(stderr)")
        #expect(stderr.contains("was refused without being parsed"), "\(stderr)")
        let measured = try #require(stderr.split(separator: "\n").last { $0.hasPrefix("tv-measured ") })
        let fields = measured.split(separator: " ")
        let seconds = try #require(Double(fields[1]))
        let kilobytes = try #require(Int(fields[2]))
        #expect(seconds < 5, "took \(seconds) s")
        #expect(kilobytes < 150_000, "peak RSS \(kilobytes) KiB")
    }
}
#endif
