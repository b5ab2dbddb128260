#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

#if canImport(Glibc)
import Glibc
#endif

/// The refresh journal (issue 33): `vault get --fresh` killed with SIGKILL while its refresh is in
/// flight, against the real authlib server with strict rotation or with a reuse interval. The
/// entry records "this refresh token is being presented" before the request leaves, and the next
/// process presents the same token again at once.
extension RefreshCrossProcessTests {
    private func start(_ scratch: VaultScratch, _ arguments: [String], label: String) throws -> HelperProcess {
        let child = try HelperProcess(
            "vault", arguments: arguments, environment: scratch.environment(.encryptedFile), outputPath: scratch.path("\(label).out"))
        try child.start()
        return child
    }

    private func run(_ scratch: VaultScratch, _ arguments: [String], label: String) async throws -> HelperProcess {
        let child = try start(scratch, arguments, label: label)
        _ = try await child.wait(bound: .seconds(60))
        return child
    }

    private func expiredEntry(_ server: TestOAuthServer, user: String, key: CredentialKey, vault: Vault) async throws -> OAuthToken {
        var token = try await server.login(user: user)
        token.expiresAt = Date().addingTimeInterval(-5)
        try await vault.saveToken(token, for: key, registration: try server.publicClient())
        return token
    }

    /// Kills `vault get --fresh` while the server holds its request, then lets the server rotate
    /// the refresh token for a sender that is gone: the answer is lost with the process.
    private func killWhileHeld(
        _ server: TestOAuthServer, _ scratch: VaultScratch, vault: Vault, user: String, key: CredentialKey
    ) async throws -> OAuthToken {
        let token = try await expiredEntry(server, user: user, key: key, vault: vault)
        try await server.fault(user: user, "hold")
        let child = try start(scratch, ["get", key.service, key.account, "--fresh"], label: "killed")
        try await eventually("the refresh request held by the server") { try await server.stats(user: user).held == 1 }
        // The journal was written before the request left.
        let entry = try #require(try await vault.storedEntry(for: key))
        #expect(try entry.wasInterrupted() != nil, "no presenting record while the request is in flight")
        child.kill9()
        _ = try await child.wait(bound: .seconds(60))
        try await server.release(user: user)
        try await eventually("the server rotating the dead process's refresh token") {
            try await server.stats(user: user).refreshSucceeded == 1
        }
        #expect(try await vault.token(for: key)?.refreshToken == token.refreshToken, "the answer died with the process")
        return token
    }

    @Test func aKilledRefreshIsPresentedAgainAtOnceWithinTheReuseInterval() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("journal-grace")
        let key = try CredentialKey(service: uniqueName("tv-journal"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            try await server.reuseInterval(user: user, seconds: 30)
            let token = try await killWhileHeld(server, scratch, vault: vault, user: user, key: key)
            let next = try await run(scratch, ["get", key.service, key.account, "--fresh"], label: "next")
            #expect(next.process.terminationStatus == 0, "\(next.errorOutput)")
            let stored = try #require(try await vault.storedEntry(for: key))
            #expect(stored.token.refreshToken != token.refreshToken)
            #expect(stored.presenting == nil, "the saved answer closes the journal")
            let stats = try await server.stats(user: user)
            #expect(stats.reusedWithinInterval == 1 && stats.reuseDetected == 0 && stats.familiesRevoked == 0)
            let after = try await run(scratch, ["refresh", key.service, key.account], label: "after")
            #expect(after.process.terminationStatus == 0, "\(after.errorOutput)")
        }
    }

    @Test func aKilledRefreshOnAStrictServerSaysInterruptedRefreshOnce() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("journal-strict")
        let key = try CredentialKey(service: uniqueName("tv-journal"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            _ = try await killWhileHeld(server, scratch, vault: vault, user: user, key: key)
            let next = try await run(scratch, ["get", key.service, key.account, "--fresh"], label: "next")
            #expect(next.process.terminationStatus == 7, "\(next.errorOutput)")
            #expect(next.errorOutput.contains("Interrupted refresh: log in again"), "\(next.errorOutput)")
            // The verdict is stored: the token is not presented a third time.
            let again = try await run(scratch, ["get", key.service, key.account, "--fresh"], label: "again")
            #expect(again.process.terminationStatus == 7, "\(again.errorOutput)")
            let stats = try await server.stats(user: user)
            #expect(stats.refreshRequests == 2 && stats.reuseDetected == 1)
        }
    }

    @Test func aRequestThatNeverReachedTheTokenEndpointIsSimplyPresentedAgain() async throws {
        let server = try TestOAuthServer.require()
        let user = uniqueName("journal-unsent")
        let key = try CredentialKey(service: uniqueName("tv-journal"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            let token = try await expiredEntry(server, user: user, key: key, vault: vault)
            // The server takes the request and never acts on it (a hang ends in a 504, no rotation).
            try await server.fault(user: user, "hang", hangSeconds: 5)
            let child = try start(scratch, ["get", key.service, key.account, "--fresh"], label: "killed")
            try await eventually("the request taken by the hanging server") { try await server.stats(user: user).faultsServed == 1 }
            child.kill9()
            _ = try await child.wait(bound: .seconds(60))
            #expect(try await vault.storedEntry(for: key)?.wasInterrupted() != nil)
            let next = try await run(scratch, ["get", key.service, key.account, "--fresh"], label: "next")
            #expect(next.process.terminationStatus == 0, "\(next.errorOutput)")
            #expect(try await vault.token(for: key)?.refreshToken != token.refreshToken)
            #expect(try await server.stats(user: user).reuseDetected == 0)
        }
    }

    /// kill -9 at a random moment of a refreshing `vault get --fresh`, `runs` times per server
    /// (TOKENVAULT_KILL_RUNS, 12 by default; 300 in the long run), then one more `get --fresh`: a
    /// lost grant is its exit 7. With a reuse interval none may be lost; with strict rotation only
    /// kills that fell after the server rotated and before the save may, and each must say so.
    @Test func killNineAtRandomMoments() async throws {
        let server = try TestOAuthServer.require()
        let runs = Int(ProcessInfo.processInfo.environment["TOKENVAULT_KILL_RUNS"] ?? "") ?? 12
        let key = try CredentialKey(service: uniqueName("tv-kill"), account: "acct")
        try await withVault(.encryptedFile, services: [key.service]) { scratch, vault in
            // How long an uninterrupted refreshing get takes here: the kills spread over it.
            var durations: [Duration] = []
            for index in 0..<3 {
                _ = try await expiredEntry(server, user: uniqueName("kill-calibrate"), key: key, vault: vault)
                let started = ContinuousClock.now
                let child = try await run(scratch, ["get", key.service, key.account, "--fresh"], label: "calibrate-\(index)")
                try #require(child.process.terminationStatus == 0, "\(child.errorOutput)")
                durations.append(ContinuousClock.now - started)
            }
            let span = durations.sorted()[1]
            var report: [String] = []
            for strict in [false, true] {
                var lost = 0, lostInWindow = 0, rotatedUnsaved = 0, interruptedKept = 0
                for index in 0..<runs {
                    let user = uniqueName(strict ? "kill-strict" : "kill-grace")
                    if !strict { try await server.reuseInterval(user: user, seconds: 10) }
                    let token = try await expiredEntry(server, user: user, key: key, vault: vault)
                    let child = try start(scratch, ["get", key.service, key.account, "--fresh"], label: "victim-\(index)")
                    // Fault injection, not synchronisation: a random moment of the process's life.
                    try await Task.sleep(for: span * Double.random(in: 0...1.2))
                    child.kill9()
                    _ = try await child.wait(bound: .seconds(60))
                    let afterKill = try #require(try await vault.storedEntry(for: key))
                    let rotated = try await server.stats(user: user).refreshSucceeded > 0
                    let saved = afterKill.token.refreshToken != token.refreshToken
                    if rotated && !saved { rotatedUnsaved += 1 }
                    if try afterKill.wasInterrupted() != nil { interruptedKept += 1 }
                    let next = try await run(scratch, ["get", key.service, key.account, "--fresh"], label: "next-\(index)")
                    let status = next.process.terminationStatus
                    #expect(status == 0 || status == 7, "\(next.errorOutput)")
                    if status == 7 {
                        lost += 1
                        // Only a kill between the server's rotation and the save loses the grant,
                        // and the next call says so.
                        if rotated && !saved { lostInWindow += 1 }
                        #expect(next.errorOutput.contains("Interrupted refresh: log in again"), "\(next.errorOutput)")
                    }
                }
                // The goals of issue 33, as Scripts/bench prints them.
                if strict {
                    let met = lost == lostInWindow
                    report.append(
                        "strict rotation: \(lost) of \(runs) grants lost, \(lostInWindow) of them by kills between the server's rotation and the save (\(rotatedUnsaved) kills fell there; \(interruptedKept) left a presenting record), each reported as \"Interrupted refresh: log in again\"; goal: no loss outside that window: \(met ? "MET" : "MISSED")")
                } else {
                    report.append(
                        "reuse interval 10 s: \(lost) of \(runs) grants lost (\(rotatedUnsaved) kills fell between the server's rotation and the save; \(interruptedKept) left a presenting record); goal 0: \(lost == 0 ? "MET" : "MISSED")")
                }
                if strict {
                    #expect(lost == lostInWindow, "a grant was lost outside the window")
                } else {
                    #expect(lost == 0, "a grant was lost despite the reuse interval")
                }
            }
            let lines = ["kill -9 at random moments of a refreshing vault get --fresh (file vault, spread over \(span)):"]
                + report.map { "  " + $0 }
            print(lines.joined(separator: "\n"))
            if let path = ProcessInfo.processInfo.environment["TOKENVAULT_KILL_REPORT"] {
                try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: path))
            }
        }
    }
}
#endif
