import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A scratch directory that acts as the home and config directory of child processes.
final class Sandbox: @unchecked Sendable {
    let root: URL

    init() throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("tokenvault-migration-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try FileManager.default.createDirectory(at: config, withIntermediateDirectories: true)
    }

    deinit {
        // Restore write permission on anything a test locked, then remove everything.
        if let items = FileManager.default.enumerator(atPath: root.path) {
            for case let item as String in items {
                _ = chmod(root.appendingPathComponent(item).path, 0o700)
            }
        }
        _ = try? FileManager.default.removeItem(at: root)
    }

    var config: URL { root.appendingPathComponent("config") }
    var home: URL { root.appendingPathComponent("home") }

    /// The environment of a child: only this sandbox's home and config.
    var environment: [String: String] {
        [
            "HOME": home.path, "XDG_CONFIG_HOME": config.path, "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
        ]
    }
}

/// A fake pair of tokens, unique per test, long enough to be found in raw plist bytes.
struct FakeTokens {
    let access = "ya29.fake-access-\(UUID().uuidString)"
    let refresh = "1//fake-refresh-\(UUID().uuidString)"
    var stdin: Data { Data("\(access)\n\(refresh)\n".utf8) }
}

struct ChildResult {
    var status: Int32
    var stdout: Data
    var stderr: String
    var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
}

enum Products {
    /// The sanitizer options of a sanitized run (`TOKENVAULT_SANITIZE=… Scripts/test`), passed on
    /// to children whose environment is otherwise built from scratch, so that a sanitized child
    /// writes its reports where the script collects them and applies the same suppressions.
    /// Empty in an ordinary run.
    static let sanitizerEnvironment: [String: String] = ProcessInfo.processInfo.environment.filter {
        ["ASAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS"].contains($0.key)
    }

    /// The build products directory: where the test bundle and the executables are.
    static var directory: URL {
        #if os(Linux)
            URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
        #else
            Bundle.allBundles.first { $0.bundlePath.hasSuffix(".xctest") }!.bundleURL.deletingLastPathComponent()
        #endif
    }

    static func executable(_ name: String) -> URL { directory.appendingPathComponent(name) }

    /// Runs an executable from the products directory with `environment` only.
    static func run(
        _ name: String, _ arguments: [String], environment: [String: String], stdin: Data = Data(),
        withoutFileOverride: Bool = false
    ) throws -> ChildResult {
        let process = Process()
        var arguments = arguments
        var executable = executable(name)
        if withoutFileOverride && geteuid() == 0 {
            // root ignores file permissions; drop the capabilities that let it, so that an
            // unwritable directory is unwritable for the child as it would be for a user.
            arguments = ["--bounding-set=-dac_override,-dac_read_search,-fowner", "--", executable.path] + arguments
            executable = URL(fileURLWithPath: "/usr/bin/setpriv")
        }
        process.executableURL = executable
        process.arguments = arguments
        process.environment = environment.merging(sanitizerEnvironment) { $1 }
        let input = Pipe()
        let output = Pipe()
        let error = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = error
        try process.run()
        input.fileHandleForWriting.write(stdin)
        try input.fileHandleForWriting.close()
        let out = output.fileHandleForReading.readDataToEndOfFile()
        let err = error.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return ChildResult(status: process.terminationStatus, stdout: out, stderr: String(decoding: err, as: UTF8.self))
    }

    /// Has Foundation's `UserDefaults`, in a child process, write a tutorial shape for `domain`.
    static func writeTutorialDefaults(_ shape: String, domain: String, tokens: FakeTokens, in sandbox: Sandbox) throws {
        let result = try run("tutorial-defaults", ["write", shape, domain], environment: sandbox.environment, stdin: tokens.stdin)
        #expect(result.status == 0, "tutorial-defaults failed: \(result.stderr)")
    }
}

extension Data {
    /// Whether `text`'s UTF-8 bytes occur anywhere in this data.
    func contains(_ text: String) -> Bool {
        range(of: Data(text.utf8)) != nil
    }
}

/// Parses a plist file's top-level dictionary and its format.
func readPlist(_ url: URL) throws -> (dictionary: NSDictionary, format: PropertyListSerialization.PropertyListFormat) {
    var format = PropertyListSerialization.PropertyListFormat.xml
    let data = try Data(contentsOf: url)
    let value = try PropertyListSerialization.propertyList(from: data, options: [], format: &format)
    return (NSDictionary(dictionary: value as! [String: Any]), format)
}

func permissions(_ url: URL) throws -> Int {
    (try FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as! NSNumber).intValue
}
