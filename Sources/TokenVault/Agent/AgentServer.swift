// Owns: the agent's I/O shell: the listening socket, one thread per connection (bounded), the
// peer check, and the refresh-ahead loop. What a request means is `answer(_:)`; the bytes are
// AgentProtocol's.
internal import FoundationEssentials
internal import Dispatch
internal import Synchronization
internal import TokenVaultSystem

/// The broker behind `vault agent`: holds one opened vault and answers ``AgentRequest``s on a
/// Unix socket.
///
/// - Every peer is checked with `SO_PEERCRED`: another uid is refused (and logged, by uid and pid)
///   unless ``Options/policy`` (a system agent's) names it or one of its groups; such a peer may
///   ask only for the access tokens of the entries granted to it (and the status of those).
///   ``reloadPolicy(from:)`` replaces the policy while the agent runs (`vault agent` does it on
///   SIGHUP); every request is judged by the policy in force when it arrives, on connections
///   opened before the reload too.
/// - At most ``Options/maximumConnections`` connections at once, and at most
///   ``Options/maximumConnectionsPerUser`` of them for one uid (``AgentConnectionSlots``); a
///   connection past either is answered `no-free-connection` (``AgentResponse/noFreeConnection``)
///   and closed at once: a client of the agent's own user goes direct, a granted one tries again
///   within its bound. Each request must arrive whole within
///   ``Options/requestDeadline`` of its first byte, so a slow or silent client holds only its own
///   thread, never another client's answer.
/// - It hands out access tokens, their type, expiry and scope; never a refresh token, a client
///   secret or a key (``AgentToken`` has no field for them).
/// - It keeps no copy of any token: every request is read from the vault through its store, which
///   notices another process's write (the file vault: inotify or a `stat` of the file on every
///   read; the Secret Service: a read over D-Bus). So a direct `vault set`, `delete` or `login` is
///   what the next request sees.
/// - It writes for its own uid (`store`, `delete`: `vault set`, `delete` and `login` with an agent
///   running) with the same library calls as the direct path, under the entry's refresh lock, and
///   plans the entry's refresh ahead from what it wrote at once. Another uid's write is refused:
///   a policy grants reads of access tokens only.
/// - It refreshes ahead: an entry with a client registration is refreshed once
///   ``Options/refreshAt`` of its lifetime has passed, through the vault's single flight (one
///   refresh across the agent and every other process), with backoff when the endpoint fails and
///   never again after the server rejected the refresh token.
package final class AgentServer: Sendable {
    package struct Options: Sendable {
        package var socketPath: String
        /// The fraction of a token's lifetime after which the agent refreshes it.
        package var refreshAt: Double = 0.75
        /// Forget the vault (and its key) after this long without a request; nil: never.
        package var idleLock: Duration?
        package var maximumConnections = 64
        /// At most this many of them for one uid; nil: ``AgentConnectionSlots/defaultPerUser(total:servesOthers:)``
        /// (all of them without a policy, a quarter with one).
        package var maximumConnectionsPerUser: Int?
        /// How long a request may take to arrive once its first byte has.
        package var requestDeadline: Duration = .seconds(2)
        /// How long a connection may sit idle between requests.
        package var connectionIdle: Duration = .seconds(60)
        /// The uid served in full (the agent's own).
        package var uid: UInt32 = SystemCall.effectiveUserID
        /// A system agent's grants to other users and groups; nil: only ``uid`` is served.
        package var policy: AgentPolicy?

        package init(socketPath: String) { self.socketPath = socketPath }
    }

    /// Opens the vault: with nil, from the configured key source (a key file, a passphrase file,
    /// a systemd credential, or none needed); with a passphrase from `vault unlock`.
    package typealias Opener = @Sendable (_ passphrase: SecretBytes?) async throws -> Vault

    private struct Plan: Sendable {
        var next: Date?
        var state: String
        var failures = 0
        var backoffUntil: Date?
        /// The token the plan was made for (its issue time): a new token resets the backoff.
        var issuedAt: Date
    }

    /// The last scan that read every entry. The store is held weakly: a vault locked and opened
    /// again is another store, never mistaken for the one scanned (and never kept open by this).
    private struct FullScan: Sendable {
        weak var store: (any ChangeStamping)?
        var stamp: [Int64]
        var at: Int64
    }

    private struct State: Sendable {
        var vault: Vault?
        var lastUse = SystemCall.monotonicMilliseconds
        var slots: AgentConnectionSlots
        /// The policy in force: ``Options/policy`` until ``reloadPolicy(from:)`` replaces it.
        var policy: AgentPolicy?
        var plans: [CredentialKey: Plan] = [:]
        /// The entries written through the agent while a scan of the refresh-ahead loop runs (nil:
        /// no scan runs): their plans are the writes', not the scan's older reading.
        var writtenDuringScan: Set<CredentialKey>?
        /// The store and its change stamp when the last scan that read every entry began, and
        /// when that was: while the stamp stays, a scan reads only the entries with a plan.
        var fullScan: FullScan?
        var stopping = false
        var listener: Int32 = -1
        /// The listener came from the service manager (socket activation).
        var activated = false
    }

    package let options: Options
    private let identity: String
    private let opener: Opener
    /// Whether the vault can be opened without `vault unlock` (after an idle lock, say).
    private let opensItself: Bool
    private let client: TokenEndpointClient
    private let log: @Sendable (String) -> Void
    private let state: Mutex<State>

    package init(
        options: Options, identity: String, opensItself: Bool, client: TokenEndpointClient = TokenEndpointClient(),
        log: @escaping @Sendable (String) -> Void, opener: @escaping Opener
    ) {
        self.options = options
        self.identity = identity
        self.opensItself = opensItself
        self.client = client
        self.log = log
        self.opener = opener
        let perUser =
            options.maximumConnectionsPerUser
            ?? AgentConnectionSlots.defaultPerUser(total: options.maximumConnections, servesOthers: options.policy != nil)
        state = Mutex(
            State(slots: AgentConnectionSlots(total: max(1, options.maximumConnections), perUser: max(1, perUser)), policy: options.policy))
    }

    /// The policy in force (nil: only the agent's own uid is served).
    package var policy: AgentPolicy? { state.withLock { $0.policy } }

    /// Reads the policy file at `path` again and puts it in force, for requests that arrive from
    /// now on; a file that cannot be read or parsed, or is unsafe (as ``AgentPolicy/load(path:)``
    /// checks at start), leaves the policy in force as it was. Either way the log says what
    /// happened and why (names and line numbers, never a token).
    /// - Returns: whether the new policy is in force.
    @discardableResult
    package func reloadPolicy(from path: String) -> Bool {
        let loaded: AgentPolicy
        do {
            loaded = try AgentPolicy.load(path: path)
        } catch {
            let kept = state.withLock { $0.policy?.grants.count ?? 0 }
            let reason = (error as? VaultError)?.message ?? "\(type(of: error))"
            log("vault agent: kept the policy in force (\(kept) grants); the new policy was refused: \(reason)")
            return false
        }
        state.withLock { $0.policy = loaded }
        log("vault agent: reloaded the policy \(path): \(loaded.grants.count) grants in force")
        return true
    }

    /// Whether a vault is open (unlocked).
    package var isUnlocked: Bool { state.withLock { $0.vault != nil } }

    /// Opens the vault now when it needs no passphrase from `vault unlock`.
    package func unlockAtStart() async throws {
        guard opensItself else { return }
        let vault = try await opener(nil)
        state.withLock { $0.vault = vault }
    }

    // MARK: The socket

    /// Makes the socket's directory (0700, ours) if it is the default one, takes over a stale
    /// socket, and listens: 0600, or 0666 with a policy (which is then the gate: a peer it does
    /// not name is refused before any byte of its request is read).
    /// - Throws: ``VaultError`` when another agent answers there, or the directory is not private.
    package func listen() throws {
        let path = options.socketPath
        let directory = PathText.deletingLastComponent(path)
        do {
            _ = try SystemCall.makeDirectory(directory, mode: 0o700)
            guard let status = try SystemCall.lstat(directory), status.isDirectory else {
                throw VaultError(.permissionDenied, "The agent's socket directory \(directory) is not a directory.")
            }
            // The default directory is private (0700); one named by TOKEN_VAULT_AGENT_SOCKET (a
            // system agent's) may let others through to the socket, never write in it.
            let isDefault = path.hasSuffix("/tokenvault/agent.sock")
            guard status.isOwnedByCaller, status.permissionBits & (isDefault ? 0o077 : 0o022) == 0 else {
                throw VaultError(
                    .insecurePermissions,
                    "The agent's socket directory \(directory) must belong to you and be private (0700); it is \(String(status.permissionBits, radix: 8)).")
            }
            if (try? SystemCall.connectUnix(path)).map({ SystemCall.closeAfterUse($0); return true }) == true {
                throw VaultError(.alreadyExists, "An agent already listens on \(path).")
            }
            try SystemCall.unlinkIfPresent(path)
            let fd = try SystemCall.listenUnix(path, mode: options.policy == nil ? 0o600 : 0o666, backlog: 128)
            state.withLock { $0.listener = fd }
        } catch let error as Errno {
            throw VaultError(.io, "Could not listen on \(path): \(error.message).")
        }
    }

    /// Serves on a listening socket the service manager opened (systemd socket activation:
    /// `LISTEN_FDS=1` and `LISTEN_PID` this process, the socket on descriptor 3). The socket and
    /// its permissions are the unit's; it is not removed when the agent stops.
    /// - Returns: false when the environment hands over no socket.
    package func adoptActivatedSocket(environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        guard environment["LISTEN_FDS"] == "1", environment["LISTEN_PID"] == String(SystemCall.processID) else { return false }
        let fd: Int32 = 3
        SystemCall.setCloseOnExec(fd)
        SystemCall.setNonBlocking(fd, true)
        state.withLock {
            $0.listener = fd
            $0.activated = true
        }
        return true
    }

    /// Serves until ``stop()``: the accept loop on a thread of its own, the refresh-ahead loop here.
    package func serve() async {
        let listener = state.withLock { $0.listener }
        precondition(listener >= 0, "listen() first")
        guard SystemCall.startThread(name: "agent-accept", { [self] in acceptLoop(listener) }) else {
            log("vault agent: could not start a thread to accept connections; stopping")
            stop()
            return
        }
        await refreshLoop()
    }

    /// Stops accepting and ends ``serve()``; removes the socket.
    package func stop() {
        let ownSocket = state.withLock { state -> Bool in
            state.stopping = true
            state.vault = nil
            return state.listener >= 0 && !state.activated
        }
        if ownSocket { _ = try? SystemCall.unlinkIfPresent(options.socketPath) }
    }

    private var stopping: Bool { state.withLock { $0.stopping } }

    private func acceptLoop(_ listener: Int32) {
        while !stopping {
            let ready: Bool
            do { ready = try SystemCall.wait(listener, milliseconds: 200) } catch {
                log("vault agent: poll on the socket failed: \(error.message)")
                return
            }
            guard ready else { continue }
            let fd: Int32?
            do { fd = try SystemCall.accept(listener) } catch {
                // EMFILE and the like: the client goes direct; try again shortly.
                log("vault agent: could not accept a connection: \(error.message)")
                SystemCall.sleep(seconds: 0.05)
                continue
            }
            guard let fd else { continue }
            if admit(fd, listener: listener) { return }  // a new thread accepts now
        }
        SystemCall.closeAfterUse(listener)
    }

    /// Serves the connection `fd` or refuses it. A connection it serves is served on this
    /// thread, after a new thread has taken over the accept loop on `listener` (true): the
    /// connection's first answer then waits for no thread to start, only the next connection
    /// does (a cold `vault get` makes one connection). One thread accepts at any time. When no
    /// thread can be started, this one serves the connection and then goes on accepting (false).
    private func admit(_ fd: Int32, listener: Int32) -> Bool {
        let peer: SystemCall.PeerCredentials
        do { peer = try SystemCall.peerCredentials(fd) } catch {
            log("vault agent: refused a connection whose peer cannot be identified: \(error.message)")
            SystemCall.closeAfterUse(fd)
            return false
        }
        // nil: the agent's own user, served in full; else the peer's groups, by which the
        // policy in force grants it entries (judged again at each request: a reload counts).
        var groups: [UInt32]?
        if peer.uid != options.uid {
            let policy = self.policy
            let found = policy.map { policy in
                let peerGroups = (try? SystemCall.peerGroups(fd)) ?? []
                groups = peerGroups
                return policy.grants(uid: peer.uid, gid: peer.gid, groups: peerGroups)
            }
            guard let found, !found.isEmpty else {
                refuseConnection(fd, peer: peer, policy: policy)
                return false
            }
        }
        let admission = state.withLock { $0.slots.admit(uid: peer.uid) }
        guard admission == .admitted else {
            // Answered at once, on this thread (one small frame, which the socket's buffer
            // takes), and closed: the client tells "no slot now" from "the agent died". The
            // agent's own user goes direct; a granted user, who has no direct path, tries again
            // within its bound.
            let slots = state.withLock { $0.slots }
            let message: String
            switch admission {
            case .userFull:
                log("vault agent: uid \(peer.uid) has \(slots.perUser) connections open, its share; closed a new one from pid \(peer.pid)")
                message =
                    "uid \(peer.uid) has \(slots.perUser) connections open to this agent, its share (--max-connections-per-user); this one was closed."
            default:
                log("vault agent: \(slots.total) connections are open; closed a new one from uid \(peer.uid) (pid \(peer.pid))")
                message = "All \(slots.total) connections of this agent are open (--max-connections); this one was closed."
            }
            let refusal = AgentResponse.failure(code: AgentResponse.noFreeConnection, message: message)
            try? FrameIO.write(fd, refusal.encoded(), deadlineMilliseconds: 100)
            SystemCall.closeAfterUse(fd)
            return false
        }
        // Without a new thread to take over accepting, this one serves the connection and then
        // goes back to accepting.
        let handedOver = SystemCall.startThread(name: "agent-accept", stackSize: 256 * 1024) { [self] in acceptLoop(listener) }
        serveConnection(fd, peer: peer, groups: groups)
        SystemCall.closeAfterUse(fd)
        state.withLock { $0.slots.release(uid: peer.uid) }
        return handedOver
    }

    /// Answers a peer the policy in force does not name (or any other uid, without a policy) with
    /// a refusal, logged, and closes its connection.
    private func refuseConnection(_ fd: Int32, peer: SystemCall.PeerCredentials, policy: AgentPolicy?) {
        let reason = policy == nil ? "this agent serves uid \(options.uid) only" : "the agent's policy names neither it nor its groups"
        log("vault agent: refused a connection from uid \(peer.uid) gid \(peer.gid) (pid \(peer.pid)): \(reason)")
        let refusal = AgentResponse.failure(
            code: VaultError.Code.permissionDenied.description,
            message: policy == nil
                ? "This agent serves uid \(options.uid) only; uid \(peer.uid) is refused."
                : "The agent's policy grants uid \(peer.uid) nothing; uid \(peer.uid) is refused.")
        try? FrameIO.write(fd, refusal.encoded(), deadlineMilliseconds: 100)
        SystemCall.closeAfterUse(fd)
    }

    private static func milliseconds(_ duration: Duration) -> Int32 {
        Int32(clamping: duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)
    }

    private func serveConnection(_ fd: Int32, peer: SystemCall.PeerCredentials, groups: [UInt32]?) {
        while !stopping {
            var body: [UInt8]
            do {
                body = try FrameIO.readBody(
                    fd, idleMilliseconds: Self.milliseconds(options.connectionIdle),
                    deadlineMilliseconds: Self.milliseconds(options.requestDeadline))
            } catch {
                switch error {
                case .closed, .system: return
                case .timedOut:
                    return  // a silent or slow client: only its connection is closed
                case .malformed(let reason):
                    refuse(fd, .invalidInput, "The request is not a frame: \(reason).")
                    return
                }
            }
            let request: AgentRequest
            do {
                request = try AgentRequest(body: body)
            } catch {
                if let version = error.peerVersion {
                    refuse(fd, .unsupportedVersion, "This agent speaks protocol version \(AgentProtocol.version), not \(version).")
                } else if error.isUnknownKind {
                    // A later client's request: it goes direct, as with an agent of another version.
                    log("vault agent: refused a request of a kind this agent does not know (\(error.reason))")
                    let refusal = AgentResponse.failure(
                        code: AgentResponse.unsupportedRequest,
                        message: "This agent does not know that request (\(error.reason)); the client goes direct.")
                    try? FrameIO.write(fd, refusal.encoded(), deadlineMilliseconds: 200)
                } else {
                    refuse(fd, .invalidInput, "The request is malformed: \(error.reason).")
                }
                return
            }
            // The passphrase of an unlock request is in `body` too: wipe it.
            body.wipe()
            let response: AgentResponse
            if let groups {
                // The policy in force now: one reloaded since the connection opened counts.
                let grants = policy?.grants(uid: peer.uid, gid: peer.gid, groups: groups) ?? []
                response = answerGranted(request, peer: peer, grants: grants)
            } else {
                response = answerBlocking(request)
            }
            do {
                try FrameIO.write(fd, response.encoded(), deadlineMilliseconds: Self.milliseconds(options.requestDeadline))
            } catch {
                return
            }
        }
    }

    private func refuse(_ fd: Int32, _ code: VaultError.Code, _ message: String) {
        log("vault agent: refused a request: \(message)")
        try? FrameIO.write(fd, AgentResponse.failure(code: code.description, message: message).encoded(), deadlineMilliseconds: 200)
    }

    /// What a peer of another uid, which the policy grants `grants`, is answered: the access token
    /// of a granted entry, the status of the granted entries, and a refusal (logged, by uid, pid
    /// and entry name, never a token) for everything else. The switch is exhaustive on purpose:
    /// a new request kind does not compile until it says here what another uid may do with it.
    private func answerGranted(_ request: AgentRequest, peer: SystemCall.PeerCredentials, grants: [AgentPolicy.Grant]) -> AgentResponse {
        func refusal(_ what: String) -> AgentResponse {
            log("vault agent: refused uid \(peer.uid) (pid \(peer.pid)) \(what): the agent's policy does not grant it")
            return .failure(
                code: VaultError.Code.permissionDenied.description,
                message: "The agent's policy does not let uid \(peer.uid) \(what).")
        }
        switch request {
        case .token(var token):
            guard let key = try? token.key(), grants.allow(key) else {
                return refusal("read \((try? token.key()).map { "\($0)" } ?? "that entry")")
            }
            // It cannot open the agent's vault itself, so which vault its own configuration
            // names says nothing: it asks for this agent's.
            token.vault = identity
            return answerBlocking(.token(token))
        case .proof(var proof):
            // A proof is as much as the token it goes with: granted with the entry, signed here,
            // so the peer gets what it may already read and never the key.
            guard let key = try? proof.token.key(), grants.allow(key) else {
                return refusal("have a proof for \((try? proof.token.key()).map { "\($0)" } ?? "that entry")")
            }
            proof.token.vault = identity
            return answerBlocking(.proof(proof))
        case .status:
            // Its granted entries' plans only, and no count of the vault's entries: the plans are
            // the agent's own state, so the vault is not read for it.
            var status = status()
            status.entries.removeAll { entry in
                (try? CredentialKey(service: entry.service, account: entry.account)).map { !grants.allow($0) } ?? true
            }
            return .status(status)
        case .store(let store):
            return refusedWrite("store", (try? store.key()).map { "\($0)" }, peer: peer)
        case .delete(let delete):
            return refusedWrite("delete", (try? delete.key()).map { "\($0)" }, peer: peer)
        case .accounts(var accounts):
            // The granted accounts of the service only; none at all is an empty answer, as for a
            // service with no entries (the peer learns no more than a token request tells it).
            accounts.vault = identity
            let answered = answerBlocking(.accounts(accounts))
            guard case .accounts(var answer) = answered else { return answered }
            answer.accounts.removeAll { account in
                (try? CredentialKey(service: accounts.service, account: account)).map { !grants.allow($0) } ?? true
            }
            return .accounts(answer)
        case .list(var list):
            // The granted entries only: the peer learns of no entry it could not ask a token for.
            // A page left empty is not sent while more follow; the next one is read instead.
            list.vault = identity
            while true {
                let answered = answerBlocking(.list(list))
                guard case .listing(let listing) = answered else { return answered }
                let granted = listing.entries.filter { entry in
                    (try? CredentialKey(service: entry.service, account: entry.account)).map(grants.allow) ?? false
                }
                guard granted.isEmpty, listing.more, let last = listing.entries.last else {
                    return .listing(AgentListing(entries: granted, more: listing.more))
                }
                (list.afterService, list.afterAccount) = (last.service, last.account)
            }
        case .unlock:
            return refusal("unlock the agent")
        case .lock:
            return refusal("lock the agent")
        }
    }

    /// One page of `list`: the entries after the request's, as many as fit ``AgentListing/pageBytes``
    /// (at least one, which always fits a frame: names of at most 1,024 bytes each).
    private func page(_ request: AgentListRequest, of vault: Vault) async throws -> AgentListing {
        var after = request.after
        var entries: [AgentListing.Entry] = []
        var bytes = 0
        while true {
            // Read in small batches: an entry's size is known only once it is read.
            let (batch, resumeAfter) = try await vault.listing(service: request.service, after: after, limit: 64)
            for listed in batch {
                let entry = AgentListing.Entry(listed)
                let size = AgentProtocol.json(entry).count + 1
                if !entries.isEmpty, bytes + size > AgentListing.pageBytes { return AgentListing(entries: entries, more: true) }
                entries.append(entry)
                bytes += size
            }
            guard let resumeAfter else { return AgentListing(entries: entries, more: false) }
            after = resumeAfter
        }
    }

    /// A write from another uid: a policy grants reads of access tokens only, so the vault is
    /// written by the agent's own user alone. Logged by uid, pid and entry name, never a token.
    private func refusedWrite(_ verb: String, _ entry: String?, peer: SystemCall.PeerCredentials) -> AgentResponse {
        let what = entry ?? "that entry"
        log("vault agent: refused uid \(peer.uid) (pid \(peer.pid)) a write (\(verb) \(what)): only uid \(options.uid) writes through this agent")
        return .failure(
            code: VaultError.Code.permissionDenied.description,
            message:
                "The agent does not let uid \(peer.uid) \(verb) \(what): its policy grants other users the access tokens of some entries, never writes; only uid \(options.uid), the vault's owner, writes to this vault.")
    }

    /// Runs ``answer(_:)`` from a connection's thread, which waits for it (the cooperative pool's
    /// threads are never blocked by a socket).
    private func answerBlocking(_ request: AgentRequest) -> AgentResponse {
        let box = Mutex<AgentResponse?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let response = await self.answer(request)
            box.withLock { $0 = response }
            done.signal()
        }
        done.wait()
        return box.withLock { $0 } ?? .failure(code: VaultError.Code.io.description, message: "The agent lost its answer.")
    }

    // MARK: Answers

    /// What the agent answers `request`.
    package func answer(_ request: AgentRequest) async -> AgentResponse {
        do {
            switch request {
            case .token(let request):
                return try await withVault(named: request.vault) { vault in .token(try await serve(request, from: vault).token) }
            case .proof(let request):
                // The token as a token request gets it, and a proof signed here: the key stays in the agent.
                // The key comes from the same read of the entry as the token: one read per proof.
                return try await withVault(named: request.token.vault) { vault in
                    let (token, dpopKey) = try await serve(request.token, from: vault, withDPoPKey: true)
                    guard token.tokenType.equalsIgnoringCase("DPoP"), let url = URL(string: request.url) else {
                        return .authorization(AgentAuthorization(token: token, dpopProof: nil))
                    }
                    let proof = try Vault.dpopProof(
                        signedBy: dpopKey, of: try request.token.key(), method: request.method, url: url, accessToken: token.accessToken,
                        nonce: request.nonce)
                    return .authorization(AgentAuthorization(token: token, dpopProof: proof))
                }
            case .store(let request):
                return try await withVault(named: request.vault) { vault in .written(try await store(request, in: vault)) }
            case .delete(let request):
                return try await withVault(named: request.vault) { vault in .written(try await delete(request, in: vault)) }
            case .accounts(let request):
                return try await withVault(named: request.vault) { vault in
                    let answer = AgentAccounts(accounts: try await vault.keys(service: request.service).map(\.account))
                    // Within one frame, or the client lists them itself.
                    guard AgentResponse.accounts(answer).encoded().count <= AgentProtocol.headerLength + AgentProtocol.maximumBodyLength else {
                        return .failure(
                            code: VaultError.Code.invalidInput.description,
                            message: "The accounts of that service are more than one answer holds.")
                    }
                    return .accounts(answer)
                }
            case .list(let request):
                return try await withVault(named: request.vault) { vault in .listing(try await page(request, of: vault)) }
            case .status:
                var status = status()
                // Counted from the vault now, so that a write a moment ago is counted.
                if let vault = state.withLock({ $0.vault }) { status.count = try? await vault.keys().count }
                return .status(status)
            case .unlock(let passphrase):
                if state.withLock({ $0.vault != nil }) { return .done }
                let vault = try await opener(passphrase)
                state.withLock {
                    $0.vault = vault
                    $0.lastUse = SystemCall.monotonicMilliseconds
                }
                log("vault agent: unlocked")
                return .done
            case .lock:
                state.withLock {
                    $0.vault = nil
                    $0.plans = [:]
                }
                log("vault agent: locked (vault lock)")
                return .done
            }
        } catch let error as VaultError {
            return .failure(code: error.code.description, message: error.message)
        } catch {
            return .failure(code: VaultError.Code.io.description, message: "The agent could not answer: \(type(of: error)).")
        }
    }

    /// Answers a request that names the vault `requested` with `body`, after what every such
    /// request goes through: it must name this agent's vault (else `not-this-vault`: the client
    /// goes direct), it counts as use for the idle lock, and the vault must be open, or open
    /// without a passphrase (else `locked`).
    private func withVault(named requested: String, _ body: (Vault) async throws -> AgentResponse) async throws -> AgentResponse {
        guard requested == identity else {
            return .failure(code: AgentResponse.notThisVault, message: "This agent serves \(identity), not \(requested).")
        }
        state.withLock { $0.lastUse = SystemCall.monotonicMilliseconds }
        guard let vault = try await openVault() else {
            return .failure(code: VaultError.Code.locked.description, message: "The agent's vault is locked; vault unlock unlocks it.")
        }
        return try await body(vault)
    }

    private func openVault() async throws -> Vault? {
        if let vault = state.withLock({ $0.vault }) { return vault }
        guard opensItself, !stopping else { return nil }
        let vault = try await opener(nil)
        state.withLock { if $0.vault == nil { $0.vault = vault } }
        return vault
    }

    /// How long before expiry the agent refreshes a token: the part of its lifetime after
    /// ``Options/refreshAt``; nil when its lifetime is unknown.
    private func aheadMargin(_ token: OAuthToken) -> TimeInterval? {
        guard let expiresAt = token.expiresAt else { return nil }
        let lifetime = expiresAt.timeIntervalSince(token.issuedAt)
        guard lifetime > 0 else { return nil }
        return lifetime * (1 - options.refreshAt)
    }

    /// The token a token request gets, read once from the vault (and refreshed first when it must be).
    /// With `withDPoPKey`, also the DPoP key stored with a DPoP token, from the same read of the
    /// entry (a refresh keeps the key: the grant is bound to it).
    private func serve(
        _ request: AgentTokenRequest, from vault: Vault, withDPoPKey: Bool = false
    ) async throws -> (token: AgentToken, dpopKey: DPoPKey?) {
        let key = try request.key()
        guard request.fresh else {
            if withDPoPKey {
                guard let read = try await vault.tokenAndDPoPKey(for: key) else { throw Self.notStored(key) }
                return (AgentToken(read.token, fresh: false), read.dpopKey)
            }
            guard let token = try await vault.token(for: key) else { throw Self.notStored(key) }
            return (AgentToken(token, fresh: false), nil)
        }
        guard let stored = try await vault.storedEntry(for: key) else { throw Self.notStored(key) }
        let entry = try TokenEntry(stored)
        let dpopKey = withDPoPKey ? stored.dpop : nil
        guard entry.registration != nil, entry.rejection == nil else {
            // As vault get --fresh: a rejected entry throws; one the vault cannot refresh is served as stored.
            do {
                return (AgentToken(try await vault.freshToken(for: key, leeway: request.leeway, client: client), fresh: true), dpopKey)
            } catch let error as VaultError where error.code == .expired {
                return (AgentToken(entry.token, fresh: false), dpopKey)
            }
        }
        // Refreshed ahead: the agent keeps it fresh, so a token inside its ahead margin is
        // served as it is, and only one the loop should have refreshed long ago is refreshed
        // here. Half the margin: at the moment the loop is due, a client asking would otherwise
        // find the token stale too, and wait on the endpoint (its own refresh, or the loop's, by
        // the single flight); now the loop has half the margin to get there first.
        let leeway = min(request.leeway, aheadMargin(entry.token).map { $0 / 2 } ?? request.leeway)
        if !entry.token.isExpired(at: Date(), leeway: leeway) {
            return (AgentToken(entry.token, fresh: true), dpopKey)
        }
        return (AgentToken(try await vault.freshToken(for: key, leeway: leeway, client: client), fresh: true), dpopKey)
    }

    // MARK: Writes

    /// Writes the entry as the direct path would (the same library call, the same bytes), under
    /// the entry's refresh lock: a refresh of it in flight (the agent's refresh ahead, or another
    /// process's) finishes first, so its answer cannot land on top of the new token. The schedule
    /// is then made from what is stored, at once.
    private func store(_ request: AgentStoreRequest, in vault: Vault) async throws -> AgentWriteResult {
        let key = try request.key()
        let entry = try request.storedEntry()
        try await vault.withEntryLock(key, timeout: .seconds(30)) {
            switch request.registration {
            case .keep: try await vault.saveTokenKeepingRegistration(entry.token, for: key)
            case .replace: try await vault.store.save(request.storedForm, for: key, contentType: .json)
            }
            // Inside the lock: no refresh of the entry can come between the write and the schedule.
            schedule(key, entry: try await vault.tokenEntry(for: key))
        }
        return AgentWriteResult(backend: "\(vault.selection.backend)", existed: nil)
    }

    /// Removes the entry as `vault delete` does directly (``Vault/delete(_:)``, which
    /// waits for a refresh of it in flight, so that the refresh cannot write it back), and drops
    /// its schedule.
    private func delete(_ request: AgentDeleteRequest, in vault: Vault) async throws -> AgentWriteResult {
        let key = try request.key()
        let existed = try await vault.delete(key)
        schedule(key, entry: nil)
        return AgentWriteResult(backend: "\(vault.selection.backend)", existed: existed)
    }

    /// Makes the refresh-ahead plan of `key` from `entry` (nil: gone), now, so that the status and
    /// the loop see a write at once; a scan in progress keeps this plan rather than the one it
    /// made from what it read before the write.
    private func schedule(_ key: CredentialKey, entry: TokenEntry?) {
        let plan = entry.flatMap { entry -> Plan? in
            if entry.rejection != nil { return Plan(next: nil, state: "rejected", issuedAt: entry.token.issuedAt) }
            guard entry.registration != nil else { return nil }
            guard entry.token.refreshToken != nil else { return Plan(next: nil, state: "not-refreshable", issuedAt: entry.token.issuedAt) }
            guard let due = aheadDue(entry.token) else { return nil }
            return Plan(next: max(due, Date()), state: "scheduled", issuedAt: entry.token.issuedAt)
        }
        state.withLock {
            guard $0.vault != nil else { return }
            $0.plans[key] = plan
            $0.writtenDuringScan?.insert(key)
        }
    }

    /// The words `vault get` uses for a missing entry, so that both paths say the same.
    private static func notStored(_ key: CredentialKey) -> VaultError {
        VaultError(.notFound, "No token is stored for \(key).")
    }

    private func status() -> AgentStatus {
        state.withLock { state in
            AgentStatus(
                pid: SystemCall.processID, unlocked: state.vault != nil, vault: identity, refreshAt: options.refreshAt,
                entries: state.plans.sorted { $0.key < $1.key }.map { key, plan in
                    AgentStatus.Entry(
                        service: key.service, account: key.account, nextRefresh: plan.next?.timeIntervalSince1970, state: plan.state)
                })
        }
    }

    // MARK: Refresh ahead

    /// How often the loop looks for new entries when no refresh is due sooner.
    private static let scanInterval: TimeInterval = 2

    private func refreshLoop() async {
        while !stopping {
            var wake = Date().addingTimeInterval(Self.scanInterval)
            if let idle = options.idleLock, state.withLock({ $0.vault != nil }),
                SystemCall.monotonicMilliseconds - state.withLock({ $0.lastUse }) > Int64(Self.milliseconds(idle))
            {
                state.withLock {
                    $0.vault = nil
                    $0.plans = [:]
                }
                log("vault agent: locked after \(idle) without a request")
            }
            if let vault = state.withLock({ $0.vault }) {
                if let due = await refreshDue(in: vault) { wake = min(wake, due) }
            }
            let delay = max(0.02, wake.timeIntervalSinceNow)
            do { try await Task.sleep(for: .milliseconds(Int(delay * 1000))) } catch { return }
        }
    }

    /// A scan reads every entry at least this often, whatever the store's change stamp says.
    private static let fullScanMilliseconds: Int64 = 300_000

    /// Refreshes every entry that is due, and returns when the next one will be.
    ///
    /// A scan reads every entry: to find entries that another process wrote, changed or removed
    /// directly. With a store that has a change stamp (the encrypted file) and no write since the
    /// last such scan, only the entries with a plan are read again: an idle agent over 10,000
    /// plain tokens then reads none every 2 s (it had read and decoded them all, 2.9 % of a CPU).
    private func refreshDue(in vault: Vault) async -> Date? {
        state.withLock { $0.writtenDuringScan = [] }
        defer { state.withLock { $0.writtenDuringScan = nil } }
        let stamping = vault.store as? any ChangeStamping
        // Taken before anything is read: a write during the scan moves it, and the next scan reads all.
        let stamp = stamping?.changeStamp()
        let now = SystemCall.monotonicMilliseconds
        let (known, unchanged) = state.withLock { state in
            guard let stamping, let stamp, let last = state.fullScan, last.store === stamping, last.stamp == stamp,
                now - last.at < Self.fullScanMilliseconds
            else { return (state.plans, false) }
            return (state.plans, true)
        }
        let keys: [CredentialKey]
        if unchanged {
            keys = known.keys.sorted()
        } else {
            do { keys = try await vault.keys() } catch {
                log("vault agent: could not list the vault's entries: \((error as? VaultError)?.message ?? "\(type(of: error))")")
                return nil
            }
        }
        var next: Date?
        var plans: [CredentialKey: Plan] = [:]
        for key in keys {
            let entry: TokenEntry?
            do { entry = try await vault.tokenEntry(for: key) } catch let error as VaultError where error.code == .invalidInput {
                continue  // an opaque secret
            } catch {
                log("vault agent: could not read \(key): \((error as? VaultError)?.message ?? "\(type(of: error))")")
                continue
            }
            guard let entry else { continue }
            var plan = known[key].flatMap { $0.issuedAt == entry.token.issuedAt ? $0 : nil }
                ?? Plan(next: nil, state: "scheduled", issuedAt: entry.token.issuedAt)
            guard entry.registration != nil, entry.token.refreshToken != nil, entry.rejection == nil,
                let expiresAt = entry.token.expiresAt, let margin = aheadMargin(entry.token)
            else {
                // Only what the agent refreshes, or would and cannot, has a plan (and a line in
                // the status): a vault of 10,000 plain tokens costs the loop no memory.
                if entry.rejection != nil || (entry.registration != nil && entry.token.refreshToken == nil) {
                    plan.next = nil
                    plan.state = entry.rejection != nil ? "rejected" : "not-refreshable"
                    plans[key] = plan
                }
                continue
            }
            let due = max(expiresAt.addingTimeInterval(-margin), plan.backoffUntil ?? .distantPast)
            if due <= Date() {
                do {
                    let token = try await vault.freshToken(for: key, leeway: margin + 1, client: client)
                    plan = Plan(next: aheadDue(token), state: "scheduled", issuedAt: token.issuedAt)
                } catch let error as VaultError where error.code == .reauthenticationRequired {
                    plan.next = nil
                    plan.state = "rejected"
                    log("vault agent: the server rejected the refresh token of \(key); it is not presented again (log in again)")
                } catch {
                    plan.failures += 1
                    let wait = min(300, Double(1 << min(plan.failures, 9)))
                    plan.backoffUntil = Date().addingTimeInterval(wait)
                    plan.next = plan.backoffUntil
                    plan.state = "backing-off"
                    log("vault agent: refreshing \(key) failed (\((error as? VaultError)?.message ?? "\(type(of: error))")); next try in \(Int(wait)) s")
                }
            } else {
                plan.next = due
            }
            plans[key] = plan
            if let due = plan.next { next = min(next ?? due, due) }
        }
        state.withLock { state in
            guard state.vault != nil else { return }
            // A write through the agent during the scan made its own plan from what it stored.
            for key in state.writtenDuringScan ?? [] {
                plans[key] = state.plans[key]
                if let due = plans[key]?.next { next = min(next ?? due, due) }
            }
            state.plans = plans
            if !unchanged { state.fullScan = stamp.map { FullScan(store: stamping, stamp: $0, at: now) } }
        }
        // The scan decoded every entry and freed it all again: give the heap back.
        if !unchanged { SystemCall.trimMalloc() }
        return next
    }

    private func aheadDue(_ token: OAuthToken) -> Date? {
        guard let expiresAt = token.expiresAt, let margin = aheadMargin(token) else { return nil }
        return expiresAt.addingTimeInterval(-margin)
    }
}

extension AgentToken {
    init(_ token: OAuthToken, fresh: Bool) {
        self.init(accessToken: token.accessToken, tokenType: token.tokenType, expiresAt: token.expiresAt, scope: token.scope, fresh: fresh)
    }
}
