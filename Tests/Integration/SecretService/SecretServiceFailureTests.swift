#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

import Glibc

/// What the store does when the keyring is locked, frozen or gone: a clear error within its
/// bound, nothing lost, no crash and no hang. Each test has a keyring of its own on a private bus,
/// and drives a real store in a child process (`secret-service-check`) whose session bus it is.
@Suite(.timeLimit(.minutes(3))) struct SecretServiceFailureTests {
    private func unlockedKeyring(activation: Bool = false) async throws -> PrivateBus {
        let bus = try await PrivateBus.start(activation: activation)
        try await bus.startKeyring(password: "failure-test-password")
        return bus
    }

    @Test func aLockedCollectionFailsFastWithLockedAndLosesNothing() async throws {
        let bus = try await unlockedKeyring()
        let check = try await SecretServiceCheck.start(environment: bus.environment)
        #expect(try await check.send("open 10000 0").ok)
        #expect(try await check.send("save github octocat before-the-lock").ok)
        try await bus.lockLogin()

        // Listing too: gnome-keyring shows a locked item's attributes, but KeePassXC hides every item
        // of a locked collection, so a listing there could only say "empty". Locked is locked.
        for command in ["load github octocat", "save github octocat after-the-lock", "delete github octocat", "keys"] {
            let answer = try await check.send(command)
            #expect(answer.code == "locked", "\(command): \(answer.fields)")
            #expect(answer.message.contains("locked"))
            #expect(answer.message.contains("no unlock prompt can be shown"))
            #expect(answer.elapsed < .seconds(2), "\(command) took \(answer.elapsed)")
        }

        // Unlocked again by a new login (the daemon restarted with the password), the value from
        // before the lock is intact and the refused writes changed nothing.
        await bus.stopKeyring()
        try await bus.startKeyring(password: "failure-test-password")
        let again = try await SecretServiceCheck.start(environment: bus.environment)
        #expect(try await again.send("open 10000 0").ok)
        #expect(try await again.send("load github octocat")["value"] as? String == "before-the-lock")
    }

    /// A long-running process keeps one store. When gnome-keyring-daemon restarts, the store's
    /// transfer session belongs to a process that is gone; when the session bus restarts, its
    /// connection is closed. Either way its next call reconnects, within the probe's bound, with
    /// no new store (issue 13).
    @Test func aLongRunningStoreSurvivesRestartsOfTheKeyringAndOfTheBus() async throws {
        let bus = try await unlockedKeyring()
        var environment = bus.environment
        environment["DBUS_SESSION_BUS_ADDRESS"] = bus.stableAddress
        let check = try await SecretServiceCheck.start(environment: environment)
        #expect(try await check.send("open 10000 0").ok)
        #expect(try await check.send("save github octocat before-the-restarts").ok)

        await bus.stopKeyring()
        try await bus.startKeyring(password: "failure-test-password")
        let afterKeyring = try await check.send("load github octocat")
        #expect(afterKeyring["value"] as? String == "before-the-restarts", "\(afterKeyring.fields)")
        #expect(afterKeyring.elapsed < .seconds(2), "took \(afterKeyring.elapsed)")
        let saved = try await check.send("save github octocat after-the-keyring-restart")
        #expect(saved.ok, "\(saved.fields)")

        try await bus.restartBus()
        try await bus.startKeyring(password: "failure-test-password")
        let afterBus = try await check.send("load github octocat")
        #expect(afterBus["value"] as? String == "after-the-keyring-restart", "\(afterBus.fields)")
        #expect(afterBus.elapsed < .seconds(2), "took \(afterBus.elapsed)")
        #expect(try await check.send("save github octocat after-the-bus-restart").ok)
        #expect(try await check.send("keys")["keys"] as? [String] == ["github/octocat"])
        await bus.stop()
    }

    @Test func anUnlockPromptThatCannotOpenADisplayFailsFast() async throws {
        // As on a headless machine with gcr installed: the provider starts its prompter, which
        // cannot open a display and exits. Allowed to prompt, the store still answers quickly.
        let bus = try await unlockedKeyring(activation: true)
        let check = try await SecretServiceCheck.start(environment: bus.environment)
        #expect(try await check.send("open 10000 1").ok)
        #expect(try await check.send("save github default value").ok)
        try await bus.lockLogin()

        let answer = try await check.send("load github default")
        #expect(answer.code == "locked", "\(answer.fields)")
        #expect(answer.message.contains("prompt"))
        #expect(answer.elapsed < .seconds(5))
    }

    @Test func aFrozenKeyringTimesOutWithoutStarvingOtherTasks() async throws {
        let bus = try await unlockedKeyring()
        let check = try await SecretServiceCheck.start(environment: bus.environment)
        #expect(try await check.send("open 700 0").ok)
        #expect(try await check.send("save github default value").ok)

        let pid = try #require(bus.keyringPID)
        #expect(kill(pid, SIGSTOP) == 0)
        let answer = try await check.send("starve github default")
        #expect(kill(pid, SIGCONT) == 0)

        #expect(answer["codes"] as? [String] == ["timeout", "timeout", "timeout", "timeout"], "\(answer.fields)")
        // The loads' deadline is 700 ms: had they held the pool's threads, the ticker would have
        // waited about that long between two ticks.
        #expect((answer["longest_gap_ms"] as? Int ?? .max) < 350, "the cooperative pool stalled: \(answer.fields)")
        #expect(answer.elapsed < .seconds(3))
        let single = try await check.send("load github default")
        #expect(single.ok, "thawed, the same store works again: \(single.fields)")
        #expect(single["value"] as? String == "value")

        #expect(kill(pid, SIGSTOP) == 0)
        let frozen = try await check.send("load github default")
        #expect(kill(pid, SIGCONT) == 0)
        #expect(frozen.code == "timeout")
        #expect(frozen.message.contains("did not answer within"))
    }

    @Test func aKeyringThatGoesAwayIsUnavailableNotACrash() async throws {
        let bus = try await unlockedKeyring()
        let check = try await SecretServiceCheck.start(environment: bus.environment)
        #expect(try await check.send("open 5000 0").ok)
        #expect(try await check.send("save github default value").ok)

        await bus.stopKeyring()
        let noProvider = try await check.send("load github default")
        #expect(noProvider.code == "backend-unavailable", "\(noProvider.fields)")

        // Then the bus itself: GIO would end the process here (exit-on-close); the store throws.
        await bus.stop()
        let noBus = try await check.send("load github default")
        #expect(noBus.code == "backend-unavailable", "\(noBus.fields)")
        let save = try await check.send("save github default other")
        #expect(save.code == "backend-unavailable", "\(save.fields)")
    }

    @Test func noDefaultCollectionIsAClearErrorOnSave() async throws {
        let bus = try await PrivateBus.start()
        try await bus.startKeyring(password: nil)
        let check = try await SecretServiceCheck.start(environment: bus.environment)
        #expect(try await check.send("open 5000 0").ok)
        let save = try await check.send("save github default value")
        #expect(save.code == "backend-unavailable", "\(save.fields)")
        #expect(save.message.contains("no default collection"))
        #expect(try await check.send("load github default")["value"] is NSNull)
    }

    @Test func onALockedKeyringExplicitAndAutoBothFailClosed() async throws {
        let bus = try await unlockedKeyring()
        try await bus.lockLogin()
        let directory = try TemporaryDirectory()
        let keyFile = try directory.keyFile()
        let check = try await SecretServiceCheck.start(environment: bus.environment)

        // Named, the Secret Service is not probed first (issue 17): opening connects, and the lock
        // is met by the first read or write, which fails closed with `locked`
        // (theVaultCommandOnALockedKeyringExitsSixQuickly, below, reads through the command).
        let explicit = try await check.send("vault secret-service \(directory.file("vault")) \(keyFile)")
        #expect(explicit["backend"] as? String == "secret-service", "\(explicit.fields)")
        #expect(explicit["probe"] is NSNull, "a named Secret Service was probed: \(explicit.fields)")
        #expect(explicit.elapsed < .seconds(2))
        #expect(!FileManager.default.fileExists(atPath: directory.file("vault")), "no silent fallback to the file")

        // A locked keyring is not an absent one: auto does not send this key's writes to the file.
        let auto = try await check.send("vault auto \(directory.file("vault")) \(keyFile)")
        #expect(auto.code == "locked", "\(auto.fields)")
        #expect(auto.message.contains("--backend file"))
        #expect(!FileManager.default.fileExists(atPath: directory.file("vault")), "no silent fallback to the file")
    }

    @Test func withoutABusExplicitFailsClosedAndAutoUsesTheFile() async throws {
        let directory = try TemporaryDirectory()
        let keyFile = try directory.keyFile()
        let check = try await SecretServiceCheck.start(environment: ["XDG_RUNTIME_DIR": directory.path, "HOME": directory.path])

        let open = try await check.send("open 5000 0")
        #expect(open.code == "backend-unavailable")
        #expect(open.message.contains("no D-Bus session bus"))

        let explicit = try await check.send("vault secret-service \(directory.file("vault")) \(keyFile)")
        #expect(explicit.code == "backend-unavailable", "\(explicit.fields)")
        #expect(explicit.elapsed < .seconds(2))
        #expect(!FileManager.default.fileExists(atPath: directory.file("vault")))

        let auto = try await check.send("vault auto \(directory.file("vault")) \(keyFile)")
        #expect(auto["backend"] as? String == "file", "\(auto.fields)")
        #expect(auto["probe"] as? String == "no-session-bus")
    }

    @Test func theVaultCommandOnALockedKeyringExitsSixQuickly() async throws {
        let bus = try await unlockedKeyring()
        try await bus.lockLogin()
        let vault = try Products.executable("vault")

        let get = try await offPool { try ChildProcess.run(vault, ["get", "github", "--backend", "secret-service"], environment: bus.environment) }
        #expect(get.status == 6, "\(get.stderr)")
        #expect(get.stderr.contains("locked"))
        #expect(get.stderr.contains("no prompt can be shown") || get.stderr.contains("no unlock prompt can be shown"))
        #expect(get.elapsed < .seconds(3))

        let status = try await offPool { try ChildProcess.run(vault, ["status", "--json"], environment: bus.environment) }
        let object = try #require(try JSONSerialization.jsonObject(with: status.stdout) as? [String: Any])
        #expect((object["secret_service"] as? [String: Any])?["outcome"] as? String == "locked")
        #expect((object["reason"] as? String)?.contains("locked") == true, "auto says why it does not use the keyring")
    }
}
#endif
