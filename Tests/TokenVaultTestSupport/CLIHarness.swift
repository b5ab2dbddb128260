import Foundation
import Testing

import Glibc

// The `vault` command run as a user would run it, for the end-to-end tests.

/// Runs the built `vault` binary as a user would: a separate process, its own home, config and
/// vault file, a generated key file, the token on stdin.
final class CLISandbox: @unchecked Sendable {
    let root: URL

    init() throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("tokenvault-cli-\(UUID().uuidString)")
        for directory in [root, config, home, data] {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        try Self.writeKeyFile(keyFile)
    }

    deinit {
        if let items = FileManager.default.enumerator(atPath: root.path) {
            for case let item as String in items { _ = chmod(root.appendingPathComponent(item).path, 0o700) }
        }
        _ = try? FileManager.default.removeItem(at: root)
    }

    var config: URL { root.appendingPathComponent("config") }
    var home: URL { root.appendingPathComponent("home") }
    var data: URL { root.appendingPathComponent("data") }
    var vaultFile: URL { data.appendingPathComponent("tokens.vault") }
    var keyFile: URL { root.appendingPathComponent("vault.key") }

    /// 32 random bytes as 64 hex digits, in a file created `0600`.
    static func writeKeyFile(_ url: URL) throws {
        var bytes = [UInt8](repeating: 0, count: 32)
        for index in bytes.indices { bytes[index] = UInt8.random(in: 0...255) }
        let hex = bytes.map { String(format: "%02x", $0) }.joined()
        let fd = open(url.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        #expect(fd >= 0)
        defer { _ = close(fd) }
        let written = hex.withCString { write(fd, $0, 64) }
        #expect(written == 64)
    }

    /// A child's whole environment: nothing of the test runner's (no D-Bus, no TOKEN_VAULT_*) but
    /// the sanitizer options of a sanitized run.
    var environment: [String: String] {
        [
            "HOME": home.path, "XDG_CONFIG_HOME": config.path, "XDG_DATA_HOME": data.path, "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8", "COLUMNS": "80",
        ].merging(Products.sanitizerEnvironment) { $1 }
    }

    /// The global options for the file backend with this sandbox's key file.
    var fileVault: [String] { fileVault(vaultFile) }

    /// The global options for the file backend at `file` with this sandbox's key file.
    func fileVault(_ file: URL) -> [String] { ["--backend", "file", "--file", file.path, "--key-file", keyFile.path] }

    /// Runs `vault` with the file-vault options appended (for the vault at `file`, if given).
    @discardableResult
    func vault(
        _ arguments: String..., file: URL? = nil, stdin: Data = Data(), environment extra: [String: String] = [:]
    ) throws -> CLIResult {
        try run("vault", arguments + fileVault(file ?? vaultFile), stdin: stdin, environment: extra)
    }

    /// Runs an executable from the build products directory. Its stdin is a pipe holding
    /// `stdin`, or with `stdinPath` that file (or directory) opened for reading, as `< path` does.
    func run(
        _ name: String, _ arguments: [String], stdin: Data = Data(), stdinPath: String? = nil,
        environment extra: [String: String] = [:], withoutFileOverride: Bool = false
    ) throws -> CLIResult {
        var arguments = arguments
        var executable = try Products.executable(name)
        if withoutFileOverride && geteuid() == 0 {
            // root ignores file permissions; the child drops the capabilities that let it.
            arguments = ["--bounding-set=-dac_override,-dac_read_search,-fowner", "--", executable] + arguments
            executable = "/usr/bin/setpriv"
        }
        let result = try ChildProcess.run(
            executable, arguments, environment: environment.merging(extra) { $1 }, stdin: stdin, stdinPath: stdinPath)
        return CLIResult(status: result.status, stdout: result.stdoutText, stderr: result.stderr)
    }

    /// Has Foundation's `UserDefaults` write a tutorial shape for `domain` into this sandbox.
    func writeTutorialDefaults(_ shape: String, domain: String, tokens: FakeTokens) throws -> URL {
        let result = try run("tutorial-defaults", ["write", shape, domain], stdin: tokens.stdin)
        #expect(result.status == 0, "tutorial-defaults: \(result.stderr)")
        let url = config.appendingPathComponent("\(domain).plist")
        #expect(FileManager.default.fileExists(atPath: url.path), "Foundation did not write \(url.path)")
        return url
    }
}

struct CLIResult: CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String

    var json: Any? { try? JSONSerialization.jsonObject(with: Data(stdout.utf8)) }
    var description: String { "exit \(status); stderr: \(stderr)" }
}
