// Issue 29 point 2: the libc calls for files, locks, sockets, inotify and terminals are made in
// Sources/TokenVaultSystem only. Foundation on Linux re-exports Glibc, so not importing Glibc
// does not keep a file from calling it: this suite reads the Sources tree and names every such
// call outside the system target, and every file outside it that still imports Glibc without a
// reason listed here.
import Foundation
import Testing

@Suite struct SystemLayerTests {
    /// The C functions that belong to the system target: files, descriptors, locks, sockets,
    /// inotify, terminals, extended attributes and file systems.
    static let systemFunctions = """
        open openat creat read pread readv write pwrite writev close lseek fsync fdatasync ftruncate \
        truncate flock fcntl ioctl dup dup2 dup3 pipe pipe2 stat fstat lstat fstatat access faccessat \
        unlink unlinkat rename renameat renameat2 mkdir rmdir chmod fchmod chown fchown realpath \
        readlink symlink link mkstemp fopen fdopen fread fwrite fclose opendir readdir closedir \
        socket socketpair bind listen accept accept4 connect getsockopt setsockopt getsockname \
        getpeername send sendto sendmsg recv recvfrom recvmsg shutdown poll ppoll select \
        inotify_init inotify_init1 inotify_add_watch inotify_rm_watch tcgetattr tcsetattr cfmakeraw \
        isatty ttyname inet_pton inet_ntop inet_aton fgetxattr fstatfs statfs
        """.split(separator: " ").map(String.init)

    /// Files outside the system target that may import Glibc, each for calls that are not the
    /// system target's (processes, signals, the user database, C strings).
    static let glibcImporters: [String: String] = [
        "TokenVault/ProcessHardening.swift": "setrlimit, prctl (through dlsym)",
        "TokenVault/Refresh/RefreshTermination.swift": "sigaction, sigprocmask, raise: signal handling",
        "TokenVault/Agent/AgentPolicy.swift": "getpwnam, getgrnam: the user and group databases",
        "VaultCLI/AgentCommand.swift": "signal: the agent's SIGTERM, SIGINT and SIGHUP handled by dispatch",
        "VaultCLI/ChildLauncher.swift": "posix_spawnp, sigaction, waitpid, kill: running a command",
        "VaultCLI/BackendHandoff.swift": "execv: the hand-over to vault-full",
        "VaultCLI/RawArguments.swift": "strlen over the raw argv",
    ]

    /// `Sources/`, found from this file: Tests/TokenVaultTests/SystemLayerTests.swift.
    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources")

    struct Finding: CustomStringConvertible {
        var file: String
        var line: Int
        var what: String
        var description: String { "Sources/\(file):\(line): \(what)" }
    }

    /// Every Swift file of Sources/ outside TokenVaultSystem, by its path below Sources/, with its text.
    static func swiftFiles() throws -> [(path: String, text: String)] {
        let root = sources.path
        let enumerator = try #require(FileManager.default.enumerator(atPath: root))
        var files: [(String, String)] = []
        while let relative = enumerator.nextObject() as? String {
            guard relative.hasSuffix(".swift"), !relative.hasPrefix("TokenVaultSystem/") else { continue }
            files.append((relative, try String(contentsOfFile: root + "/" + relative, encoding: .utf8)))
        }
        return files.sorted { $0.0 < $1.0 }
    }

    /// The calls of ``systemFunctions`` in `text`: as a free function (`read(fd, …)`, not
    /// `x.read(…)`, and not a function or enum case of that name declared in the same file,
    /// which the unqualified call then means), qualified (`Glibc.read`), or looked up with
    /// `dlsym(…, "fgetxattr")`. Comments and string literals are left out.
    static func systemCalls(in text: String, file: String) throws -> [Finding] {
        let names = systemFunctions.sorted { $0.count > $1.count }.joined(separator: "|")
        let free = try NSRegularExpression(pattern: "(?<![\\w.])(\(names))\\s*\\(")
        let qualified = try NSRegularExpression(pattern: "\\bGlibc\\.(\(names))\\b")
        let lookedUp = try NSRegularExpression(pattern: "dlsym\\([^)]*\"(\(names))\"")
        let declared = try NSRegularExpression(pattern: "\\b(?:func|case)\\s+(\(names))\\b")
        let stringLiteral = try NSRegularExpression(pattern: "\"(?:[^\"\\\\]|\\\\.)*\"")

        func matches(_ expression: NSRegularExpression, _ line: String) -> [String] {
            expression.matches(in: line, range: NSRange(line.startIndex..., in: line)).compactMap { match in
                Range(match.range(at: 1), in: line).map { String(line[$0]) }
            }
        }
        let ownNames = Set(matches(declared, text))
        var findings: [Finding] = []
        var inMultilineString = false
        for (index, line) in text.components(separatedBy: "\n").enumerated() {
            for name in matches(lookedUp, line) { findings.append(Finding(file: file, line: index + 1, what: "dlsym of \(name)")) }
            if line.components(separatedBy: "\"\"\"").count % 2 == 0 {
                inMultilineString.toggle()
                continue
            }
            guard !inMultilineString else { continue }
            var code = stringLiteral.stringByReplacingMatches(
                in: line, range: NSRange(line.startIndex..., in: line), withTemplate: "\"\"")
            if let comment = code.range(of: "//") { code = String(code[..<comment.lowerBound]) }
            for name in matches(qualified, code) { findings.append(Finding(file: file, line: index + 1, what: "Glibc.\(name)")) }
            for name in matches(free, code) where !ownNames.contains(name) {
                findings.append(Finding(file: file, line: index + 1, what: "\(name)("))
            }
        }
        return findings
    }

    @Test func noFileSocketInotifyOrTerminalCallOutsideTheSystemTarget() throws {
        var findings: [Finding] = []
        for (path, text) in try Self.swiftFiles() {
            findings += try Self.systemCalls(in: text, file: path)
        }
        #expect(
            findings.isEmpty,
            "libc calls for files, sockets, inotify or terminals outside Sources/TokenVaultSystem; call SystemCall instead:\n\(findings.map(\.description).joined(separator: "\n"))"
        )
    }

    @Test func glibcIsImportedOnlyWhereAReasonIsListed() throws {
        let importsGlibc = try NSRegularExpression(pattern: "^\\s*(?:@\\w+\\s+)*(?:(?:internal|package|public|private|fileprivate)\\s+)?import\\s+Glibc\\b", options: .anchorsMatchLines)
        let importers = try Self.swiftFiles().filter { _, text in
            importsGlibc.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
        }.map(\.path)
        let unlisted = importers.filter { Self.glibcImporters[$0] == nil }
        #expect(unlisted.isEmpty, "these files import Glibc outside Sources/TokenVaultSystem without a reason in SystemLayerTests.glibcImporters: \(unlisted)")
        let stale = Self.glibcImporters.keys.filter { !importers.contains($0) }.sorted()
        #expect(stale.isEmpty, "listed in SystemLayerTests.glibcImporters but no longer importing Glibc: \(stale)")
    }

    /// The check itself finds what it is for, and leaves alone what it is not for.
    @Test func theCheckFindsCallsAndOnlyCalls() throws {
        let offending = """
            let fd = open(path, O_RDONLY)
            _ = Glibc.close(fd)
            let n = recv(fd, buffer, 10, 0)
            let f = dlsym(nil, "fgetxattr")
            """
        #expect(try Self.systemCalls(in: offending, file: "X.swift").map(\.what) == ["open(", "Glibc.close", "recv(", "dlsym of fgetxattr"])
        let harmless = """
            try reader.read(expecting: 0x30)  // read(2) is not called here
            let text = "open(the door)"
            try SystemCall.close(fd)
            struct Output { static func write(_ data: Data) {}; func f() { write(data) } }
            enum Operation { case write(path: String) }
            """
        #expect(try Self.systemCalls(in: harmless, file: "Y.swift").isEmpty)
    }
}
