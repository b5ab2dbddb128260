import Foundation
import FuzzHarness
import Testing
import TokenVault

/// Replays the inputs the fuzzers found worth keeping (Fixtures/fuzz/<target>/: crashers and
/// corpus entries that reach deep paths) through the same properties the fuzz targets check
/// (Fuzz/FuzzHarness), so that a fixed crash stays fixed without a fuzzing run.
@Suite struct FuzzRegressionTests {
    /// The fixtures of one fuzz target, by file name.
    static func fixtures(_ target: String) throws -> [(name: String, bytes: [UInt8])] {
        let directory = try #require(Bundle.module.url(forResource: "Fixtures/fuzz/\(target)", withExtension: nil))
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        return try names.map { name in
            (name, [UInt8](try Data(contentsOf: directory.appendingPathComponent(name))))
        }
    }

    static func fixture(_ target: String, _ name: String) throws -> [UInt8] {
        try #require(try fixtures(target).first { $0.name == name }).bytes
    }

    // MARK: FuzzTokenResponse

    @Test func tokenResponseFixturesKeepTheProperty() throws {
        let fixtures = try Self.fixtures("FuzzTokenResponse")
        #expect(!fixtures.isEmpty)
        for (name, bytes) in fixtures {
            do {
                _ = try TokenResponseProperty.check(bytes)
            } catch {
                Issue.record("FuzzTokenResponse fixture \(name): \(error)")
            }
        }
    }
}
