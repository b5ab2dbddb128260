#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
import TokenVault
import TokenVaultGit

internal import TokenVaultSystem

extension VaultCommand {
    struct GitCredential: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "git-credential",
            abstract: "A git credential helper backed by the vault (get, store, erase).",
            discussion: """
                Speaks git's credential protocol (git help credential) on stdin and stdout:

                  git config --global credential.helper '!vault git-credential'
                  git config --global credential.https://github.com.helper '!vault git-credential --service github'

                The entry's service is the request's host (with :port when there is one) and its \
                account is git's username. When git sends none, the service's 'default' entry is \
                used, else its only entry (so a URL without a user name works again after git \
                has prompted once and stored what was typed). --service and --account pin them, so \
                that the second line uses the entry `vault login github` made.

                get answers username, password (the access token) and password_expiry_utc, \
                refreshing the token first through its stored refresh description when it expires \
                within 60 s. With no entry it prints nothing and exits 0, so that git asks its next \
                helper. It never prompts, for a passphrase or anything else: a file vault needs \
                TOKEN_VAULT_KEY_FILE, TOKEN_VAULT_PASSPHRASE_FILE or a systemd credential. It \
                answers only https, and http on loopback: never http to another host, imap, smtp, \
                ftp or any other protocol (store and erase ignore those too).

                store saves the password with password_expiry_utc and oauth_refresh_token when git \
                sends them; an entry holding a refresh description (vault login) keeps its own token. \
                erase acts only if the entry still holds the password git sends: it removes a plain \
                entry, but of an entry holding a refresh description it only marks the access token \
                expired, keeping the refresh token, the description and the client secret, so the \
                next get refreshes. Other operations are ignored, as the protocol asks.

                When the server has rejected the entry's refresh token, get says so on stderr \
                (log in again) and answers the stale token without its expiry: the server refuses \
                it and git fails with its own "Authentication failed". erase keeps that entry, \
                with its refresh description, until a new login replaces it.

                With vault agent running, get asks it first, under vault get's rules: when the \
                agent of this user does not answer (none, dead, another version), the vault is \
                opened directly. When git sends no username, the agent also names the host's \
                accounts, so that its only entry is used as directly. A user served by another \
                user's agent (a system agent's --policy) cannot read that vault: get waits for \
                the agent within its bound, and its refusal, a locked agent or no answer is said \
                on stderr (git gets no credential); an entry it does not have is answered with \
                nothing.
                """
        )

        @OptionGroup var global: GlobalOptions

        @Option(help: ArgumentHelp("Use this service for every request instead of the host.", valueName: "name"))
        var service: String?

        @Option(help: ArgumentHelp("Use this account instead of git's username (or 'default').", valueName: "name"))
        var account: String?

        @Option(help: ArgumentHelp(
            "The username to answer when git sends none (default: the entry's account).", valueName: "name"))
        var username: String?

        @Argument(help: "get, store or erase (git passes it).")
        var operation: String

        func validate() throws {
            for (name, value) in [("--service", service), ("--account", account), ("--username", username)] {
                guard let value else { continue }
                do {
                    _ = try CredentialKey(service: value, account: value)
                } catch let error as VaultError {
                    throw ValidationError("\(name): \(error.message)")
                }
            }
        }

        func run() async throws {
            let request = try GitCredentialRequest(parsing: try Self.readRequest())
            let helper = GitCredentialHelper(
                service: service, account: account, username: username, client: try HTTPOptions.client())
            switch operation {
            case "get":
                guard try helper.key(for: request) != nil else { return }
                if !helper.mayAnswer(request) {
                    let scheme = CredentialKey.escaped(request.scheme ?? "(no protocol)")
                    let host = CredentialKey.escaped(request.host ?? "(no host)")
                    try Output.note(
                        "vault git-credential: not answering for \(scheme) to \(host): only https (and http on loopback) is answered; elsewhere the token would cross the network unencrypted.")
                    return
                }
                switch try agentAnswer(request, helper: helper) {
                case .answer(let response):
                    try Output.write(try response.formatted(), to: .standardOutput)
                    return
                case .nothing: return
                case .direct: break
                }
                guard let vault = try await openVault(creating: false) else { return }
                let response: GitCredentialResponse?
                do {
                    response = try await helper.get(request, from: vault)
                } catch let error as VaultError where error.code == .reauthenticationRequired {
                    // The refresh token was rejected: say so, then hand git the stale token, which
                    // the server refuses, so that git ends with its own "Authentication failed"
                    // rather than a prompt (or "terminal prompts disabled").
                    try Output.error(error.message)
                    response = try await helper.lastKnown(request, from: vault)
                }
                if let response {
                    try Output.write(try response.formatted(), to: .standardOutput)
                } else if case let accounts = try await helper.accounts(for: request, in: vault), accounts.count > 1,
                    let key = try helper.key(for: request)
                {
                    try Output.note(Self.severalAccounts(key.service, accounts))
                }
            case "store":
                guard try helper.key(for: request) != nil, request.password != nil else { return }
                guard let vault = try await openVault(creating: true) else { return }
                if try await helper.store(request, in: vault) == .keptManagedEntry,
                    let key = try await helper.entryKey(for: request, in: vault)
                {
                    try Output.note(
                        "vault git-credential: kept the token of \(key), which the vault refreshes itself; git's different password was not stored (vault delete \(key.service) \(key.account) to replace it).")
                }
            case "erase":
                guard try helper.key(for: request) != nil, request.password != nil else { return }
                guard let vault = try await openVault(creating: false) else { return }
                try await helper.erase(request, from: vault)
            default:
                // "If a helper receives any other operation, it should silently ignore the request."
                return
            }
        }

        /// What the agent made of a `get`.
        private enum AgentAnswer {
            /// Answer git with this.
            case answer(GitCredentialResponse)
            /// Answer git nothing and do not go direct: an agent of another user found no such
            /// entry (git asks its next helper, as after a direct `get` that finds none).
            case nothing
            /// Answer directly, as without an agent.
            case direct
        }

        /// The agent's answer to `get`, under the rules `vault get` follows.
        ///
        /// An agent of this user is a fast path: when it is absent, dead, of another version, busy
        /// or serves another vault, or its answer is anything but a token it keeps fresh, the
        /// direct path answers as it always has (a rejected refresh token's stale token; an entry
        /// that is not the only one of its service when git sends no username). An agent of
        /// another user (a system agent whose policy grants this one) is the only way in: this
        /// user cannot read that vault, so the client waits for it within its bound, and its
        /// failure (not granted, locked, no answer, no free connection) is thrown, for git's
        /// stderr and the exit code, and git gets no credential. Such a request names the entry
        /// exactly (git's username, or `--account`, or 'default'), or, with no username, the
        /// service's only entry among those granted.
        private func agentAnswer(_ request: GitCredentialRequest, helper: GitCredentialHelper) throws -> AgentAnswer {
            guard let key = try helper.key(for: request), let (client, vault) = AgentCLI.client(for: global) else { return .direct }
            return try agentAnswer(request, key: key, helper: helper, client: client, vault: vault, orOnlyEntry: helper.usesOnlyEntry(request))
        }

        /// The agent's answer for `key`; with `orOnlyEntry` (git sent no user name, no account is
        /// pinned), when there is no such entry, for the service's only one, as the direct path
        /// does: the agent names the service's accounts (`accounts`).
        private func agentAnswer(
            _ request: GitCredentialRequest, key: CredentialKey, helper: GitCredentialHelper, client: AgentClient, vault: String, orOnlyEntry: Bool
        ) throws -> AgentAnswer {
            let sentUsername = request.username.flatMap { $0.isEmpty ? nil : $0 }
            let (result, fromAnotherUser) = client.tokenOutcome(for: key, fresh: true, leeway: helper.leeway, vault: vault)
            let token: AgentToken
            switch result {
            case .success(let served): token = served
            case .failure(let unavailable as AgentClient.Unavailable):
                return try goingDirect(unavailable)
            case .failure(let error as VaultError) where orOnlyEntry && (error.code == .notFound || error.code == .permissionDenied):
                // No 'default' entry, or (another user's agent) none this user is granted.
                return try onlyEntryAnswer(
                    request, service: key.service, helper: helper, client: client, vault: vault, fromAnotherUser: fromAnotherUser, unanswered: error)
            case .failure(let error as VaultError) where fromAnotherUser:
                switch error.code {
                case .notFound: return .nothing
                case .invalidInput: throw VaultError(error.code, "\(error.message) git gets no credential for it.", underlying: error)
                default: throw error
                }
            case .failure:
                // The direct path gives the same answer in its own way.
                return .direct
            }
            if token.oauthToken.isExpired(at: Date(), leeway: 0) || !token.fresh {
                guard fromAnotherUser else { return .direct }
                // The agent could not refresh it (no client registration): as the direct path's
                // `expired`, and no stale password for git.
                if token.oauthToken.isExpired(at: Date(), leeway: 0) {
                    throw VaultError.staleToken(
                        token.oauthToken, for: key, leeway: 0, now: Date(),
                        advice: "; the agent cannot refresh it (the entry holds no client registration), so git gets no credential.")
                }
            }
            return .answer(
                GitCredentialResponse(
                    username: sentUsername ?? username ?? key.account, password: token.accessToken, passwordExpiry: token.expiry))
        }

        /// The answer for the only entry of `service`, which the agent names; nothing (with the
        /// accounts named on stderr) when it holds several. An agent that cannot say (built before
        /// `accounts`, serving another vault) sends this user direct, as before; another user's
        /// such agent leaves git with nothing, as its `default` entry's absence did. With no
        /// account at all, the agent's refusal of the 'default' entry (`unanswered`) stands.
        private func onlyEntryAnswer(
            _ request: GitCredentialRequest, service: String, helper: GitCredentialHelper, client: AgentClient, vault: String, fromAnotherUser: Bool,
            unanswered: VaultError
        ) throws -> AgentAnswer {
            let (listed, listedFromAnotherUser) = client.accountsOutcome(service: service, vault: vault)
            let accounts: [String]
            switch listed {
            case .success(let found): accounts = found
            case .failure(let unavailable as AgentClient.Unavailable):
                guard !(fromAnotherUser || listedFromAnotherUser) else {
                    if unanswered.code == .permissionDenied { throw unanswered }
                    return .nothing
                }
                return try goingDirect(unavailable)
            case .failure(let error):
                guard fromAnotherUser || listedFromAnotherUser else { return .direct }
                throw error
            }
            guard accounts.count == 1 else {
                if accounts.count > 1 { try Output.note(Self.severalAccounts(service, accounts)) }
                if accounts.isEmpty, unanswered.code == .permissionDenied { throw unanswered }
                return .nothing
            }
            let only = try CredentialKey(service: service, account: accounts[0])
            return try agentAnswer(request, key: only, helper: helper, client: client, vault: vault, orOnlyEntry: false)
        }

        /// The direct path, when the agent could not answer; the reason is said when it is worth
        /// a line (not "no agent runs").
        private func goingDirect(_ unavailable: AgentClient.Unavailable) throws -> AgentAnswer {
            if unavailable.isNoteworthy { try Output.note("vault: \(unavailable.reason); going direct.") }
            return .direct
        }

        /// Why git gets nothing when git sent no user name and the service has several entries.
        /// Account names are no secret; git shows this to the person running it.
        static func severalAccounts(_ service: String, _ accounts: [String]) -> String {
            "vault git-credential: \(service) has entries for \(accounts.count) accounts (\(accounts.joined(separator: ", "))) and git sent no username: put one in the URL (https://NAME@host/...) or pin it with --account."
        }

        /// The vault, opened without asking anything of anyone: no terminal passphrase prompt, no
        /// keyring unlock prompt. `nil` when the file backend would be used and has no file yet
        /// (and `creating` is false): nothing is stored, so there is nothing to answer or erase.
        private func openVault(creating: Bool) async throws -> Vault? {
            var configuration = try global.configuration()
            configuration.createIfMissing = creating
            configuration.secretService.unlockPrompt = false
            // The one backend plan every command uses; its warnings are not shown, since git
            // passes a helper's stderr on to the person running git.
            let plan = await BackendPlan.make(for: configuration)
            if plan.usesFile && !creating && !plan.fileExists {
                return nil
            }
            do {
                return try await Vault.open(configuration, plan: plan)
            } catch let error as VaultError where error.code == .notFound && !creating && plan.registeredBackend != nil {
                return nil  // a database that holds no vault yet
            }
        }

        /// Reads git's request from stdin: up to a blank line or the end of the input, at most
        /// `GitCredentialRequest.maximumLength` bytes (one more, so that the parser refuses it).
        static func readRequest() throws -> Data {
            let limit = GitCredentialRequest.maximumLength + 1
            var data = Data()
            var chunk = [UInt8](repeating: 0, count: 4096)
            while data.count < limit {
                let count: Int
                do {
                    count = try chunk.withUnsafeMutableBytes { raw in
                        try SystemCall.read(SystemCall.standardInput, into: UnsafeMutableRawBufferPointer(rebasing: raw[..<min(raw.count, limit - data.count)]))
                    }
                } catch {
                    throw VaultError(.io, "Could not read the credential request from standard input: \(Errno.message((error as? Errno)?.rawValue ?? Errno.ioError.rawValue)).")
                }
                if count == 0 { break }
                data.append(contentsOf: chunk[0..<count])
                // A blank line ends the request; an interactive caller need not press Ctrl-D.
                if data.first == UInt8(ascii: "\n") || data.firstRange(of: Array("\n\n".utf8)) != nil
                    || data.firstRange(of: Array("\n\r\n".utf8)) != nil
                {
                    break
                }
            }
            return data
        }
    }
}
#endif
