#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

import Glibc

/// `vault migrate` while an app writes the same plist (issue 34, finding 10): a real racer, the
/// python3 process Tests/plist-racer/racer.py, writes the plist as an app would, by rename or in
/// place, at the moments the migration's own temporary file is created or closed (inotify), after
/// a random delay. Whatever the timing, every run must end with the app's last write in the plist
/// (never "success" with it gone), and a failed run must say why and leave the vault without the
/// entry. Before the fix, the same racer lost the app's write in 15 of 200 runs that reported success.
@Suite struct MigrateRaceTests {
    static let modes = ["rename-early", "rename-late", "inplace-held", "inplace-late", "twice"]

    /// The racer, one process for every run: `arm`, then the migration, then `done`.
    final class Racer {
        let process: ChildProcess

        init(_ sandbox: CLISandbox) throws {
            process = try ChildProcess(
                "/usr/bin/python3", [PackageFiles.path("Tests/plist-racer/racer.py")], environment: sandbox.environment,
                input: true, output: true, errorPath: sandbox.root.appendingPathComponent("racer.log").path)
        }

        func send(_ line: String) throws -> String {
            try process.input?.write(contentsOf: Data((line + "\n").utf8))
            return try #require(process.readLine(), "the racer ended; see racer.log")
        }

        deinit {
            try? process.input?.close()
            _ = process.wait()
        }
    }

    @Test func anAppsWriteDuringTheMigrationIsNeverLost() throws {
        let sandbox = try CLISandbox()
        let racer = try Racer(sandbox)
        let runs = 200
        var migrated: Set<String> = []
        var refused = 0
        for run in 0..<runs {
            let domain = "com.example.race\(run)"
            let url = sandbox.config.appendingPathComponent("\(domain).plist")
            let access = "gho_fakeRace\(run)Access"
            let contents: [String: Any] = ["accessToken": access, "refreshToken": "ghr_fakeRace\(run)Refresh", "theme": "dark"]
            try PropertyListSerialization.data(fromPropertyList: contents, format: .xml, options: 0).write(to: url)
            let mode = Self.modes[run % Self.modes.count]
            #expect(try racer.send("arm \(url.path) \(mode) \(Int.random(in: 0...100)) \(run * 10)") == "armed")

            let result = try sandbox.vault("migrate", "--domain", domain)

            let answer = try racer.send("done").split(separator: " ").compactMap { Int($0) }
            try #require(answer.count == 2)
            let (last, writes) = (answer[0], answer[1])
            // The racer writes on the temporary file's events, so it wrote in every run.
            #expect(writes > 0, "run \(run) (\(mode)): the racer did not write")
            #expect(!result.stdout.contains(access) && !result.stderr.contains(access))
            let final = try readPlist(url).dictionary["racerMarker"] as? Int
            if result.status == 0 {
                migrated.insert(domain)
                #expect(final == last, "run \(run) (\(mode)): migrate succeeded and the app's write \(last) was lost")
            } else {
                refused += 1
                #expect(result.status == 1, "run \(run) (\(mode)): \(result)")
                #expect(result.stderr.contains("changed"), "run \(run) (\(mode)): \(result)")
                if result.stderr.contains("is kept as") {
                    // The app wrote twice around the swap back: one write is in the plist, the
                    // other in the file the message names; the last is in one of them.
                    let kept = try #require(
                        try FileManager.default.contentsOfDirectory(atPath: sandbox.config.path).first { $0.hasPrefix(".\(domain).plist.tmp-") })
                    let keptURL = sandbox.config.appendingPathComponent(kept)
                    let other = try readPlist(keptURL).dictionary["racerMarker"] as? Int
                    #expect(final == last || other == last, "run \(run) (\(mode)): \(result)")
                    try FileManager.default.removeItem(at: keptURL)
                } else {
                    #expect(final == last, "run \(run) (\(mode)): the app's write \(last) was lost; \(result)")
                }
            }
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: sandbox.config.path).filter { $0.contains(".tmp-") }
            #expect(leftovers.isEmpty, "run \(run) (\(mode)): \(leftovers)")
        }
        // A failed run left no entry behind (the vault started empty); a successful one wrote it.
        let list = try sandbox.vault("list", "--json")
        let entries = (list.json as? [[String: Any]] ?? []).compactMap { $0["service"] as? String }
        #expect(Set(entries) == migrated, "\(list)")
        #expect(refused > 0, "no run met the app's write; the racer no longer reaches the migration")
        print("MigrateRaceTests: \(runs) runs, \(migrated.count) migrated, \(refused) refused as changed")
    }
}
#endif
