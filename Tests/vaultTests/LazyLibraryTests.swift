#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// libsecret and GLib are opened only when the Secret Service is used, and libcurl only when a
/// command sends an HTTP request (issue 17): a file-vault command never maps any of them. The dynamic loader says which objects it loads (LD_DEBUG=files), so
/// the test sees what the process really mapped, not what `ldd` predicts.
@Suite struct LazyLibraryTests {
    /// The objects the loader mapped for one run, from LD_DEBUG=files on stderr.
    static func loaded(_ result: CLIResult) -> [String] {
        result.stderr.split(separator: "\n").compactMap { line in
            guard let range = line.range(of: "file=") else { return nil }
            let rest = line[range.upperBound...]
            return String(rest.prefix { $0 != " " && $0 != "\t" && $0 != "[" })
        }
    }

    static let glibFamily = ["libsecret-1.so", "libglib-2.0.so", "libgio-2.0.so", "libgobject-2.0.so", "libgcrypt.so"]

    /// `vault status` is left out: it shows the Secret Service probe whatever the backend, by design.
    @Test func fileVaultCommandsNeverMapLibsecretOrGLib() throws {
        let sandbox = try CLISandbox()
        // A bus address in the environment changes nothing: the backend is named, nothing probes.
        let bus = ["LD_DEBUG": "files", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent/tokenvault-bus"]
        let commands: [([String], String)] = [
            (["set", "github"], "gho_lazyLibraries1\n"), (["get", "github"], ""), (["list"], ""), (["delete", "github"], ""),
        ]
        for (arguments, stdin) in commands {
            let result = try sandbox.run("vault", arguments + sandbox.fileVault, stdin: Data(stdin.utf8), environment: bus)
            #expect(result.status == 0, "\(arguments): exit \(result.status)")
            let libraries = Self.loaded(result)
            #expect(libraries.contains { $0.contains("libsodium") }, "LD_DEBUG=files reported no libsodium for \(arguments)")
            let mapped = libraries.filter { library in Self.glibFamily.contains { library.contains($0) } }
            #expect(mapped.isEmpty, "vault \(arguments[0]) on a file vault mapped \(Set(mapped).sorted())")
        }
    }

    /// The control: the same observation does see libsecret when the Secret Service is used.
    @Test func secretServiceCommandsLoadLibsecretOnUse() throws {
        let sandbox = try CLISandbox()
        let result = try sandbox.run(
            "vault", ["--backend", "secret-service", "list"],
            environment: ["LD_DEBUG": "files", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent/tokenvault-bus"])
        #expect(result.status != 0)
        let libraries = Self.loaded(result)
        #expect(libraries.contains { $0.contains("libsecret-1.so.0") }, "libsecret was not loaded: \(libraries.suffix(20))")
        #expect(result.stderr.contains("Secret Service"), "\(result.stderr.suffix(400))")
    }

    /// libcurl and its ~28 libraries (GnuTLS, OpenSSL, Kerberos, LDAP, ...) come only with an
    /// HTTP request: not with `--version`, not with a file-vault command, not even with a token
    /// that has a token endpoint but is still fresh.
    @Test func commandsThatSendNoRequestNeverMapLibcurl() throws {
        let sandbox = try CLISandbox()
        let debug = ["LD_DEBUG": "files"]
        let response = Data(#"{"access_token":"gho_lazyCurl1","token_type":"bearer","expires_in":3600,"refresh_token":"ghr_lazyCurl1"}"#.utf8)
        let commands: [([String], Data)] = [
            (["--version"], Data()),
            (["set", "github"] + sandbox.fileVault, Data("gho_lazyCurl0\n".utf8)),
            (["get", "github"] + sandbox.fileVault, Data()),
            (["set", "api", "--token-url", "http://127.0.0.1:1/token", "--client-id", "lazy"] + sandbox.fileVault, response),
            (["get", "api"] + sandbox.fileVault, Data()),
            (["get", "api", "--fresh"] + sandbox.fileVault, Data()),
            (["list"] + sandbox.fileVault, Data()),
        ]
        for (arguments, stdin) in commands {
            let result = try sandbox.run("vault", arguments, stdin: stdin, environment: debug)
            #expect(result.status == 0, "\(arguments): exit \(result.status) \(result.stderr.suffix(300))")
            let libraries = Self.loaded(result)
            #expect(!libraries.isEmpty, "LD_DEBUG=files reported nothing for \(arguments)")
            let curl = libraries.filter { $0.contains("libcurl") }
            #expect(curl.isEmpty, "vault \(arguments.prefix(2)) mapped \(Set(curl).sorted())")
        }
    }

    /// The control: a refresh does open libcurl (here against a port where nothing listens; the
    /// integration tests refresh against the real server the same way).
    @Test func aRefreshLoadsLibcurlOnUse() throws {
        let sandbox = try CLISandbox()
        let response = Data(#"{"access_token":"gho_lazyCurl2","token_type":"bearer","expires_in":3600,"refresh_token":"ghr_lazyCurl2"}"#.utf8)
        let set = try sandbox.run(
            "vault", ["set", "api", "--token-url", "http://127.0.0.1:1/token", "--client-id", "lazy"] + sandbox.fileVault, stdin: response)
        #expect(set.status == 0, "\(set.stderr)")
        let result = try sandbox.run("vault", ["refresh", "api"] + sandbox.fileVault, environment: ["LD_DEBUG": "files"])
        #expect(result.status != 0)
        #expect(Self.loaded(result).contains { $0.contains("libcurl.so.4") }, "libcurl was not loaded: \(Self.loaded(result).suffix(20))")
        #expect(result.stderr.contains("refused"), "\(result.stderr.suffix(400))")
    }

    /// Issue 34, point 13: a plain `swift build` puts `$ORIGIN` in the binary's RUNPATH, so a
    /// `libcurl.so.4` placed beside `vault` used to be loaded (constructors and all) by the first
    /// refresh. A copy of `vault` in a directory of its own, with a library there under curl's
    /// soname (libsodium, which has none of curl's functions): the refresh takes the system's
    /// libcurl and reaches the point of connecting; nothing is mapped from the binary's directory.
    @Test func aLibraryBesideTheBinaryIsNeverLoaded() throws {
        let sandbox = try CLISandbox()
        let directory = sandbox.root.appendingPathComponent("bin")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        let copy = directory.appendingPathComponent("vault").path
        try FileManager.default.copyItem(atPath: try Products.executable("vault"), toPath: copy)
        let elf = try ChildProcess.run("/usr/bin/readelf", ["-d", copy], environment: ["PATH": "/usr/bin:/bin"])
        try #require(
            elf.stdoutText.contains("$ORIGIN"),
            "the test needs a vault built with SwiftPM's default $ORIGIN search path (no --disable-local-rpath): \(elf.stdoutText)")
        let sodium = try #require(
            ["/usr/lib/x86_64-linux-gnu/libsodium.so.23", "/usr/lib/aarch64-linux-gnu/libsodium.so.23", "/usr/lib64/libsodium.so.23"]
                .first { FileManager.default.fileExists(atPath: $0) })
        // The library itself, not the soname's symbolic link (copied as a link, it would dangle).
        let sodiumFile = URL(fileURLWithPath: sodium).resolvingSymlinksInPath().path
        for name in ["libcurl.so.4", "libsecret-1.so.0"] {
            let planted = directory.appendingPathComponent(name).path
            try FileManager.default.copyItem(atPath: sodiumFile, toPath: planted)
            let kind = try FileManager.default.attributesOfItem(atPath: planted)[.type] as? FileAttributeType
            try #require(kind == .typeRegular, "\(planted) is not a regular file")
        }
        let response = Data(#"{"access_token":"gho_originCurl1","token_type":"bearer","expires_in":3600,"refresh_token":"ghr_originCurl1"}"#.utf8)
        let set = try ChildProcess.run(
            copy, ["set", "api", "--token-url", "http://127.0.0.1:1/token", "--client-id", "origin"] + sandbox.fileVault,
            environment: sandbox.environment, stdin: response)
        #expect(set.status == 0, "\(set.stderr)")
        var environment = sandbox.environment
        // LD_DEBUG=libs names every object whose initialisers run ("calling init: /path").
        environment["LD_DEBUG"] = "libs"
        let besideInit = "init: \(directory.path)/"
        let refresh = try ChildProcess.run(copy, ["refresh", "api"] + sandbox.fileVault, environment: environment)
        let result = CLIResult(status: refresh.status, stdout: refresh.stdoutText, stderr: refresh.stderr)
        #expect(result.stderr.contains("init: /"), "LD_DEBUG=libs reported no initialiser at all")
        #expect(!result.stderr.contains(besideInit), "a library beside the binary was loaded and its initialisers ran")
        #expect(!result.stderr.contains("has no function"), "\(result.stderr.suffix(400))")
        #expect(result.status == 6 && result.stderr.contains("refused"), "\(result.stderr.suffix(400))")

        let keyring = try ChildProcess.run(
            copy, ["--backend", "secret-service", "list"],
            environment: environment.merging(["DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent/tokenvault-bus"]) { $1 })
        let secretResult = CLIResult(status: keyring.status, stdout: keyring.stdoutText, stderr: keyring.stderr)
        #expect(!secretResult.stderr.contains(besideInit), "libsecret came from beside the binary")
        #expect(!secretResult.stderr.contains("has no function"), "\(secretResult.stderr.suffix(400))")
    }
}
#endif
