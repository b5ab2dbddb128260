#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
@_spi(AgentWire) import TokenVault

extension VaultCommand {
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "status",
            abstract: "Say which backend the vault uses and why, what the Secret Service probe found, and how many entries there are.",
            discussion: """
                It also counts the tokens the vault refreshes by itself, and those that need a new \
                login; `vault list` names them.
                """
        )

        @OptionGroup var global: GlobalOptions

        @Flag(help: "Print the status as JSON.")
        var json = false

        func validate() throws {
            try global.validateConfiguration()
        }

        /// What `status` says of a vault path where no vault is: one that `set` creates, or a
        /// dangling symbolic link, through which no vault is ever created.
        static func absentFileState(_ path: String) -> String {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: path) else {
                return "does not exist yet; `vault set` or `vault migrate` creates it"
            }
            return "a symbolic link to \(target), which does not exist; a vault is never created through a link: remove the link, or create the vault at its real path"
        }

        func run() async throws {
            let configuration = try global.configuration()
            if let kind = configuration.backend.kind, !kind.isBuiltIn {
                try await registeredBackendStatus(configuration)
                return
            }
            // One probe, shown here whatever the backend, and one plan: the one that opens the vault.
            let probe = await SecretServiceStore.probe(timeout: configuration.probeTimeout)
            let plan = await BackendPlan.make(for: configuration, probe: probe)
            var vault: Vault?
            // The key that opened the vault, which may have been typed at the terminal.
            var keySource = configuration.keySource
            var failure: VaultError? = plan.refusal
            var entries: Int?
            // How many entries the vault can refresh by itself, and how many need a new login.
            var refresh: RefreshCount?
            let agent = AgentReport.current(vault: AgentProtocol.vaultIdentity(of: configuration, environment: ProcessEnvironment.current))
            // A vault only the agent holds open here (no key given: opening it would ask for the
            // passphrase, or fail without a terminal) is described from the agent.
            let heldByAgent = failure == nil ? agent.entriesHeldOpen(plan: plan, keySource: configuration.keySource) : nil
            if let heldByAgent {
                entries = heldByAgent
            } else if failure == nil {
                do {
                    switch try await global.openExistingVault(plan: plan) {
                    case .opened(let opened, let usedKey):
                        vault = opened
                        keySource = usedKey
                        let keys = try await opened.keys()
                        entries = keys.count
                        refresh = await RefreshCount.of(keys, in: opened)
                    case .noVaultYet:
                        entries = 0
                    }
                } catch let error as VaultError {
                    failure = error
                }
            }
            var warnings = plan.warnings
            if let store = vault?.store as? EncryptedFileStore, let length = store.unfinishedWriteLength {
                warnings.append(
                    "the vault file ends in \(length) byte(s) of a write that did not finish (a process killed, or power lost, during a save, which therefore never succeeded); they are ignored, and the next write cuts them off. If no save was interrupted, the end of the file was damaged or cut: entries written last may be missing.")
            }
            // The backend in use: the plan's, once it opened (or has no file yet to open).
            let backend = vault != nil || entries != nil ? plan.backend : nil
            let reason = backend != nil || plan.refusal != nil ? plan.reason : nil
            let noFileYet = plan.usesFile && !plan.fileExists
            // The file is shown when it is used, or may be (the vault could not be opened), and
            // under auto when it is there but not used.
            let showsFile =
                plan.usesFile
                || (backend == nil && configuration.backend != .secretService)
                || (configuration.backend == .auto && plan.fileExists)

            if json {
                var object: [String: Any] = [
                    "requested_backend": configuration.backend.rawValue,
                    "backend": backend.map { $0.rawValue as Any } ?? JSONNull(),
                    "reason": reason.map { $0 as Any } ?? JSONNull(),
                    "secret_service": [
                        "outcome": probe.outcome.rawValue, "detail": probe.detail, "can_prompt": probe.canPrompt,
                        "elapsed_ms": Int(probe.elapsed.components.seconds * 1000 + probe.elapsed.components.attoseconds / 1_000_000_000_000_000),
                    ] as [String: Any],
                    "entries": entries.map { $0 as Any } ?? JSONNull(),
                    "refresh": refresh.map { $0.json as Any } ?? JSONNull(),
                    "warnings": warnings,
                ]
                if showsFile {
                    object["file"] = [
                        "path": plan.filePath, "exists": plan.fileExists, "used": plan.usesFile,
                        "key": heldByAgent != nil ? AgentReport.heldKey : keySource?.origin() ?? JSONNull(),
                    ] as [String: Any]
                }
                if let failure {
                    object["error"] = ["code": "\(failure.code)", "message": failure.message]
                }
                object["agent"] = agent.json
                try Output.json(object)
            } else {
                var rows: [[String]] = [["requested backend:", configuration.backend.rawValue]]
                if let backend, let reason {
                    rows.append(["backend in use:", backend.rawValue + (noFileYet ? " (no vault file yet)" : "")])
                    rows.append(["why:", reason])
                } else {
                    rows.append(["backend in use:", "none (the vault could not be opened)"])
                    if let reason { rows.append(["why:", reason]) }
                }
                rows.append(["Secret Service:", probe.summary])
                if showsFile {
                    let state =
                        !plan.fileExists
                        ? Self.absentFileState(plan.filePath)
                        : plan.usesFile || backend == nil ? "exists" : "exists, not used: auto uses the Secret Service"
                    rows.append(["vault file:", "\(plan.filePath) (\(state))"])
                    if plan.usesFile || backend == nil {
                        rows.append(["key:", heldByAgent != nil ? AgentReport.heldKey : keySource?.origin() ?? "none given"])
                    }
                }
                if let entries { rows.append(["entries:", "\(entries)"]) }
                if let refresh, entries ?? 0 > 0 { rows.append(["refresh:", refresh.summary]) }
                rows += agent.rows
                for warning in warnings { rows.append(["warning:", warning]) }
                try Output.line(Output.table(rows))
            }
            if let failure { throw failure }
        }
    }
}

/// What `vault status` says of the agent: whether it runs, is unlocked, and when it refreshes
/// each entry next.
struct AgentReport {
    var socket: String?
    var status: AgentStatus?
    var problem: String?
    var vault: String

    static func current(vault: String) -> AgentReport {
        guard let client = AgentClient.fromEnvironment() else {
            return AgentReport(socket: nil, status: nil, problem: "off (TOKEN_VAULT_AGENT=off, or no XDG_RUNTIME_DIR)", vault: vault)
        }
        do {
            return AgentReport(socket: client.socketPath, status: try client.status(), problem: nil, vault: vault)
        } catch {
            return AgentReport(socket: client.socketPath, status: nil, problem: error.isNoteworthy ? error.reason : "not running", vault: vault)
        }
    }

    /// What `status` says of the key of a vault the agent holds open for it.
    static let heldKey = "none given here; the agent holds the vault open (unlocked)"

    /// How many entries the vault holds, from the agent, when only the agent can open it here: a
    /// file vault that exists, for which no key is given, and which this agent serves, unlocked.
    /// Nil otherwise (and from an agent built before its status counted entries): the vault is
    /// opened directly.
    func entriesHeldOpen(plan: BackendPlan, keySource: VaultConfiguration.KeySource?) -> Int? {
        guard keySource == nil, plan.usesFile, plan.fileExists, let status, status.vault == vault, status.unlocked else { return nil }
        return status.count
    }

    var rows: [[String]] {
        guard let status, let socket else { return [["agent:", problem ?? "not running"]] }
        var text = "running (pid \(status.pid)) on \(socket), \(status.unlocked ? "unlocked" : "locked (vault unlock)")"
        if status.vault != vault { text += "; it serves another vault (\(status.vault)), so this one is read directly" }
        var rows = [["agent:", text]]
        for entry in status.entries {
            let name = "\(CredentialKey.escaped(entry.service))/\(CredentialKey.escaped(entry.account))"
            let when = entry.nextRefresh.map { Output.timestamp(Date(timeIntervalSince1970: $0)) }
            rows.append(["next refresh:", "\(name): \(when ?? "none") (\(entry.state))"])
        }
        return rows
    }

    var json: Any {
        guard let status, let socket else { return ["running": false, "detail": problem ?? "not running"] as [String: Any] }
        return [
            "running": true, "socket": socket, "pid": Int(status.pid), "unlocked": status.unlocked,
            "serves_this_vault": status.vault == vault, "refresh_at": status.refreshAt,
            "entries": status.entries.map { entry in
                [
                    "service": entry.service, "account": entry.account, "state": entry.state,
                    "next_refresh": entry.nextRefresh.map { Output.timestamp(Date(timeIntervalSince1970: $0)) as Any } ?? JSONNull(),
                ] as [String: Any]
            },
        ] as [String: Any]
    }
}

/// What `vault status` says about refreshing: how many tokens the vault refreshes by itself, and
/// how many need a new login. Counts only; no entry is named and no secret is read out.
struct RefreshCount {
    var tokens = 0
    var automatic = 0
    var rejected = 0
    var noRefreshToken = 0
    var noDescription = 0
    var unreadable = 0

    static func of(_ keys: [CredentialKey], in vault: Vault) async -> RefreshCount {
        var count = RefreshCount()
        let now = Date()
        for key in keys {
            let entry: TokenEntry?
            do {
                entry = try await vault.tokenEntry(for: key)
            } catch let error as VaultError where error.code == .invalidInput {
                continue  // an opaque secret, not a token
            } catch {
                count.unreadable += 1
                continue
            }
            guard let entry else { continue }  // deleted since the listing
            count.tokens += 1
            switch entry.refreshability(at: now) {
            case .refreshesItself: count.automatic += 1
            case .rejected: count.rejected += 1
            case .noRefreshToken: count.noRefreshToken += 1
            case .noDescription: count.noDescription += 1
            default: break
            }
        }
        return count
    }

    var summary: String {
        var parts = ["automatic for \(automatic) of \(tokens) token\(tokens == 1 ? "" : "s")"]
        if rejected > 0 { parts.append("\(rejected) rejected (log in again)") }
        if noRefreshToken > 0 { parts.append("\(noRefreshToken) without a refresh token") }
        if noDescription > 0 { parts.append("\(noDescription) without a refresh description") }
        if unreadable > 0 { parts.append("\(unreadable) unreadable") }
        return parts.joined(separator: "; ") + (automatic < tokens ? " (`vault list` names them)" : "")
    }

    var json: [String: Int] {
        [
            "tokens": tokens, "self": automatic, "rejected": rejected, "no-refresh-token": noRefreshToken,
            "no-description": noDescription, "unreadable": unreadable,
        ]
    }
}

extension VaultCommand.Status {
    /// The status of a backend the program registered (PostgreSQL): where its vault is and how it
    /// is reached, what the store reports once open (the server's version, this connection's TLS,
    /// the schema version), the entry count and the refresh counts.
    func registeredBackendStatus(_ configuration: VaultConfiguration) async throws {
        let plan = await BackendPlan.make(for: configuration)
        if let refusal = plan.refusal { throw refusal }
        guard let backend = plan.registeredBackend else { throw VaultError(.backendUnavailable, plan.reason) }
        let section = try (backend as? any StatusDescribingBackend)?.statusSection(for: configuration)
        var failure: VaultError?
        var report: BackendStatus?
        var entries: Int?
        var noVaultYet = false
        // How many tokens the vault refreshes by itself, as for the other backends.
        var refresh: RefreshCount?
        do {
            switch try await global.openExistingVault(plan: plan) {
            case .opened(let vault, _):
                defer { (vault.store as? any ClosableStore)?.close() }
                report = try await (vault.store as? any StatusReportingStore)?.statusReport() ?? BackendStatus()
                let keys = try await vault.keys()
                entries = keys.count
                refresh = await RefreshCount.of(keys, in: vault)
            case .noVaultYet:
                noVaultYet = true
                entries = 0
            }
        } catch let error as VaultError {
            failure = error
        }
        let kind = backend.kind.rawValue
        if json {
            var details: [String: Any] = [:]
            for (key, value) in (section?.status.fields ?? []) + (report?.fields ?? []) { details[key] = value.json }
            for key in report == nil ? ["server_version", "tls", "schema_version"] : [] where details[key] == nil {
                details[key] = JSONNull()
            }
            details["vault_exists"] = !noVaultYet && failure == nil
            var object: [String: Any] = [
                "requested_backend": configuration.backend.rawValue,
                "backend": failure == nil ? kind : JSONNull(),
                section?.name ?? kind: details,
                "entries": entries.map { $0 as Any } ?? JSONNull(),
                "refresh": refresh.map { $0.json as Any } ?? JSONNull(),
            ]
            if let failure { object["error"] = ["code": "\(failure.code)", "message": failure.message] }
            try Output.json(object)
        } else {
            var rows: [[String]] = [["requested backend:", configuration.backend.rawValue]]
            rows.append([
                "backend in use:",
                failure == nil ? kind + (noVaultYet ? " (no vault there yet)" : "") : "none (the vault could not be opened)",
            ])
            for row in section?.status.rows ?? [] { rows.append([row.label, row.value]) }
            for row in report?.rows ?? [] { rows.append([row.label, row.value]) }
            if let entries { rows.append(["entries:", "\(entries)"]) }
            if let refresh, entries ?? 0 > 0 { rows.append(["refresh:", refresh.summary]) }
            try Output.line(Output.table(rows))
        }
        if let failure { throw failure }
    }
}

extension BackendStatus.Value {
    /// The value as JSONSerialization writes it.
    var json: Any {
        switch self {
        case .string(let value): value
        case .int(let value): value
        case .bool(let value): value
        case .null: JSONNull()
        }
    }
}
#endif
