#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

import Glibc

/// Each outcome of the availability probe, produced for real: no bus, a bus with no provider, a
/// provider with no default collection, a locked collection, an available one, and a bus that
/// accepts connections but never answers.
///
/// In this process the probe's answers are checked with a loose bound that only catches a hang:
/// the other tests running in parallel keep the cooperative pool busy. The strict bound (within
/// the 2 s timeout) is measured by ``SecretServiceProbeTimingTests`` in a process of its own.
@Suite(.timeLimit(.minutes(3))) struct SecretServiceProbeTests {
    static let bound = Duration.seconds(6)

    @Test func noAddressAndNoRuntimeSocketIsNoBus() async throws {
        let directory = try TemporaryDirectory()
        let probe = await SecretServiceStore.probe(environment: ["XDG_RUNTIME_DIR": directory.path])
        #expect(probe.outcome == .noSessionBus)
        #expect(probe.detail.contains("no bus socket at \(directory.path)/bus"))
        #expect(probe.elapsed < Self.bound)
    }

    @Test func anAddressNobodyListensOnIsNoBus() async throws {
        let directory = try TemporaryDirectory()
        let probe = await SecretServiceStore.probe(
            environment: ["DBUS_SESSION_BUS_ADDRESS": "unix:path=\(directory.path)/nothing-here"])
        #expect(probe.outcome == .noSessionBus)
        #expect(probe.detail.contains("does not answer"))
        #expect(probe.elapsed < Self.bound)
    }

    @Test func aBusWithNoProviderIsNoProvider() async throws {
        let bus = try await PrivateBus.start()
        let probe = await SecretServiceStore.probe(environment: bus.environment)
        #expect(probe.outcome == .noProvider, "\(probe)")
        #expect(probe.elapsed < Self.bound)
    }

    @Test func theRuntimeSocketIsUsedWhenNoAddressIsSet() async throws {
        // A systemd user session puts its bus at $XDG_RUNTIME_DIR/bus and may not export the
        // address: the probe finds it there, as GIO does (but never autolaunches a bus).
        let bus = try await PrivateBus.start()
        let probe = await SecretServiceStore.probe(environment: ["XDG_RUNTIME_DIR": bus.runtimeDirectory])
        #expect(probe.outcome == .noProvider, "\(probe)")
        try await bus.startKeyring(password: "runtime-socket-password")
        let again = await SecretServiceStore.probe(environment: ["XDG_RUNTIME_DIR": bus.runtimeDirectory])
        #expect(again.outcome == .available, "\(again)")
    }

    @Test func aKeyringWithNoLoginCollectionHasNoDefault() async throws {
        let bus = try await PrivateBus.start()
        try await bus.startKeyring(password: nil)
        let probe = await SecretServiceStore.probe(environment: bus.environment)
        #expect(probe.outcome == .noDefaultCollection, "\(probe)")
        #expect(probe.elapsed < Self.bound)
    }

    @Test func anActivatableKeyringIsStartedAndProbed() async throws {
        // As on a desktop where gnome-keyring is started on demand by D-Bus activation.
        let bus = try await PrivateBus.start(activation: true)
        let probe = await SecretServiceStore.probe(timeout: .seconds(10), environment: bus.environment)
        #expect(probe.outcome == .noDefaultCollection, "\(probe)")
        #expect(try await bus.send(["/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner", "string:org.freedesktop.secrets"],
                             destination: "org.freedesktop.DBus").contains("boolean true"))
    }

    @Test func anUnlockedKeyringIsAvailable() async throws {
        let bus = try await PrivateBus.start()
        try await bus.startKeyring(password: "probe-test-password")
        let probe = await SecretServiceStore.probe(environment: bus.environment)
        #expect(probe.outcome == .available, "\(probe)")
        #expect(probe.detail.contains("/org/freedesktop/secrets/collection/login"))
        #expect(probe.elapsed < Self.bound)
    }

    @Test func aLockedCollectionIsLockedAndSaysWhetherItCouldPrompt() async throws {
        let bus = try await PrivateBus.start()
        try await bus.startKeyring(password: "probe-test-password")
        try await bus.lockLogin()

        let headless = await SecretServiceStore.probe(environment: bus.environment)
        #expect(headless.outcome == .locked, "\(headless)")
        #expect(headless.canPrompt == false)
        #expect(headless.summary.contains("no prompt can be shown"))
        #expect(headless.elapsed < Self.bound)

        var desktop = bus.environment
        desktop["WAYLAND_DISPLAY"] = "wayland-0"
        let withDisplay = await SecretServiceStore.probe(environment: desktop)
        #expect(withDisplay.outcome == .locked)
        #expect(withDisplay.canPrompt == true)
    }

    @Test func theSharedKeyringIsAvailable() async throws {
        let probe = await SecretServiceStore.probe(environment: try SharedKeyring.environment())
        #expect(probe.outcome == .available, "\(probe)")
    }

    @Test func aBusThatNeverAnswersTimesOutInTime() async throws {
        // A socket that accepts connections (the kernel queues them) but never speaks: the
        // probe's D-Bus handshake gets no answer at all.
        let directory = try TemporaryDirectory()
        let listener = try SilentSocket(path: directory.file("silent"))
        defer { listener.close() }
        let environment = ["DBUS_SESSION_BUS_ADDRESS": "unix:path=\(directory.file("silent"))"]

        let probe = await SecretServiceStore.probe(timeout: .milliseconds(500), environment: environment)
        #expect(probe.outcome == .timedOut, "\(probe)")
        #expect(probe.elapsed < Self.bound)

        // Opening a store there fails within its own deadline too, and says why.
        let check = try await SecretServiceCheck.start(environment: environment)
        let open = try await check.send("open 500 0")
        #expect(open.code == "timeout", "\(open.fields)")
        #expect(open.elapsed < .milliseconds(1500), "measured inside the helper process")
    }

    @Test func hungProbesDoNotStarveOtherTasks() async throws {
        // Measured in a process of its own, where no other test occupies the cooperative pool:
        // more hung probes than the machine has cores, and a ticker that must keep ticking.
        let directory = try TemporaryDirectory()
        let listener = try SilentSocket(path: directory.file("silent"))
        defer { listener.close() }
        let check = try await SecretServiceCheck.start(
            environment: ["DBUS_SESSION_BUS_ADDRESS": "unix:path=\(directory.file("silent"))"])
        let answer = try await check.send("probe-starve 1000")
        #expect(answer["outcomes"] as? [String] == Array(repeating: "timed-out", count: 8), "\(answer.fields)")
        // The probes' timeout is 1 s: had they held the pool's threads, the ticker would have waited
        // about that long between two ticks.
        #expect((answer["longest_gap_ms"] as? Int ?? .max) < 500, "the ticker stalled while the probes hung: \(answer.fields)")
        #expect(answer.elapsed < .seconds(3))
    }
}

/// A Unix socket that listens and never accepts or answers.
struct SilentSocket {
    let descriptor: Int32

    init(path: String) throws {
        descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try #require(descriptor >= 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in path.utf8.prefix(buffer.count - 1).enumerated() { buffer[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0)
        try #require(listen(descriptor, 64) == 0)
    }

    func close() {
        _ = Glibc.close(descriptor)
    }
}

/// The probe's time bound, measured in a process of its own (`secret-service-check`) for each
/// outcome: the answer comes within the timeout, whatever the bus does.
@Suite(.timeLimit(.minutes(3))) struct SecretServiceProbeTimingTests {
    private func probe(_ environment: [String: String], timeout: Int = 2000) async throws -> SecretServiceCheck.Answer {
        let check = try await SecretServiceCheck.start(environment: environment)
        let answer = try await check.send("probe \(timeout)")
        #expect(answer.ok, "\(answer.fields)")
        return answer
    }

    @Test func noBus() async throws {
        let directory = try TemporaryDirectory()
        let answer = try await probe(["XDG_RUNTIME_DIR": directory.path])
        #expect(answer["outcome"] as? String == "no-session-bus")
        #expect(answer.elapsed < .seconds(2))
    }

    @Test func noProvider() async throws {
        let bus = try await PrivateBus.start()
        let answer = try await probe(bus.environment)
        #expect(answer["outcome"] as? String == "no-provider")
        #expect(answer.elapsed < .seconds(2))
    }

    @Test func lockedWithoutADisplay() async throws {
        let bus = try await PrivateBus.start()
        try await bus.startKeyring(password: "timing-test-password")
        try await bus.lockLogin()
        let answer = try await probe(bus.environment)
        #expect(answer["outcome"] as? String == "locked")
        #expect(answer["can_prompt"] as? Bool == false)
        #expect(answer.elapsed < .seconds(2))
    }

    @Test func aSilentBusTimesOutAtTheTimeout() async throws {
        let directory = try TemporaryDirectory()
        let listener = try SilentSocket(path: directory.file("silent"))
        defer { listener.close() }
        let answer = try await probe(["DBUS_SESSION_BUS_ADDRESS": "unix:path=\(directory.file("silent"))"], timeout: 500)
        #expect(answer["outcome"] as? String == "timed-out")
        #expect(answer.elapsed >= .milliseconds(450))
        #expect(answer.elapsed < .milliseconds(1000))
    }
}
#endif
