#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

import Glibc

/// Issue 13 item 13: `vault` makes itself non-dumpable as it starts, so no core dump of it holds
/// a token. Checked from outside on a real `vault` that waits at its token prompt (the point where
/// a secret is about to be in its memory), through what the kernel shows in `/proc/<pid>/`.
@Suite struct CoreDumpTests {
    @Test func aWaitingVaultWritesNoCoreAndIsNotDumpable() throws {
        let sandbox = try CLISandbox()
        // A process that is not dumpable has its /proc/<pid>/ files owned by root. To see that
        // from root, the child runs as nobody (setpriv execs vault, so the process id stays).
        let nobody: uid_t = 65534
        let runsAsNobody = geteuid() == 0
        let wrapper = runsAsNobody ? ["/usr/bin/setpriv", "--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups"] : []
        let session = try PseudoTerminalSession(sandbox, ["set", "api", "ops"] + sandbox.fileVault, runningUnder: wrapper)
        #expect(session.waitFor("input hidden"), "no prompt: \(session.screen)")
        let pid = session.process.processIdentifier

        var status = stat()
        #expect(stat("/proc/\(pid)/status", &status) == 0)
        let childUID = runsAsNobody ? nobody : getuid()
        #expect(status.st_uid != childUID, "/proc/\(pid)/status belongs to the child's own user: it is dumpable")
        #expect(status.st_uid == 0)

        let limits = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
        let core = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") })
        let fields = core.split(separator: " ", omittingEmptySubsequences: true)
        // "Max core file size <soft> <hard> bytes": both 0, so nothing can raise it again.
        #expect(fields.dropFirst(4).prefix(2).elementsEqual(["0", "0"]), "\(core)")

        session.type([0x03])  // Ctrl-C: cancelled, nothing stored
        let result = session.finish()
        #expect(result.status == 1, "\(session.screen)")
    }
}
#endif
