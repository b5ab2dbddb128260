import Foundation
import FuzzHarness

/// A private (0700) scratch directory for one test, removed when the test ends.
final class TemporaryDirectory: Sendable {
    let path: String

    init() throws {
        path = FuzzEntry.scratchDirectory("tokenvault-fuzz-test")
    }

    func file(_ name: String) -> String { path + "/" + name }

    deinit {
        try? FileManager.default.removeItem(atPath: path)  // cleanup of a scratch dir, not a vault write
    }
}

enum FileTestSupport {
    /// Writes `bytes` to `path` with `mode`.
    static func write(_ bytes: [UInt8], to path: String, mode: Int = 0o600) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
    }
}
