#if CLI  // the vault command exists with the package trait CLI
import ArgumentParser
import Testing
import TokenVault

@testable import VaultCLI

/// Issue 17: `vault get` and `vault --version` are read by `FastPath` without ArgumentParser's
/// reflection. Its rule is that a line it reads, ArgumentParser reads to the same values, and a
/// line it does not fully understand goes to ArgumentParser. These tests hold it to that rule
/// over every combination of the forms it reads, and check that it reads the plain lines scripts
/// type (so the fast path is not dead code) and leaves the rest alone.
@Suite struct FastPathTests {
    /// Every value a parsed `get` carries, in one comparable list.
    private static func fields(_ get: VaultCommand.Get) -> [String] {
        [
            "backend=\(get.global.backend?.rawValue ?? "nil")",
            "file=\(get.global.file ?? "nil")",
            "key-file=\(get.global.keyFile ?? "nil")",
            "passphrase-file=\(get.global.passphraseFile ?? "nil")",
            "allow-insecure-permissions=\(get.global.allowInsecurePermissions)",
            "service=\(get.entry.service)",
            "account=\(get.entry.account)",
            "json=\(get.json)",
            "allow-expired=\(get.allowExpired)",
            "fresh=\(get.fresh)",
            "http-deadline=\(get.http.httpDeadline.map { "\($0)" } ?? "nil")",
            "header=\(get.header)",
            "rejected-token-file=\(get.rejectedTokenFile ?? "nil")",
        ]
    }

    /// Where an option stands, and how it is written.
    private enum Placement: CaseIterable {
        case absent, beforeSeparate, beforeJoined, afterSeparate, afterJoined
    }

    /// Lines built from every placement of three global options with values and of one global
    /// flag, each with a subset of `get`'s flags, one or two positional arguments, and the options
    /// after `get` spread between the positional arguments, the last three chosen from the line's
    /// number so that every subset, both counts and every gap occur (375 lines: ArgumentParser
    /// takes about 14 ms a line in a debug build).
    private static func generatedLines() -> [[String]] {
        let valueOptions = [("--backend", "file"), ("--file", "/tmp/tokens.vault"), ("--key-file", "/tmp/key=odd name")]
        var lines: [[String]] = []
        func placements(_ count: Int) -> [[Placement]] {
            guard count > 0 else { return [[]] }
            return placements(count - 1).flatMap { rest in Placement.allCases.map { [$0] + rest } }
        }
        for options in placements(valueOptions.count) {
            for insecure in [Placement.absent, .beforeSeparate, .afterSeparate] {
                var before: [[String]] = []
                var after: [[String]] = []
                for ((name, value), placement) in zip(valueOptions, options) {
                    switch placement {
                    case .absent: break
                    case .beforeSeparate: before.append([name, value])
                    case .beforeJoined: before.append(["\(name)=\(value)"])
                    case .afterSeparate: after.append([name, value])
                    case .afterJoined: after.append(["\(name)=\(value)"])
                    }
                }
                if insecure == .beforeSeparate { before.append(["--allow-insecure-permissions"]) }
                if insecure == .afterSeparate { after.append(["--allow-insecure-permissions"]) }
                let number = lines.count
                let flagMask = number % 8
                for (bit, flag) in ["--json", "--allow-expired", "--fresh"].enumerated() where flagMask & (1 << bit) != 0 {
                    after.append([flag])
                }
                let positionals = number / 8 % 2 == 0 ? ["github"] : ["github", "octocat"]
                // Each option after `get` goes into one of the gaps around the positionals.
                var gaps = Array(repeating: [String](), count: positionals.count + 1)
                for (index, option) in after.enumerated() {
                    gaps[(number + index) % gaps.count] += option
                }
                var line = before.flatMap { $0 } + ["get"]
                for (index, positional) in positionals.enumerated() {
                    line += gaps[index] + [positional]
                }
                lines.append(line + gaps[positionals.count])
            }
        }
        return lines
    }

    /// Lines with odd but valid values, which both parsers must read alike.
    private static let oddLines: [[String]] = [
        ["get", "get"],
        ["get", "service with spaces", "ça va"],
        ["get", "github", "--file=a=b"],
        ["get", "github", "--backend=secret-service"],
        ["--backend", "postgres", "get", "fleet", "--key-file", "/k"],
        ["get", "github", "--backend", "auto"],
        ["get", "a=b", "c"],
        ["get", "api", "--fresh", "--header"],
        ["--file", "/v", "get", "--header", "api", "acct"],
    ]

    @Test func everyLineItReadsArgumentParserReadsToTheSameValues() throws {
        var read = 0
        for line in Self.generatedLines() + Self.oddLines {
            guard case .get(let fastLine)? = FastPath.parse(line) else { continue }
            read += 1
            let fast = fastLine.command
            let parsed = try VaultCommand.parseAsRoot(line)
            let get = try #require(parsed as? VaultCommand.Get, "\(line)")
            #expect(Self.fields(fast) == Self.fields(get), "\(line)")
            // FastPath validates with plain values; ArgumentParser's validation of the command it
            // makes must agree (a line it would refuse is never answered by the agent first).
            #expect(throws: Never.self, "\(line)") {
                try fast.global.validate()
                try fast.entry.validate()
                try fast.validate()
            }
            #expect(fastLine.key == (try fast.entry.key()), "\(line)")
        }
        // All generated lines are in the subset: none may be left to ArgumentParser by mistake.
        #expect(read == Self.generatedLines().count + Self.oddLines.count)
    }

    @Test(arguments: [
        ["get", "github"],
        ["get", "github", "octocat", "--json"],
        ["--backend", "file", "--file", "/v", "--key-file", "/k", "get", "github"],
        ["get", "github", "--fresh", "--backend=secret-service"],
        ["get", "github", "--fresh", "--header"],
    ])
    func plainLinesAreRead(_ line: [String]) throws {
        guard case .get(let get)? = FastPath.parse(line) else {
            Issue.record("\(line) was left to ArgumentParser")
            return
        }
        #expect(get.command.entry.service == "github" && get.key.service == "github")
    }

    @Test func versionAloneIsRead() {
        guard case .version? = FastPath.parse(["--version"]) else {
            Issue.record("--version was left to ArgumentParser")
            return
        }
        #expect(FastPath.parse(["--version", "get", "github"]) == nil)
        #expect(FastPath.parse(["get", "github", "--version"]) == nil)
    }

    /// Help, completion, usage errors and anything unusual stay with ArgumentParser, which
    /// reports them in its words (or, for a repeated option, decides which value wins).
    @Test(arguments: [
        [], ["get"], ["get", "a", "b", "c"], ["list"], ["help", "get"], ["get", "help"], ["get", "--help"], ["get", "-h"],
        ["--help"], ["get", "github", "--"], ["get", "--", "-dash"], ["get", "-x"], ["get", "github", "--bogus"],
        ["get", "github", "--json=true"], ["--json", "get", "github"], ["get", "github", "--file"],
        ["get", "github", "--file", ""], ["get", "github", "--file="], ["get", "github", "--file", "-v"],
        ["get", "github", "--file", "a", "--file", "b"], ["get", "github", "--json", "--json"],
        ["get", "github", "--backend", "bogus"], ["get", "github", "--backend", "memory"],
        ["get", "github", "--key-file", "/a", "--passphrase-file", "/b"], ["get", ""], ["get", "github", ""],
        ["get", "github", "--file", "get"], ["---completion", "get", "--", "--backend", "0", "0"],
        ["--generate-completion-script", "bash"], ["get", "github", "--version"], ["-", "get", "github"],
        ["get", "github", "--header", "--json"], ["get", "github", "--rejected-token-file", "-"], ["--header", "get", "github"],
    ])
    func otherLinesAreLeftToArgumentParser(_ line: [String]) {
        #expect(FastPath.parse(line) == nil, "\(line)")
    }
}
#endif
