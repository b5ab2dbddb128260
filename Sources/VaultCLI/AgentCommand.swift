#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import Dispatch
import FoundationEssentials
import Glibc
@_spi(AgentWire) import TokenVault

internal import TokenVaultSystem

extension VaultCommand {
    struct Agent: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "agent",
            abstract: "Run the token agent in the foreground: unlock once, refresh ahead, hand out access tokens on a socket.",
            discussion: """
                Opens the vault once (a file vault with its key file, passphrase file or systemd \
                credential; with none, the agent starts locked and `vault unlock` gives it the \
                passphrase) and listens on $XDG_RUNTIME_DIR/tokenvault/agent.sock (directory 0700, \
                socket 0600; TOKEN_VAULT_AGENT_SOCKET or --socket to choose another). Only \
                processes of the same user are served (SO_PEERCRED); others are refused and logged.

                vault get, get --fresh, vault run and vault git-credential ask the agent first and \
                go direct, as without it, when it does not answer within 0.5 s, speaks another \
                protocol version or serves another vault. TOKEN_VAULT_AGENT=off bypasses it. A \
                client of another user's agent (a system agent whose policy grants it) cannot read \
                that vault: it waits for the answer (10 s for a read, 25 s when it may refresh), \
                says so on stderr past 0.5 s, and exits 6 saying why when none comes.

                Over the socket a client gets the access token, its type, expiry and scope, never \
                the refresh token, the client secret or the key. An entry with a client \
                registration is refreshed once --refresh-at of its lifetime has passed, through the \
                same single flight as every other process. Writes (set, delete, and login's store \
                step) go through the agent too when it answers, and directly otherwise, with the \
                same result and messages; only the agent's own user may write through it. The \
                agent reads every answer from the vault, so it never serves a token the vault no \
                longer holds.

                A system agent, run as a service account that owns the vault, also serves the users \
                and groups its --policy file names, each only the access tokens of the entries \
                granted to it; one grant a line, `#` comments:

                  user www-data   api.example.com  deploy    (account left out: "default")
                  group webapps   github           *         (* any account)
                  uid 1002        reports.*        *         (a service prefix)

                An unknown first word, an unknown user or group, or a policy file that is a \
                symbolic link, belongs to another user than root or the agent's, or is writable by \
                group or others stops the agent from starting (exit 1). With a policy, the socket \
                is created 0666 (the policy is the gate; the directory must not be writable by \
                others). A peer the policy does not name, or a request for an entry it does not \
                grant, is refused and logged by uid, pid and entry name; its vault get exits 1 \
                (permission denied). Granted users cannot unlock or lock the agent. SIGHUP reads \
                the policy file again: the new grants count for every request from then on, on \
                connections already open too; a new file that is unsafe or does not parse is \
                refused, the old policy stays in force, and the log says why.

                At most --max-connections connections at once, and at most \
                --max-connections-per-user of them for one user (default: all of them without a \
                policy, a quarter with one), so that one user cannot take every slot; a \
                connection past either is answered no-free-connection and closed: a client of \
                the agent's own user goes direct, a granted user's client tries again until a \
                slot frees or its bound runs out (then exit 6, saying so).

                SIGTERM or SIGINT stop it (SIGHUP too, without --policy); vault lock (or \
                --idle-timeout) makes it forget the key.
                """
        )

        @OptionGroup var global: GlobalOptions

        @Option(help: ArgumentHelp("The socket (default $TOKEN_VAULT_AGENT_SOCKET, else $XDG_RUNTIME_DIR/tokenvault/agent.sock).", valueName: "path"))
        var socket: String?

        @Option(help: ArgumentHelp("Refresh a token once this fraction of its lifetime has passed (0.1 to 0.95).", valueName: "fraction"))
        var refreshAt: Double = 0.75

        @Option(help: ArgumentHelp("Forget the vault's key after this many seconds without a request (default: never).", valueName: "seconds"))
        var idleTimeout: Int?

        @Option(help: ArgumentHelp("At most this many connections at once; more are refused (no-free-connection) and closed.", valueName: "count"))
        var maxConnections: Int = 64

        @Option(
            help: ArgumentHelp(
                "At most this many connections of one user (default: --max-connections without --policy, a quarter of it with one).",
                valueName: "count"))
        var maxConnectionsPerUser: Int?

        @Option(
            help: ArgumentHelp(
                "A system agent's policy: which other users and groups may read which entries' access tokens (see the discussion); the socket is then made 0666.",
                valueName: "file"))
        var policy: String?

        func validate() throws {
            try global.validateConfiguration()
            guard (0.1...0.95).contains(refreshAt) else { throw ValidationError("--refresh-at must be between 0.1 and 0.95.") }
            if let idleTimeout, idleTimeout < 1 { throw ValidationError("--idle-timeout must be at least 1 second.") }
            guard (1...4096).contains(maxConnections) else { throw ValidationError("--max-connections must be between 1 and 4096.") }
            if let maxConnectionsPerUser, !(1...maxConnections).contains(maxConnectionsPerUser) {
                throw ValidationError("--max-connections-per-user must be between 1 and --max-connections (\(maxConnections)).")
            }
            if let socket, !socket.hasPrefix("/") { throw ValidationError("--socket must be an absolute path.") }
            if let policy, policy.isEmpty { throw ValidationError("--policy names a file.") }
        }

        func run() async throws {
            // A long-lived process whose connections are short-lived threads: two malloc arenas
            // (glibc would make up to eight per core, each keeping what its threads freed).
            SystemCall.limitMallocArenas(to: 2)
            var environment = ProcessInfo.processInfo.environment
            environment["TOKEN_VAULT_AGENT"] = nil
            // Under socket activation the service manager made the socket; its path is only shown.
            let activated = environment["LISTEN_FDS"] == "1" && environment["LISTEN_PID"] == String(SystemCall.processID)
            guard let path = socket ?? AgentProtocol.socketPath(environment: environment) ?? (activated ? "(the socket systemd passed)" : nil) else {
                throw VaultError(
                    .configurationError, "XDG_RUNTIME_DIR is not set, so the agent has no socket directory; give --socket or TOKEN_VAULT_AGENT_SOCKET.")
            }
            var configuration = try global.configuration()
            if let kind = configuration.backend.kind, !kind.isBuiltIn {
                throw VaultError(
                    .configurationError, "vault agent serves the Secret Service and file vaults; the \(kind.rawValue) backend is used directly.")
            }
            configuration.createIfMissing = false
            // A long-lived process: the Secret Service store watches its items, as a library user's does.
            configuration.secretService.watchesChanges = true
            configuration.secretService.unlockPrompt = false
            let plan = await BackendPlan.make(for: configuration)
            for warning in plan.warnings { try Output.warning(warning) }
            if let refusal = plan.refusal { throw refusal }
            if plan.usesFile && !plan.fileExists {
                throw VaultError(.notFound, "There is no vault yet at \(plan.filePath); store a token first (vault set), then start the agent.")
            }
            let base = configuration
            var options = AgentServer.Options(socketPath: path)
            options.refreshAt = refreshAt
            options.idleLock = idleTimeout.map { .seconds($0) }
            options.maximumConnections = maxConnections
            options.maximumConnectionsPerUser = maxConnectionsPerUser
            if let policy {
                options.policy = try AgentPolicy.load(path: policy)
            }
            let server = AgentServer(
                options: options, identity: AgentProtocol.vaultIdentity(of: configuration, environment: ProcessEnvironment.current),
                opensItself: !plan.usesFile || configuration.keySource != nil, client: try HTTPOptions.client(),
                log: { message in try? Output.note(message) },
                opener: { passphrase in
                    var configuration = base
                    if let passphrase { configuration.keySource = .passphrase(passphrase) }
                    return try await Vault.open(configuration, plan: await BackendPlan.make(for: configuration))
                })
            // The vault is opened (Argon2id for a passphrase) before the socket appears, so that
            // no client waits on a socket that cannot answer yet; under socket activation
            // (tokenvault-agent.socket) the socket exists already and its first client waits.
            let adopted = activated && server.adoptActivatedSocket(environment: environment)
            do {
                try await server.unlockAtStart()
                if !adopted { try server.listen() }
            } catch {
                server.stop()
                throw error
            }
            let signals = [SIGTERM, SIGINT, SIGHUP].map { number in
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
                if number == SIGHUP, let policy {
                    // A system agent reloads its policy (systemctl reload); a bad file keeps the old one.
                    source.setEventHandler { server.reloadPolicy(from: policy) }
                } else {
                    source.setEventHandler { server.stop() }
                }
                source.resume()
                return source
            }
            try Output.note(
                "vault agent: serving the \(plan.backend?.rawValue ?? configuration.backend.rawValue) vault on \(path) (pid \(SystemCall.processID), protocol \(AgentProtocol.version)\(policy.map { ", policy \($0): \(options.policy?.grants.count ?? 0) grants" } ?? ""), \(server.isUnlocked ? "unlocked" : "locked: vault unlock unlocks it"))")
            // The start (argument parsing, the backend plan, opening the vault) ran code that
            // serving never runs again: drop its mappings; what serving runs is mapped back.
            SystemCall.releaseExecutableCodeMappings()
            await server.serve()
            signals.forEach { $0.cancel() }
            try Output.note("vault agent: stopped")
        }
    }

    struct Unlock: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "unlock",
            abstract: "Give the running agent its file vault's passphrase.",
            discussion: """
                Reads the passphrase as one line from stdin when stdin is not a terminal, else asks \
                for it on the terminal, and sends it to the agent, which opens the vault with it and keeps the \
                key in secure memory until vault lock, its idle timeout or its end. Exit 4 for a \
                wrong passphrase, 6 when no agent answers.
                """
        )

        func run() async throws {
            let client = try AgentCLI.requireAgent()
            let passphrase: SecretBytes
            if !Terminal.isTerminal(SystemCall.standardInput) {
                passphrase = try AgentCLI.readLine(from: SystemCall.standardInput)
            } else if let terminal = Terminal.openControllingTerminal() {
                defer { SystemCall.closeAfterUse(terminal) }
                passphrase = try Terminal.readPassphrase(prompt: "Passphrase for the agent's vault: ", terminal: terminal)
            } else {
                throw VaultError(.invalidInput, "No terminal to ask for the passphrase; give it on standard input.")
            }
            var unlocking = client
            unlocking.deadline = .seconds(30)  // Argon2id takes its time
            try AgentCLI.expectDone(try AgentCLI.sending(.unlock(passphrase: passphrase), to: unlocking))
            try Output.note("vault unlock: the agent is unlocked.")
        }
    }

    struct Lock: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "lock",
            abstract: "Make the running agent forget its vault's key.",
            discussion: "Exit 6 when no agent answers."
        )

        func run() async throws {
            let client = try AgentCLI.requireAgent()
            try AgentCLI.expectDone(try AgentCLI.sending(.lock, to: client))
            try Output.note("vault lock: the agent forgot the key.")
        }
    }
}

/// How commands use the agent: ask it first, and go direct, as without it, when it cannot answer.
enum AgentCLI {
    /// The agent to ask for `global`'s vault, or nil: TOKEN_VAULT_AGENT=off, no socket path, or a
    /// backend the agent does not serve.
    static func client(for global: GlobalOptions) -> (client: AgentClient, vault: String)? {
        client(for: try? global.configuration())  // nil: direct reports it
    }

    /// The same for a configuration (nil: one that could not be made, which direct reports).
    static func client(for configuration: VaultConfiguration?) -> (client: AgentClient, vault: String)? {
        guard var client = AgentClient.fromEnvironment(ProcessEnvironment.current) else { return nil }
        guard let configuration else { return nil }
        // A wait past the fast deadline (a refresh at the agent, a busy system agent) is said once.
        client.waiting = { reason in try? Output.note("vault: \(reason).") }
        if let kind = configuration.backend.kind, !kind.isBuiltIn { return nil }
        return (client, AgentProtocol.vaultIdentity(of: configuration, environment: ProcessEnvironment.current))
    }

    /// The agent's token under `key`, or nil to go direct. A noteworthy reason (another protocol
    /// version, a refusal) is said on stderr; "no agent runs" is not.
    static func token(for key: CredentialKey, fresh: Bool, global: GlobalOptions) throws -> (token: AgentToken, socket: String)? {
        try token(for: key, fresh: fresh, configuration: try? global.configuration())
    }

    /// The same for a configuration (nil: one that could not be made, which direct reports).
    static func token(
        for key: CredentialKey, fresh: Bool, configuration: VaultConfiguration?
    ) throws -> (token: AgentToken, socket: String)? {
        guard let (client, vault) = client(for: configuration) else { return nil }
        do {
            return (try client.token(for: key, fresh: fresh, leeway: VaultCommand.Get.leeway, vault: vault), client.socketPath)
        } catch let unavailable as AgentClient.Unavailable {
            if unavailable.isNoteworthy { try Output.note("vault: \(unavailable.reason); going direct.") }
            return nil
        }
    }

    /// The agent's `proof` answer for a `method` request to `url` with the token under `key`
    /// (a proof it signs for a DPoP-bound entry; the key stays in the agent), or nil to go direct,
    /// as ``token(for:fresh:global:)``.
    static func authorization(
        for key: CredentialKey, method: String, url: URL, fresh: Bool, global: GlobalOptions
    ) throws -> AgentAuthorization? {
        guard let (client, vault) = client(for: global) else { return nil }
        do {
            return try client.authorization(
                for: key, method: method, url: url, fresh: fresh, leeway: VaultCommand.Get.leeway, vault: vault)
        } catch let unavailable as AgentClient.Unavailable {
            if unavailable.isNoteworthy { try Output.note("vault: \(unavailable.reason); going direct.") }
            return nil
        }
    }

    /// A write through the agent (`vault set`, `delete`, `login`): its answer, or nil to write
    /// directly, as without an agent. `request` is made for the vault identity the agent must
    /// serve. A noteworthy reason (an agent that does not take writes, a failed write there) is
    /// said on stderr; "no agent runs" is not. The agent's refusal (another user's system agent)
    /// is thrown.
    static func write(global: GlobalOptions, _ request: (_ vault: String) throws -> AgentRequest) throws -> AgentWriteResult? {
        guard let (client, vault) = client(for: global) else { return nil }
        do {
            switch try request(vault) {
            case .store(let store): return try client.store(store)
            case .delete(let delete): return try client.delete(try delete.key(), vault: delete.vault)
            default: return nil
            }
        } catch let unavailable as AgentClient.Unavailable {
            if unavailable.isNoteworthy { try Output.note("vault: \(unavailable.reason); going direct.") }
            return nil
        }
    }

    /// Whether an agent of this user holds `global`'s vault open, so that a write can go through
    /// it with no key here (`vault login` then asks no passphrase), and a command that reads the
    /// vault itself can say so when it has no key.
    static func holdsVaultOpen(global: GlobalOptions) -> Bool {
        guard let (client, vault) = client(for: global) else { return false }
        return client.holdsOpen(vault: vault)
    }

    static func requireAgent() throws -> AgentClient {
        var environment = ProcessInfo.processInfo.environment
        environment["TOKEN_VAULT_AGENT"] = nil
        guard let path = AgentProtocol.socketPath(environment: environment) else {
            throw VaultError(.backendUnavailable, "No agent socket: XDG_RUNTIME_DIR and TOKEN_VAULT_AGENT_SOCKET are not set.")
        }
        return AgentClient(socketPath: path)
    }

    static func sending(_ request: AgentRequest, to client: AgentClient) throws -> AgentResponse {
        do {
            return try client.send(request)
        } catch {
            throw VaultError(.backendUnavailable, "No agent answered on \(client.socketPath): \(error.reason).")
        }
    }

    static func expectDone(_ response: AgentResponse) throws {
        if let error = response.error { throw error }
        guard case .done = response else { throw VaultError(.io, "The agent answered with another kind of message.") }
    }

    /// One line from `fd` (without its newline) into secure memory.
    static func readLine(from fd: Int32) throws -> SecretBytes {
        var bytes = [UInt8]()
        defer { bytes.wipe() }
        var byte: UInt8 = 0
        while bytes.count < 4096 {
            let count = (try? withUnsafeMutableBytes(of: &byte) { raw throws(Errno) in try SystemCall.read(fd, into: raw) }) ?? -1
            if count <= 0 || byte == UInt8(ascii: "\n") { break }
            bytes.append(byte)
        }
        guard !bytes.isEmpty else { throw VaultError(.invalidInput, "No passphrase was given on standard input.") }
        return try SecretBytes(copying: bytes)
    }
}
#endif
