#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport

/// How many D-Bus calls each operation sends to gnome-keyring, counted by `dbus-monitor` on a
/// private bus (issue 17: every Secret Service operation at least even with secretstorage).
///
/// Before issue 17 a get took 3 calls (Locked, SearchItems, GetSecrets), an overwrite 6
/// (Locked, SearchItems, the item's properties, GetSecrets of the old value, SetSecret, GetSecrets
/// to read it back) and a delete 3 (Locked, SearchItems, Delete). A store that has seen a key
/// makes no search for it at all (ItemPathCache).
@Suite(.timeLimit(.minutes(2))) struct SecretServiceRoundTripTests {
    /// A private bus with gnome-keyring, a call monitor, and a store opened in a check process;
    /// the monitor has taken the calls made so far.
    private static func monitoredKeyring() async throws -> (PrivateBus, CallMonitor, SecretServiceCheck) {
        let bus = try await PrivateBus.start()
        try await bus.startKeyring(password: "round-trip-test-password")
        let monitor = try await CallMonitor.start(bus)
        let check = try await SecretServiceCheck.start(environment: bus.environment)
        #expect(try await check.send("open 10000 0").ok)
        _ = try await monitor.calls()
        return (bus, monitor, check)
    }

    @Test func eachOperationOnGnomeKeyringTakesTheFewestCalls() async throws {
        let (bus, monitor, check) = try await Self.monitoredKeyring()

        // A new key, as the store's first operation: the search, the alias and the lock of the
        // default collection, CreateItem (gnome-keyring writes its file once for a SetSecret,
        // where CreateItem with replace changes three things). When its next operation begins, the
        // store subscribes to gnome-keyring's item and collection signals (ItemPathCache).
        #expect(try await check.send("save github octocat first").ok)
        #expect(try await monitor.calls() == ["SearchItems", "ReadAlias", "Get", "CreateItem"])
        // Another new key of the service: a search by service and the attributes of what it
        // finds (the service's census, taken once), the lock (read once, then kept), CreateItem.
        #expect(try await check.send("save github hubot first").ok)
        #expect(try await monitor.calls() == ["SearchItems", "Get", "Get", "CreateItem"])
        // A third: the store knows the service has no such item and the collection is unlocked.
        #expect(try await check.send("save github monalisa first").ok)
        #expect(try await monitor.calls() == ["CreateItem"])
        // Overwrites of the key's one item: its properties show it is of this schema with the same
        // label, and SetSecret writes it in place. No search, no read-back on gnome-keyring.
        #expect(try await check.send("save github octocat second").ok)
        #expect(try await monitor.calls() == ["GetAll", "SetSecret"])
        #expect(try await check.send("load github octocat")["value"] as? String == "second")
        #expect(try await monitor.calls() == ["GetSecrets"])
        #expect(try await check.send("save github hubot second").ok)
        #expect(try await monitor.calls() == ["GetAll", "SetSecret"])
        #expect(try await check.send("delete github octocat").ok)
        #expect(try await monitor.calls() == ["Delete"])
        // Made again: known to have no item.
        #expect(try await check.send("save github octocat third").ok)
        #expect(try await monitor.calls() == ["CreateItem"])
        #expect(try await check.send("delete github octocat").ok)
        #expect(try await monitor.calls() == ["Delete"])
        // Absent: the lock is read, so that a locked keyring is never "absent".
        let absent = try await check.send("load github octocat")
        #expect(absent.ok && absent["value"] is NSNull, "\(absent.fields)")
        #expect(try await monitor.calls() == ["SearchItems", "Get"])
        await bus.stop()
    }

    /// The lock the store keeps is dropped when gnome-keyring reports that a collection changed:
    /// a new key of a counted service, after another client locked the collection, is `locked`
    /// (read again, never a CreateItem that would prompt on a desktop).
    @Test func aLockAnotherClientMadeIsSeenBeforeTheNextNewKey() async throws {
        let (bus, monitor, check) = try await Self.monitoredKeyring()
        #expect(try await check.send("save github octocat first").ok)
        #expect(try await check.send("save github hubot first").ok)
        #expect(try await check.send("save github monalisa first").ok)
        #expect(try await monitor.calls().last == "CreateItem")
        try await bus.lockLogin()
        let locked = try await check.send("save github mona second")
        #expect(!locked.ok && locked["code"] as? String == "locked", "\(locked.fields)")
        let calls = try await monitor.calls()
        #expect(!calls.contains("CreateItem") && calls.contains("Get"), "\(calls)")
        await bus.stop()
    }

    /// A cold `vault get` that names the Secret Service connects once and makes no probe: no
    /// second connection reading the default alias and its lock before the store's own calls.
    @Test func aNamedSecretServiceIsNotProbedFirst() async throws {
        let (bus, monitor, check) = try await Self.monitoredKeyring()
        #expect(try await check.send("save github octocat gho_notProbed1").ok)
        _ = try await monitor.calls()

        let vault = try Products.executable("vault")
        let get = try await offPool {
            try ChildProcess.run(vault, ["get", "github", "octocat", "--backend", "secret-service"], environment: bus.environment)
        }
        #expect(get.status == 0, "\(get.stderr)")
        #expect(String(decoding: get.stdout, as: UTF8.self) == "gho_notProbed1\n")
        let calls = try await monitor.calls()
        #expect(!calls.contains("ReadAlias"), "the default alias was read: the probe ran (\(calls))")
        #expect(calls.filter { $0 == "SearchItems" }.count == 1 && calls.last == "GetSecrets", "\(calls)")

        // The control: `auto` has to choose, so it probes (the alias, then the lock).
        let auto = try await offPool { try ChildProcess.run(vault, ["get", "github", "octocat"], environment: bus.environment) }
        #expect(auto.status == 0, "\(auto.stderr)")
        #expect(try await monitor.calls().contains("ReadAlias"))
        await bus.stop()
    }
    /// A one-shot `vault get`, or a `vault set` (which reads the entry before it writes, to keep its
    /// client registration), never subscribes to gnome-keyring's item and collection signals: it
    /// would never use what they keep fresh, and the two match rules cost two calls to the bus. A
    /// library store subscribes when its second operation begins (the control: the same monitor
    /// sees it).
    @Test func aOneShotCommandDoesNotSubscribeToItemSignals() async throws {
        let bus = try await PrivateBus.start()
        try await bus.startKeyring(password: "round-trip-test-password")
        let rules = try await MatchRuleMonitor.start(bus)
        let itemSignals = { (rule: String) in rule.contains("interface='org.freedesktop.Secret.Collection'") }
        let vault = try Products.executable("vault")
        for arguments in [["set", "github", "octocat", "--backend", "secret-service"], ["get", "github", "octocat", "--backend", "secret-service"]] {
            let run = try await offPool {
                try ChildProcess.run(vault, arguments, environment: bus.environment, stdin: Data("gho_oneShot1".utf8))
            }
            #expect(run.status == 0, "\(arguments[0]): \(run.stderr)")
            let added = try await rules.rules()
            #expect(!added.isEmpty, "libsecret's own proxies add rules; the monitor saw none")
            #expect(!added.contains(where: itemSignals), "\(arguments[0]) subscribed: \(added)")
        }

        let check = try await SecretServiceCheck.start(environment: bus.environment)
        #expect(try await check.send("open 10000 0").ok)
        #expect(try await check.send("save github hubot first").ok)
        #expect(try await !rules.rules().contains(where: itemSignals))
        #expect(try await check.send("save github hubot second").ok)
        #expect(try await rules.rules().filter(itemSignals).count == 1)
        await bus.stop()
    }
}

/// `dbus-monitor --profile` on a private bus: the members of the method calls sent to the Secret
/// Service's owner, between two markers. A marker is a `Peer.Ping` to the bus at a path of its
/// own; the bus orders it after every call sent before it, so no sleep is needed.
private final class CallMonitor: @unchecked Sendable {
    private let bus: PrivateBus
    private let process: ChildProcess
    private let provider: String
    private var marker = 0

    private init(_ bus: PrivateBus, provider: String) throws {
        self.bus = bus
        self.provider = provider
        process = try ChildProcess(
            "/usr/bin/stdbuf", ["-oL", "/usr/bin/dbus-monitor", "--address", bus.address, "--profile", "type='method_call'"],
            environment: ["PATH": "/usr/bin:/bin"], output: true)
    }

    deinit { process.stop() }

    static func start(_ bus: PrivateBus) async throws -> CallMonitor {
        let reply = try await bus.send(
            ["/org/freedesktop/DBus", "org.freedesktop.DBus.GetNameOwner", "string:org.freedesktop.secrets"],
            destination: "org.freedesktop.DBus")
        guard let start = reply.range(of: "string \"") else {
            throw SetupFailure("no owner of org.freedesktop.secrets: \(reply)")
        }
        let owner = String(reply[start.upperBound...].prefix { $0 != "\"" })
        let monitor = try await offPool { try CallMonitor(bus, provider: owner) }
        try await awaitMonitoring(monitor.process) { $0.hasPrefix("sig") && $0.hasSuffix("\tNameLost") }
        return monitor
    }

    /// The members called on the provider since the last marker.
    func calls() async throws -> [String] {
        marker += 1
        let path = try await sendMarker(marker, on: bus)
        let provider = self.provider
        return try await offPool {
            var members: [String] = []
            while let line = self.process.readLine() {
                let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
                guard fields.count >= 8, fields[0] == "mc" else { continue }
                if fields[5] == path { return members }
                if fields[4] == provider || fields[4] == "org.freedesktop.secrets" { members.append(fields[7]) }
            }
            throw SetupFailure("dbus-monitor ended before marker \(path)")
        }
    }
}

/// `dbus-monitor` on a private bus, watching the `AddMatch` calls that every client sends to the
/// bus daemon: the match rules added between two markers (as ``CallMonitor``'s).
private final class MatchRuleMonitor: @unchecked Sendable {
    private let bus: PrivateBus
    private let process: ChildProcess
    private var marker = 0

    private init(_ bus: PrivateBus) throws {
        self.bus = bus
        process = try ChildProcess(
            "/usr/bin/stdbuf",
            ["-oL", "/usr/bin/dbus-monitor", "--address", bus.address,
             "type='method_call',member='AddMatch'", "type='method_call',member='Ping'"],
            environment: ["PATH": "/usr/bin:/bin"], output: true)
    }

    deinit { process.stop() }

    static func start(_ bus: PrivateBus) async throws -> MatchRuleMonitor {
        let monitor = try await offPool { try MatchRuleMonitor(bus) }
        try await awaitMonitoring(monitor.process) { $0.hasPrefix("signal") && $0.hasSuffix("member=NameLost") }
        return monitor
    }

    /// The match rules added since the last marker.
    func rules() async throws -> [String] {
        marker += 1
        let path = try await sendMarker(marker, on: bus)
        return try await offPool {
            var rules: [String] = []
            while let line = self.process.readLine() {
                if line.hasPrefix("method call"), line.contains(" path=\(path);") { return rules }
                let argument = line.trimmingCharacters(in: .whitespaces)
                if argument.hasPrefix("string \"") { rules.append(String(argument.dropFirst(8).dropLast())) }
            }
            throw SetupFailure("dbus-monitor ended before marker \(path)")
        }
    }
}

/// Waits until `dbus-monitor` (`process`) has become a monitor: a connection that does loses its
/// unique name, sees its own NameLost (the line `isNameLost` recognises in its output format),
/// and from then on every message.
private func awaitMonitoring(_ process: ChildProcess, isNameLost: @escaping @Sendable (String) -> Bool) async throws {
    try await offPool {
        while let line = process.readLine() {
            if isNameLost(line) { return }
        }
        throw SetupFailure("dbus-monitor ended before it became a monitor")
    }
}

/// Sends marker `number`, a `Peer.Ping` to the bus at a path of its own, which the bus orders after
/// every call sent before it; returns that path, for the monitor to read up to.
private func sendMarker(_ number: Int, on bus: PrivateBus) async throws -> String {
    let path = "/tv/marker/\(number)"
    try await bus.send([path, "org.freedesktop.DBus.Peer.Ping"], destination: "org.freedesktop.DBus")
    return path
}
#endif
