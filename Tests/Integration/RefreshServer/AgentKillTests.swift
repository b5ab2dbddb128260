#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

import Glibc

/// `kill -9` of `vault agent` in the middle of its own refresh (refresh ahead of an expired
/// token), `runs` times at random points (TOKENVAULT_AGENT_KILL_RUNS, 6 by default; 200 in the
/// long run): while the server holds the refresh request (`kind=hold`, seen as `/stats` `held`,
/// so no sleep decides that the refresh is in flight), or 0 to 40 ms after the server was let
/// answer (the answer arriving, being saved, or saved). After each kill:
/// - a client that knows the socket goes direct within 1 s (the socket file is left behind);
/// - a direct write acknowledged while the agent's refresh was in flight is still there;
/// - with a reuse interval (odd rounds) no grant is lost: the next `get --fresh` succeeds, and the
///   server saw no reuse; with strict rotation (even rounds) a grant may be lost only by a kill
///   after the server rotated and before the save, the next call says "log in again" (exit 7), and
///   the rejected refresh token is never presented a second time.
@Suite(.serialized) struct AgentKillTests {
    @Test func killNineMidRefreshLosesNothingAndClientsGoDirect() async throws {
        let server = try TestOAuthServer.require()
        let runs = Int(ProcessInfo.processInfo.environment["TOKENVAULT_AGENT_KILL_RUNS"] ?? "") ?? 6
        let key = try CredentialKey(service: uniqueName("tv-agent-kill9"), account: "acct")
        let written = try CredentialKey(service: key.service, account: "written")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            var lost = 0, lostInWindow = 0, killedWhileHeld = 0, slowestFallback: Duration = .zero
            for round in 0..<runs {
                let strict = round % 2 == 0
                let user = uniqueName(strict ? "agent-kill-strict" : "agent-kill-grace")
                if !strict { try await server.reuseInterval(user: user, seconds: 10) }
                var token = try await server.login(user: user)
                // Issued a minute ago and expired: the agent's refresh ahead takes it at once (a
                // token whose lifetime is not positive is one it does not schedule).
                token.issuedAt = Date().addingTimeInterval(-60)
                token.expiresAt = Date().addingTimeInterval(-5)
                try await vault.saveToken(token, for: key, registration: try server.publicClient())
                try await server.fault(user: user, "hold")

                // The agent refreshes the expired token ahead as soon as it has opened the vault.
                let agent = try await RunningAgent(scratch)
                defer { agent.stop() }
                try await eventually("the agent's refresh held by the server") { try await server.stats(user: user).held == 1 }
                // A write acknowledged (`vault set` exited 0) while the agent's refresh is in flight.
                let value = "written-\(round)-\(UUID().uuidString.prefix(6))"
                let set = try await runVault(["set", written.service, written.account], agent.keyedClient, stdin: Data(value.utf8))
                #expect(set.status == 0, "\(set)")

                let whileHeld = Bool.random()
                if whileHeld {
                    killedWhileHeld += 1
                    agent.process.kill(SIGKILL)
                    agent.process.wait()
                    try await server.release(user: user)
                } else {
                    try await server.release(user: user)
                    // Fault injection, not synchronisation: a random moment of the answer's handling.
                    try await Task.sleep(for: .microseconds(Int.random(in: 0...40_000)))
                    agent.process.kill(SIGKILL)
                    agent.process.wait()
                }
                try await eventually("the server done with the held request") { try await server.stats(user: user).held == 0 }

                // Clients go direct within 1 s: the socket file is there, nobody listens.
                #expect(FileManager.default.fileExists(atPath: agent.socket))
                let direct = try await runVault(["get", written.service, written.account], agent.keyedClient)
                #expect(direct.stdoutText == value + "\n", "the acknowledged write is lost: \(direct)")
                #expect(direct.elapsed < .seconds(1), "\(direct.elapsed)")
                slowestFallback = max(slowestFallback, direct.elapsed)

                let afterKill = try #require(try await vault.storedEntry(for: key))
                let rotated = try await server.stats(user: user).refreshSucceeded > 0
                let saved = afterKill.token.refreshToken != token.refreshToken
                let next = try await runVault(["get", key.service, key.account, "--fresh"], agent.keyedClient)
                #expect(next.status == 0 || next.status == 7, "\(next)")
                let stats = try await server.stats(user: user)
                if strict {
                    if next.status == 7 {
                        lost += 1
                        if rotated && !saved { lostInWindow += 1 }
                        #expect(next.stderr.contains("log in again"), "\(next.stderr)")
                        // The rejected refresh token is never presented again, by anyone.
                        let again = try await runVault(["get", key.service, key.account, "--fresh"], agent.keyedClient)
                        #expect(again.status == 7, "\(again)")
                        #expect(try await server.stats(user: user).refreshRequests == stats.refreshRequests, "a rejected refresh token was presented twice")
                    }
                } else {
                    #expect(next.status == 0, "a grant was lost despite the reuse interval: \(next)")
                    #expect(stats.reuseDetected == 0 && stats.familiesRevoked == 0)
                }
                #expect(stats.refreshRejected <= 1, "a rejected refresh token was presented twice")
            }
            #expect(lost == lostInWindow, "a grant was lost outside the window between the server's rotation and the save")
            print(
                "kill -9 of vault agent mid-refresh, \(runs) rounds (\(killedWhileHeld) while the server held the request): \(lost) grants lost under strict rotation, all \(lostInWindow) in the rotation-to-save window; none with a reuse interval; slowest direct fallback \(slowestFallback)")
        }
    }
}
#endif
