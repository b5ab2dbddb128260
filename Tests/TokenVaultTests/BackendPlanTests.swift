import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

/// The one place that chooses a backend, fed with what a probe could find. No daemon: the probe
/// results are given, so every outcome is covered on any machine; the same rules on a real
/// locked gnome-keyring are in SecretService/AutoOnALockedKeyringTests.
@Suite struct BackendPlanTests {
    private func probe(_ outcome: SecretServiceProbe.Outcome, canPrompt: Bool = false) -> SecretServiceProbe {
        SecretServiceProbe(outcome: outcome, canPrompt: canPrompt, detail: "given by the test", elapsed: .zero)
    }

    private func configuration(
        _ backend: VaultConfiguration.Backend, file: String = "/nonexistent/tokens.vault", unlockPrompt: Bool = false
    ) -> VaultConfiguration {
        VaultConfiguration(
            backend: backend, filePath: file, keySource: .keyFile("/nonexistent/key"),
            secretService: SecretServiceStore.Options(unlockPrompt: unlockPrompt))
    }

    @Test func aStoreOfTheCallersOwnIsReportedAsItself() async throws {
        #expect(Vault(store: MemoryStore()).selection.backend == .memory)
        let own = Vault(store: ValueTypeStore(inner: MemoryStore()))
        #expect(own.selection.backend == .custom("tv-test-value-store"))
        #expect(own.selection.backend != .memory)
        #expect("\(own.selection.backend)" == "tv-test-value-store")
        #expect(own.store.backendName == "tv-test-value-store")
    }

    @Test func kindsRoundTripTheirNames() {
        for kind in [BackendKind.secretService, .file, .memory, .postgres, .custom("tv-other")] {
            #expect(BackendKind(rawValue: kind.rawValue) == kind)
        }
        #expect(BackendKind(rawValue: "secret-service") == .secretService)
        // PostgreSQL is a named kind, not a custom store that happens to call itself so.
        #expect(BackendKind(rawValue: "postgres") == .postgres)
        #expect(!BackendKind.postgres.isBuiltIn && BackendKind.file.isBuiltIn)
    }

    /// A backend that is not TokenVault's own is used only once the program registered it; until
    /// then the plan is refused, fails closed (no other backend), and names what is missing, so
    /// that `vault` can hand the command over to `vault-full`.
    @Test func anUnregisteredPostgresIsRefusedAndNamed() async throws {
        var configuration = VaultConfiguration(backend: .postgres)
        configuration.keySource = .keyFile("/nonexistent")
        #expect(BackendPlan.unregisteredBackend(for: configuration) == .postgres)
        #expect(BackendPlan.unregisteredBackend(for: VaultConfiguration(backend: .file)) == nil)
        #expect(BackendPlan.unregisteredBackend(for: VaultConfiguration(backend: .auto)) == nil)
        let plan = await BackendPlan.make(for: configuration)
        #expect(plan.backend == nil && plan.unregisteredBackend == .postgres, "\(plan)")
        #expect(plan.refusal?.code == .backendUnavailable)
        #expect(plan.refusal?.message.contains("VaultBackends.register") == true, "\(plan.refusal?.message ?? "")")
        await #expect(throws: VaultError.self) { _ = try await Vault.open(configuration, plan: plan) }
        // The environment names it as the command line does.
        let fromEnvironment = try VaultConfiguration.fromEnvironment(["TOKEN_VAULT_BACKEND": "postgres"])
        #expect(fromEnvironment.backend == .postgres)
    }

    /// What the refresh flight needs from a store is the store's own answer, never a downcast:
    /// memory is this process's alone, the file locks beside itself, a store of the caller's own
    /// locks in the runtime directory.
    @Test func storesSayWhereTheirRefreshesMeet() async throws {
        let memory = try MemoryStore().refreshLockPlacement()
        #expect(!memory.spansProcesses && !memory.spansHosts)
        let own = try ValueTypeStore(inner: MemoryStore()).refreshLockPlacement()
        #expect(own.spansProcesses && !own.spansHosts)
        let dir = try TemporaryDirectory()
        let file = try await EncryptedFileStore.open(
            path: dir.file("tokens.vault"), keySource: .keyFile(try FileTestSupport.keyFile(in: dir)))
        let placement = try file.refreshLockPlacement()
        #expect(placement.spansProcesses && !placement.spansHosts)
        #expect(FileManager.default.fileExists(atPath: dir.file("tokens.vault.locks")))
    }

    @Test(arguments: [
        (SecretServiceProbe.Outcome.noSessionBus, BackendKind.file),
        (.noProvider, .file),
        (.noDefaultCollection, .file),
        (.timedOut, .file),
        (.available, .secretService),
    ])
    func autoFollowsTheProbe(outcome: SecretServiceProbe.Outcome, expected: BackendKind) async {
        let plan = await BackendPlan.make(for: configuration(.auto), probe: probe(outcome))
        #expect(plan.backend == expected, "\(plan)")
        #expect(plan.refusal == nil)
        #expect(plan.probe?.outcome == outcome)
        #expect(plan.reason.hasPrefix("auto: "))
        #expect(plan.usesFile == (expected == .file))
        #expect(!plan.fileExists)
    }

    /// Issue 13 item 4: a locked keyring is not an absent one.
    @Test func autoOnALockedKeyringIsRefusedNotSentToTheFile() async throws {
        let dir = try TemporaryDirectory()
        let file = dir.file("tokens.vault")
        let key = try FileTestSupport.keyFile(in: dir)
        var configuration = configuration(.auto, file: file)
        configuration.keySource = .keyFile(key)
        let plan = await BackendPlan.make(for: configuration, probe: probe(.locked))
        #expect(plan.backend == nil, "\(plan)")
        #expect(plan.refusal?.code == .locked)
        #expect(plan.refusal?.message.contains("--backend file") == true)
        #expect(plan.reason.contains("locked"))

        let error = await #expect(throws: VaultError.self) { try await Vault.open(configuration, plan: plan) }
        #expect(error?.code == .locked)
        #expect(!FileManager.default.fileExists(atPath: file), "no silent fallback to the file")

        // Naming the file is the way to use it on purpose.
        configuration.backend = .file
        let explicit = try await Vault.open(configuration, plan: await BackendPlan.make(for: configuration))
        #expect(explicit.selection.backend == .file)
    }

    @Test func aLockedKeyringThatCanPromptIsUsed() async {
        for requested in [VaultConfiguration.Backend.auto, .secretService] {
            let plan = await BackendPlan.make(
                for: configuration(requested, unlockPrompt: true), probe: probe(.locked, canPrompt: true))
            #expect(plan.backend == .secretService, "\(requested): \(plan)")
            #expect(plan.reason.contains("prompt"))
        }
    }

    @Test(arguments: [SecretServiceProbe.Outcome.noSessionBus, .noProvider, .locked, .timedOut])
    func anExplicitSecretServiceFailsClosed(outcome: SecretServiceProbe.Outcome) async {
        let plan = await BackendPlan.make(for: configuration(.secretService), probe: probe(outcome))
        #expect(plan.backend == nil)
        #expect(plan.refusal?.code == (outcome == .locked ? .locked : .backendUnavailable))
    }

    @Test func explicitFileAndMemoryNeedNoProbe() async {
        let file = await BackendPlan.make(for: configuration(.file))
        #expect(file.backend == .file)
        #expect(file.probe == nil)
        #expect(file.filePath == "/nonexistent/tokens.vault")
        let memory = await BackendPlan.make(for: configuration(.memory))
        #expect(memory.backend == .memory)
        #expect(memory.probe == nil)
    }

    /// A file vault that auto leaves unused is named, so that two backends never hold one key's
    /// history unseen.
    @Test func autoWarnsOfAFileVaultItLeavesUnused() async throws {
        let dir = try TemporaryDirectory()
        let file = dir.file("tokens.vault")
        let key = try FileTestSupport.keyFile(in: dir)
        var configuration = configuration(.auto, file: file)
        configuration.keySource = .keyFile(key)
        #expect(await BackendPlan.make(for: configuration, probe: probe(.available)).warnings.isEmpty)

        var fileConfiguration = configuration
        fileConfiguration.backend = .file
        try await Vault.open(fileConfiguration).saveSecret(Data("x".utf8), for: CredentialKey(service: "s"))

        let plan = await BackendPlan.make(for: configuration, probe: probe(.available))
        #expect(plan.backend == .secretService)
        #expect(plan.fileExists)
        #expect(plan.warnings.count == 1)
        #expect(plan.warnings.first?.contains(file) == true)
        // The file in use is no reason to warn.
        #expect(await BackendPlan.make(for: configuration, probe: probe(.noSessionBus)).warnings.isEmpty)
    }
}
