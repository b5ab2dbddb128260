import Foundation
import Testing
@testable import TokenVaultTestSupport

/// libsecret and GLib are opened only when the Secret Service is used (issue 17): a file-vault
/// command never maps them. The dynamic loader says which objects it loads (LD_DEBUG=files), so
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
}
