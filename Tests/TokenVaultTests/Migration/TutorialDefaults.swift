import Foundation
import Testing
@testable import TokenVaultTestSupport

import Glibc

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

extension Products {
    /// Runs an executable from the products directory with `environment` only.
    static func run(
        _ name: String, _ arguments: [String], environment: [String: String], stdin: Data = Data(),
        withoutFileOverride: Bool = false
    ) throws -> ChildResult {
        var arguments = arguments
        var executable = try executable(name)
        if withoutFileOverride && geteuid() == 0 {
            // root ignores file permissions; drop the capabilities that let it, so that an
            // unwritable directory is unwritable for the child as it would be for a user.
            arguments = ["--bounding-set=-dac_override,-dac_read_search,-fowner", "--", executable] + arguments
            executable = "/usr/bin/setpriv"
        }
        return try ChildProcess.run(executable, arguments, environment: environment, stdin: stdin)
    }

    /// Has Foundation's `UserDefaults`, in a child process, write a tutorial shape for `domain`.
    static func writeTutorialDefaults(_ shape: String, domain: String, tokens: FakeTokens, in sandbox: Sandbox) throws {
        let result = try run("tutorial-defaults", ["write", shape, domain], environment: sandbox.environment, stdin: tokens.stdin)
        #expect(result.status == 0, "tutorial-defaults failed: \(result.stderr)")
    }
}
