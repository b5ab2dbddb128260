// The one way the tests find an executable of this package (the `vault` command and the helpers
// in Tests/Helpers), and what every child inherits from a sanitized run.
import Foundation

enum Products {
    /// The build products directory: `swift build --build-tests` puts the test bundle and every
    /// executable target there.
    static var directory: URL {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
    }

    /// The path of the executable `name`, or a failure that says how to build it.
    static func executable(_ name: String) throws -> String {
        let path = directory.appendingPathComponent(name).path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw SetupFailure("\(name) is not built next to the tests (\(directory.path)); run swift build --build-tests (or Scripts/test) first")
        }
        return path
    }

    /// The sanitizer options of a sanitized run (`TOKENVAULT_SANITIZE=… Scripts/test`), passed on
    /// to children whose environment is otherwise built from scratch, so that a sanitized child
    /// writes its reports where the script collects them and applies the same suppressions.
    /// Empty in an ordinary run.
    static let sanitizerEnvironment: [String: String] = ProcessInfo.processInfo.environment.filter {
        ["ASAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS"].contains($0.key)
    }
}

/// Files of the package itself (README.md, Tests/git-server/…), found from the package root: the
/// nearest directory above `file` that holds Package.swift. Tests name paths from the root, so
/// moving a test file does not break them.
enum PackageFiles {
    static func path(_ relative: String, from file: String = #filePath) -> String {
        var directory = URL(fileURLWithPath: file).deletingLastPathComponent()
        while directory.path != "/" {
            if FileManager.default.fileExists(atPath: directory.appendingPathComponent("Package.swift").path) {
                return directory.appendingPathComponent(relative).path
            }
            directory.deleteLastPathComponent()
        }
        return relative
    }
}
