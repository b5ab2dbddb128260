import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
@testable import TokenVaultMigration

/// Plists of a few hundred bytes that would make Foundation build millions of objects are
/// refused before Foundation sees them: the work a plist can cause is bounded, not only its size.
@Suite struct HostilePlistTests {
    static func migrate(_ data: Data, named name: String) async throws -> (VaultError?, Duration) {
        let directory = try TemporaryDirectory()
        let url = URL(fileURLWithPath: directory.file(name))
        try data.write(to: url)
        let clock = ContinuousClock()
        let start = clock.now
        var caught: VaultError?
        do {
            _ = try await Vault(store: MemoryStore()).migrateDefaults(
                plistAt: url, options: MigrationOptions(removeSource: true, dryRun: true))
        } catch let error as VaultError {
            caught = error
        }
        return (caught, clock.now - start)
    }

    /// 22 levels: 352 bytes that Foundation would expand into 4 million objects.
    @Test func sharedReferencesAreRefusedBeforeParsing() async throws {
        let data = HostilePlist.sharedReferences(levels: 22)
        #expect(data.count < 400)
        let (error, elapsed) = try await Self.migrate(data, named: "bomb.plist")
        let refusal = try #require(error)
        #expect(refusal.code == .tooLarge, "\(refusal)")
        #expect(refusal.message.contains("more than 1,000,000 objects"), "\(refusal)")
        #expect(refusal.message.contains("nothing was changed"), "\(refusal)")
        #expect(elapsed < .seconds(1), "refused in \(elapsed)")
    }

    /// The same shape, shallow enough to be a real plist, is read as before.
    @Test func sharedReferencesWithinTheBudgetAreRead() async throws {
        let (error, _) = try await Self.migrate(HostilePlist.sharedReferences(levels: 8), named: "fine.plist")
        #expect(error == nil, "\(String(describing: error))")
    }

    /// An array that contains itself is refused, not walked forever.
    @Test func aCycleIsRefused() async throws {
        var bytes = [UInt8](HostilePlist.sharedReferences(levels: 1))
        // Object 2 (the array) refers to object 1 twice; make it refer to itself: refs at 8+2+2+1.
        let arrayOffset = 8 + 2 + 2
        #expect(bytes[arrayOffset] == 0xA2)
        bytes[arrayOffset + 2] = 2
        let (error, elapsed) = try await Self.migrate(Data(bytes), named: "cycle.plist")
        #expect(error?.code == .tooLarge, "\(String(describing: error))")
        #expect(error?.message.contains("contains itself") == true, "\(String(describing: error))")
        #expect(elapsed < .seconds(1))
    }

    /// XML has no references, but 1.1 million elements in 8 MB, or nesting 100,000 deep, are no
    /// defaults plist either: counted and refused without parsing. (A plain parse of the wide one
    /// finds no token and succeeds, so the refusal itself shows it was not parsed.)
    @Test func hugeOrDeepXMLIsRefused() async throws {
        let header = #"<?xml version="1.0" encoding="UTF-8"?><plist version="1.0"><dict><key>k</key>"#
        let many = header + "<array>" + String(repeating: "<true/>", count: 1_100_000) + "</array></dict></plist>"
        let (wide, _) = try await Self.migrate(Data(many.utf8), named: "wide.plist")
        #expect(wide?.code == .tooLarge, "\(String(describing: wide))")
        #expect(wide?.message.contains("more than 1,000,000 objects") == true, "\(String(describing: wide))")

        let deep = header + String(repeating: "<array>", count: 100_000) + String(repeating: "</array>", count: 100_000)
            + "</dict></plist>"
        let (nested, _) = try await Self.migrate(Data(deep.utf8), named: "deep.plist")
        #expect(nested?.code == .tooLarge, "\(String(describing: nested))")
        #expect(nested?.message.contains("more than 512 levels deep") == true, "\(String(describing: nested))")
    }

    /// An object table longer than the budget is refused before anything is sized by it, even
    /// when only a few of its objects are reachable.
    @Test func anOversizedObjectTableIsRefused() async throws {
        func be(_ value: Int, _ size: Int) -> [UInt8] { (0..<size).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }
        let count = 1_100_000
        var bytes = Array("bplist00".utf8) + [0x51, UInt8(ascii: "k"), 0xD1, 0, 0, 0, 0]  // "k", {k: k}
        bytes += [UInt8](repeating: 0x08, count: count - 2)  // false, never referred to
        let table = bytes.count
        bytes += be(8, 4) + be(10, 4)
        for index in 2..<count { bytes += be(15 + index - 2, 4) }
        bytes += [0, 0, 0, 0, 0, 0, 4, 2] + be(count, 8) + be(1, 8) + be(table, 8)
        let (error, _) = try await Self.migrate(Data(bytes), named: "table.plist")
        #expect(error?.code == .tooLarge, "\(String(describing: error))")
        #expect(error?.message.contains("more than 1,000,000 objects") == true, "\(String(describing: error))")
    }
}
