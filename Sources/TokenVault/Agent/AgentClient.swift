// Owns: asking a running `vault agent` over its socket, within a short deadline, and telling
// "the agent answered" apart from "go direct".
public import FoundationEssentials
internal import Synchronization
internal import TokenVaultSystem

/// A client of `vault agent`: asks the agent for an access token over its Unix socket.
///
/// The agent is a fast path, never a single point of failure: every call either returns the
/// agent's answer, throws the agent's ``VaultError`` for an answer that the direct path would
/// give too (no such entry, expired, log in again), or throws ``Unavailable``, which means "open
/// the vault yourself, as if no agent ran". No agent, a killed or hung agent, an agent of another
/// protocol version, an agent serving another vault or a locked one are all ``Unavailable``, and
/// none of them takes longer than ``deadline`` (a request that may refresh waits on while the
/// agent works). An agent of another user (a system agent whose policy serves this one) is the
/// exception: this user has no direct path, so the client waits for its answer within the
/// request's bound (``readDeadline``, ``refreshDeadline``), and its silence or refusal is a
/// ``VaultError`` that says why (``Unavailable/isFinal``).
///
/// ```swift
/// let configuration = try VaultConfiguration.fromEnvironment()
/// let token: OAuthToken
/// if let agent = AgentClient.fromEnvironment(),
///    let answer = try? agent.token(for: key, fresh: true, vault: AgentProtocol.vaultIdentity(of: configuration)) {
///     token = answer.oauthToken          // the access token only; no refresh token
/// } else {
///     token = try await Vault.open(configuration).freshToken(for: key)
/// }
/// ```
/// (`try?` there also hides the agent's definitive answers; catch ``Unavailable`` alone to keep them.)
public struct AgentClient: Sendable {
    /// The agent's socket.
    public let socketPath: String
    /// How long a request may take in all, connecting included.
    public var deadline: Duration
    /// How long a request that may make the agent refresh first (a `fresh` token, a DPoP proof)
    /// may take while the agent is still at work: the token endpoint's whole deadline and a
    /// margin. A token endpoint that answers in 0.6 s must not send every caller of an expired
    /// token around the agent (a user whom a system agent's policy serves cannot go direct at
    /// all). Past ``deadline`` the client waits on only while the agent's process runs or sleeps;
    /// a stopped agent sends it direct at ``deadline``, and one that dies closes the connection.
    /// (The process is the socket's peer as the kernel recorded it: with socket activation that is
    /// the one that listened, systemd, so there a stopped agent holds such a request to this bound.)
    public var refreshDeadline: Duration = TokenEndpointClient.defaultDeadline + .seconds(5)
    /// How long a client that has no direct path (the agent runs as another user; see
    /// ``Unavailable/isFinal``) waits for an answer that needs no refresh (a plain token, the
    /// status): as long as a direct read of a file vault may wait for the vault's lock (the file
    /// store's default `lockTimeout`, 10 s).
    public var readDeadline: Duration = .seconds(10)
    /// Called once, with a sentence for a person, when an answer takes longer than ``deadline``
    /// and the client waits on (a refresh at the agent, a busy system agent); `vault` says it on
    /// stderr. The library itself says nothing.
    public var waiting: (@Sendable (String) -> Void)?

    /// Why the agent cannot answer; the caller goes direct.
    public struct Unavailable: Error, Sendable, CustomStringConvertible {
        /// For a person; holds no secret.
        public let reason: String
        /// The agent speaks another protocol version (the caller should say so).
        public let isVersionMismatch: Bool
        /// Something a person should hear about (a version mismatch, a refusal, a broken answer),
        /// rather than the ordinary "no agent runs".
        public let isNoteworthy: Bool
        /// The agent runs as another user (a system agent whose policy serves this one), so there
        /// is no direct path to go to: the caller cannot read that vault, and its own
        /// configuration names another vault or none. The caller fails with ``reason`` instead;
        /// ``AgentClient/token(for:fresh:leeway:vault:)`` and the other requests throw it as a
        /// ``VaultError`` (`timeout` or `backendUnavailable`).
        public let isFinal: Bool
        /// No answer came within the bound.
        let timedOut: Bool

        init(_ reason: String, versionMismatch: Bool = false, noteworthy: Bool = false, isFinal: Bool = false, timedOut: Bool = false) {
            self.reason = reason
            self.isVersionMismatch = versionMismatch
            self.isNoteworthy = noteworthy || versionMismatch
            self.isFinal = isFinal
            self.timedOut = timedOut
        }

        public var description: String { reason }

        /// The error a final one stands for (see ``isFinal``).
        var finalError: VaultError { VaultError(timedOut ? .timeout : .backendUnavailable, reason) }

        /// As an outcome reports it: a final one as ``finalError``, any other as itself (the caller
        /// goes direct).
        var reported: any Error { isFinal ? finalError : self }
    }

    public init(socketPath: String, deadline: Duration = .milliseconds(500)) {
        self.socketPath = socketPath
        self.deadline = deadline
    }

    /// The client for ``AgentProtocol/socketPath(environment:)``, or nil when `TOKEN_VAULT_AGENT=off`
    /// or there is no socket path to try.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> AgentClient? {
        AgentProtocol.socketPath(environment: environment).map { AgentClient(socketPath: $0) }
    }

    /// The agent's answer to one request, on a connection of its own.
    /// - Throws: ``Unavailable`` when there is no answer within ``deadline`` or it cannot be read.
    /// A passphrase (``AgentRequest/unlock(passphrase:)``) goes only to an agent that runs as this
    /// user: a socket another user made (a path in a shared directory, say) never receives one.
    @_spi(AgentWire) public func send(_ request: AgentRequest) throws(Unavailable) -> AgentResponse {
        try exchange(request).response
    }

    /// ``send(_:)``, and whether the agent runs as another user.
    ///
    /// How long the client waits depends on whether it could go direct instead, which the peer's
    /// uid tells (SO_PEERCRED, read as the connection is made, before a byte is sent). An agent of
    /// this user is a fast path: the client can open the vault itself, so it goes direct after
    /// ``deadline``, unless the request may refresh and the agent is at work (``refreshDeadline``).
    /// An agent of another user (a system agent whose policy serves this one) is the only way in:
    /// this user cannot read that vault or its key, and its own configuration names another vault
    /// or none (the agent answers a granted peer from its own vault whatever the request names).
    /// So the client waits for the answer within the operation's bound (``refreshDeadline`` for a
    /// request that may refresh, ``readDeadline`` otherwise) whatever the agent is doing, and when
    /// none comes the failure is final (``Unavailable/isFinal``) and says why. (Where the socket
    /// lies says nothing reliable: a per-user agent may listen anywhere TOKEN_VAULT_AGENT_SOCKET
    /// points; nor does an unreadable vault path, which names this user's configuration, not the
    /// agent's vault.)
    ///
    /// An agent with no free connection slot for this peer (`--max-connections`, or its uid's
    /// share, `--max-connections-per-user`) answers ``AgentResponse/noFreeConnection`` as it
    /// accepts. An agent of this user is then a fast path no more: ``Unavailable``, go direct. For
    /// an agent of another user the client connects again, after a pause that grows from 10 ms to
    /// 200 ms (a slot frees when another connection of the agent ends, which the client cannot
    /// see), until the same bound; past it the failure is final and says that the agent had no
    /// free slot for this user. ``waiting`` is called once in all, whichever wait comes first.
    private func exchange(_ request: AgentRequest) throws(Unavailable) -> (response: AgentResponse, fromAnotherUser: Bool) {
        let ownUID = SystemCall.effectiveUserID
        let start = SystemCall.monotonicMilliseconds
        let notice = WaitingNotice(waiting)
        var pause: Int64 = 10
        // The agent's uid once it answered "no free slot": another user's agent may not vanish
        // from under a client that has no direct path without the failure being final.
        var waitingOnUID: UInt32?
        // The agent's last "no free slot" message, for the failure when the bound runs out.
        var lastRefusal = ""
        func noFreeSlot(_ uid: UInt32, _ boundMilliseconds: Int64, _ message: String) -> Unavailable {
            Unavailable(
                "The agent at \(socketPath), which runs as uid \(uid), had no free connection slot for this user (uid \(ownUID)) within \(boundMilliseconds / 1000) s: \(message) This user cannot read that agent's vault, so there is no direct path to try; try again later, or ask the agent's owner to raise --max-connections-per-user or --max-connections.",
                noteworthy: true, isFinal: true, timedOut: true)
        }
        while true {
            let connection: Connection
            do {
                connection = try Connection(socketPath: socketPath)
            } catch {
                guard let uid = waitingOnUID else { throw error }
                throw Unavailable(
                    "The agent at \(socketPath), which runs as uid \(uid), went away while this client waited for a free connection slot: \(error.reason). This user cannot read that agent's vault, so there is no direct path to try; try again, or ask the agent's owner to look at it.",
                    noteworthy: true, isFinal: true)
            }
            if case .unlock = request, connection.peerUID != ownUID {
                throw Unavailable(
                    "the agent at \(socketPath) runs as uid \(connection.peerUID.map(String.init) ?? "unknown"), not as this user; the passphrase was not sent",
                    noteworthy: true)
            }
            let fromAnotherUser = connection.peerUID.map { $0 != ownUID } ?? false
            let bound = request.mayRefresh ? refreshDeadline : fromAnotherUser ? readDeadline : nil
            let spent = SystemCall.monotonicMilliseconds - start
            let boundMilliseconds = Int64(Connection.milliseconds(bound ?? deadline))
            let deadline = self.deadline
            let busy =
                "the agent has not answered within \(Connection.milliseconds(deadline)) ms (\(request.mayRefresh ? "a refresh at the token endpoint, or a busy agent" : "a busy agent")); waiting up to \(boundMilliseconds / 1000) s for its answer"
            var sayBusy: (@Sendable () -> Void)?
            if let notice { sayBusy = { @Sendable in notice.say(busy) } }
            // What is left of the bound (and of the fast deadline) after the attempts before; the
            // first attempt has all of it (its message names the bound itself, not 9,999 ms of it).
            let left = Duration.milliseconds(waitingOnUID == nil ? boundMilliseconds : max(1, boundMilliseconds - spent))
            let response: AgentResponse
            do throws(Unavailable) {
                response = try connection.send(
                    request, deadline: min(deadline, left), patience: bound == nil ? nil : left, whileStopped: fromAnotherUser, waiting: sayBusy)
            } catch {
                guard fromAnotherUser else { throw error }
                if let uid = waitingOnUID, error.timedOut, SystemCall.monotonicMilliseconds - start >= boundMilliseconds {
                    // The last try, made as the bound ran out, got no answer in what was left of it:
                    // the wait for a slot is what ran out.
                    throw noFreeSlot(uid, boundMilliseconds, lastRefusal)
                }
                let state = error.timedOut ? connection.peerState.map { " (\($0))" } ?? "" : ""
                throw Unavailable(
                    "The agent at \(socketPath), which runs as uid \(connection.peerUID.map(String.init) ?? "unknown"), gave no usable answer: \(error.reason)\(state). This user cannot read that agent's vault, so there is no direct path to try; try again, or ask the agent's owner to look at it.",
                    noteworthy: true, isFinal: true, timedOut: error.timedOut)
            }
            guard case .failure(AgentResponse.noFreeConnection, let message) = response else { return (response, fromAnotherUser) }
            guard fromAnotherUser, let uid = connection.peerUID else {
                throw Unavailable("the agent has no free connection slot for this client (\(message))", noteworthy: true)
            }
            waitingOnUID = uid
            lastRefusal = message
            let now = SystemCall.monotonicMilliseconds - start
            guard now < boundMilliseconds else {
                throw noFreeSlot(uid, boundMilliseconds, message)
            }
            notice?.say(
                "the agent has no free connection slot for this user (\(message.hasSuffix(".") ? String(message.dropLast()) : message)); trying again for up to \(boundMilliseconds / 1000) s")
            // The last try comes as the bound runs out.
            SystemCall.sleep(seconds: Double(min(pause, boundMilliseconds - now)) / 1000)
            pause = min(pause * 2, 200)
        }
    }

    /// ``waiting``, called at most once for one request however many waits it has (a busy agent,
    /// no free connection slot).
    private final class WaitingNotice: Sendable {
        private let waiting: @Sendable (String) -> Void
        private let said = Mutex(false)

        init?(_ waiting: (@Sendable (String) -> Void)?) {
            guard let waiting else { return nil }
            self.waiting = waiting
        }

        func say(_ sentence: String) {
            let first = said.withLock { said in
                defer { said = true }
                return !said
            }
            if first { waiting(sentence) }
        }
    }

    /// ``exchange(_:)`` for a request whose caller goes direct on ``Unavailable``; an agent of
    /// another user's silence leaves it no direct path, so that is a ``VaultError`` saying why:
    /// `timeout` when no answer came within the bound, `backendUnavailable` otherwise (exit 6).
    private func answer(_ request: AgentRequest) throws -> (response: AgentResponse, fromAnotherUser: Bool) {
        do {
            return try exchange(request)
        } catch where error.isFinal {
            throw error.finalError
        }
    }

    /// Whether a failure says the agent does not know the request's kind: `unsupported-request`,
    /// or (from an agent built before the writes) `invalid-input`, "unknown message kind".
    private static func isUnknownKind(_ code: String, _ message: String) -> Bool {
        code == AgentResponse.unsupportedRequest
            || (code == VaultError.Code.invalidInput.description && message.contains("unknown message kind"))
    }

    /// Why a failure answer to a read of a later kind (`accounts`, `list`) leaves the caller
    /// without it: another user's agent's failure, and a policy's refusal, as the ``VaultError``
    /// they are; anything else (an agent built before the kind, locked, serving another vault) as
    /// ``Unavailable``, and the caller goes direct.
    private func unanswered(_ response: AgentResponse, code: String, message: String, fromAnotherUser: Bool, what: String) -> any Error {
        let unknown = Self.isUnknownKind(code, message)
        if !unknown {
            if fromAnotherUser, let error = finalFailure(response) { return error }
            if let error = response.error, error.code == .permissionDenied { return error }
        }
        return Unavailable(
            "the agent did not \(what) (\(code): \(message))", noteworthy: !unknown && code != AgentResponse.notThisVault && code != "locked")
    }

    /// An agent of another user's failure answer, which is final: the direct path is no way in.
    private func finalFailure(_ response: AgentResponse) -> VaultError? {
        guard case .failure(let code, let message) = response else { return nil }
        if code == VaultError.Code.locked.description {
            return VaultError(.locked, "The agent at \(socketPath) holds its vault locked; only its own user can unlock it (vault unlock).")
        }
        if let error = response.error, AgentProtocol.code(named: code) != nil { return error }
        return VaultError(.backendUnavailable, "The agent at \(socketPath) did not serve this request (\(code): \(message)).")
    }

    /// The access token under `key`, as the agent serves it.
    /// - Parameters:
    ///   - fresh: as `vault get --fresh`: refreshed first (by the agent, in the one single flight)
    ///     when it expires within `leeway` seconds and the entry can be refreshed.
    ///   - vault: ``AgentProtocol/vaultIdentity(of:)`` of the vault the caller would open.
    /// - Throws: ``Unavailable`` (go direct), or the agent's ``VaultError`` when the direct path
    ///   would have given the same answer: `notFound`, `expired`, `reauthenticationRequired`,
    ///   `invalidInput` (an opaque secret), `permissionDenied` (an agent of another user whose
    ///   policy does not grant this user or this entry), and the refresh's errors.
    public func token(for key: CredentialKey, fresh: Bool, leeway: TimeInterval = 60, vault: String) throws -> AgentToken {
        try tokenOutcome(for: key, fresh: fresh, leeway: leeway, vault: vault).result.get()
    }

    /// What ``token(for:fresh:leeway:vault:)`` returns or throws, and whether the agent runs as
    /// another user. Then every failure is final (there is no direct path to go to), which a
    /// caller that answers some of the agent's failures by going direct (the git helper, whose
    /// direct path answers `notFound` and a rejected refresh token in its own way) must know.
    package func tokenOutcome(
        for key: CredentialKey, fresh: Bool, leeway: TimeInterval = 60, vault: String
    ) -> (result: Result<AgentToken, any Error>, fromAnotherUser: Bool) {
        let exchanged: (response: AgentResponse, fromAnotherUser: Bool)
        do {
            exchanged = try exchange(.token(AgentTokenRequest(key: key, fresh: fresh, leeway: leeway, vault: vault)))
        } catch {
            return (.failure(error.reported), error.isFinal)
        }
        let (response, fromAnotherUser) = exchanged
        switch response {
        case .token(let token): return (.success(token), fromAnotherUser)
        case .failure(let code, let message):
            if fromAnotherUser, let error = finalFailure(response) { return (.failure(error), true) }
            if let error = response.error, Self.definitive.contains(error.code) { return (.failure(error), fromAnotherUser) }
            return (
                .failure(
                    Unavailable(
                        "the agent did not serve this request (\(code): \(message))",
                        noteworthy: code != AgentResponse.notThisVault && code != "locked")), fromAnotherUser
            )
        default:
            if fromAnotherUser {
                return (.failure(VaultError(.io, "The agent at \(socketPath) answered a token request with another kind of message.")), true)
            }
            return (.failure(Unavailable("the agent answered a token request with another kind of message", noteworthy: true)), false)
        }
    }

    /// The token under `key` with a DPoP proof the agent signs for one `method` request to `url`
    /// (``AgentAuthorization/fields`` are the header fields); a Bearer entry's answer has no proof.
    /// The DPoP key never leaves the agent.
    /// - Throws: as ``token(for:fresh:leeway:vault:)``, and `configurationError` when the entry
    ///   holds no DPoP key for its DPoP token.
    public func authorization(
        for key: CredentialKey, method: String, url: URL, nonce: String? = nil, fresh: Bool = true, leeway: TimeInterval = 60,
        vault: String
    ) throws -> AgentAuthorization {
        let request = AgentProofRequest(
            token: AgentTokenRequest(key: key, fresh: fresh, leeway: leeway, vault: vault), method: method, url: url, nonce: nonce)
        let (response, fromAnotherUser) = try answer(.proof(request))
        switch response {
        case .authorization(let authorization): return authorization
        case .failure(let code, let message):
            if fromAnotherUser, let error = finalFailure(response) { throw error }
            if let error = response.error, Self.definitive.contains(error.code) || error.code == .configurationError { throw error }
            throw Unavailable(
                "the agent did not serve this request (\(code): \(message))", noteworthy: code != AgentResponse.notThisVault && code != "locked")
        default:
            if fromAnotherUser { throw VaultError(.io, "The agent at \(socketPath) answered a proof request with another kind of message.") }
            throw Unavailable("the agent answered a proof request with another kind of message", noteworthy: true)
        }
    }

    /// Saves a token entry through the agent, as the direct path would have (`vault set`, the
    /// store step of `vault login`). The answer names the backend; it never holds a token.
    /// - Throws: ``Unavailable`` (go direct: no agent, another vault, a locked agent, an agent
    ///   that does not take writes, a write that failed there, which the direct path then makes
    ///   or reports in its own words), or `permissionDenied` when the agent runs as another user
    ///   (a system agent's policy grants reads only).
    @_spi(AgentWire) public func store(_ request: AgentStoreRequest) throws -> AgentWriteResult {
        try write(.store(request))
    }

    /// Removes the entry under `key` through the agent, as `vault delete` would directly.
    /// ``AgentWriteResult/existed`` says whether there was one.
    /// - Throws: as ``store(_:)``.
    @_spi(AgentWire) public func delete(_ key: CredentialKey, vault: String) throws -> AgentWriteResult {
        try write(.delete(AgentDeleteRequest(key: key, vault: vault)))
    }

    /// A write's answer, or why the caller goes direct. Only a refusal is final: any failure the
    /// agent met while writing leaves the write to the direct path, whose own answer (the same
    /// write again, or its error) is the one the caller reports.
    private func write(_ request: AgentRequest) throws -> AgentWriteResult {
        let (response, fromAnotherUser) = try answer(request)
        switch response {
        case .written(let result): return result
        case .failure(let code, let message):
            if fromAnotherUser, let error = finalFailure(response) { throw error }
            if Self.isUnknownKind(code, message) {
                // An agent built before writes went through it answers `invalid-input`.
                throw Unavailable("the agent does not take writes (an earlier vault agent)", noteworthy: true)
            }
            if let error = response.error, error.code == .permissionDenied { throw error }
            throw Unavailable(
                "the agent did not make this write (\(code): \(message))", noteworthy: code != AgentResponse.notThisVault && code != "locked")
        default:
            if fromAnotherUser { throw VaultError(.io, "The agent at \(socketPath) answered a write with another kind of message.") }
            throw Unavailable("the agent answered a write with another kind of message", noteworthy: true)
        }
    }

    /// The accounts of `service` in the agent's vault (to a peer of another uid, those its policy
    /// grants), under ``tokenOutcome(for:fresh:leeway:vault:)``'s rules: an agent that does not
    /// know the request (built before it) or does not serve `vault` is ``Unavailable``, and the
    /// caller goes direct; a failure of another user's agent is final.
    package func accountsOutcome(service: String, vault: String) -> (result: Result<[String], any Error>, fromAnotherUser: Bool) {
        let exchanged: (response: AgentResponse, fromAnotherUser: Bool)
        do {
            exchanged = try exchange(.accounts(AgentAccountsRequest(service: service, vault: vault)))
        } catch {
            return (.failure(error.reported), error.isFinal)
        }
        let (response, fromAnotherUser) = exchanged
        switch response {
        case .accounts(let answer): return (.success(answer.accounts), fromAnotherUser)
        case .failure(let code, let message):
            return (.failure(unanswered(response, code: code, message: message, fromAnotherUser: fromAnotherUser, what: "list the accounts")), fromAnotherUser)
        default:
            if fromAnotherUser {
                return (.failure(VaultError(.io, "The agent at \(socketPath) answered an accounts request with another kind of message.")), true)
            }
            return (.failure(Unavailable("the agent answered an accounts request with another kind of message", noteworthy: true)), false)
        }
    }

    /// Every entry `vault list` shows of `vault` (only `service`'s, when given), page by page,
    /// from an agent that holds it open. ``Unavailable`` when the agent cannot answer (gone,
    /// locked, serving another vault, or built before `list`): the client then opens the vault
    /// itself; a refusal of the agent's policy, or a final failure of another user's agent, as
    /// the ``VaultError`` it is.
    package func listingOutcome(service: String?, vault: String) -> Result<[ListedEntry], any Error> {
        var entries: [ListedEntry] = []
        var after: CredentialKey?
        while true {
            let exchanged: (response: AgentResponse, fromAnotherUser: Bool)
            do {
                exchanged = try exchange(.list(AgentListRequest(service: service, vault: vault, after: after)))
            } catch {
                return .failure(error.reported)
            }
            let (response, fromAnotherUser) = exchanged
            switch response {
            case .listing(let page):
                let listed = page.entries.compactMap(\.listed)
                guard listed.count == page.entries.count, listed.first.map({ first in after.map { $0 < first.key } ?? true }) ?? true,
                    zip(listed, listed.dropFirst()).allSatisfy({ $0.key < $1.key })
                else {
                    return .failure(Unavailable("the agent's listing is not sorted entries after the one asked for", noteworthy: true))
                }
                entries += listed
                guard page.more else { return .success(entries) }
                // A page that says more follow holds at least one entry (the next starts after it).
                guard let last = listed.last else {
                    return .failure(Unavailable("the agent said more entries follow, but sent none", noteworthy: true))
                }
                after = last.key
            case .failure(let code, let message):
                return .failure(unanswered(response, code: code, message: message, fromAnotherUser: fromAnotherUser, what: "list the entries"))
            default:
                return .failure(Unavailable("the agent answered a list request with another kind of message", noteworthy: true))
            }
        }
    }

    /// Whether the agent runs as this user and holds `vault` open (unlocked), so that a write
    /// through it needs no key here: `vault login` asks before it starts, and then opens no vault
    /// (no passphrase) unless the agent's answer sends it direct after all.
    @_spi(AgentWire) public func holdsOpen(vault: String) -> Bool {
        guard let connection = try? Connection(socketPath: socketPath), connection.peerUID == SystemCall.effectiveUserID,
            case .status(let status) = try? connection.send(.status, deadline: deadline)
        else { return false }
        return status.unlocked && status.vault == vault
    }

    /// The agent's status.
    public func status() throws(Unavailable) -> AgentStatus {
        switch try send(.status) {
        case .status(let status): return status
        case .failure(let code, let message): throw Unavailable("the agent refused (\(code): \(message))", noteworthy: true)
        default: throw Unavailable("the agent answered a status request with another kind of message", noteworthy: true)
        }
    }

    /// The agent's failures that are answers: the direct path would have said the same.
    static let definitive: Set<VaultError.Code> = [
        .notFound, .expired, .reauthenticationRequired, .invalidInput, .configurationError, .tokenEndpointError,
        .httpError, .networkFailure, .authenticationFailed,
        // A system agent's refusal (its policy does not grant this user or this entry): the
        // direct path could not read that vault either, and the user should hear why.
        .permissionDenied,
    ]

    /// One connection to the agent, for several requests in turn (a long-running program, a
    /// benchmark). Not for use by two threads at once.
    @_spi(AgentWire) public final class Connection: @unchecked Sendable {  // a descriptor, used by one caller at a time
        private let fd: Int32
        /// The uid the agent runs as, as the kernel recorded it when it listened; nil when it
        /// cannot be read.
        public let peerUID: UInt32?
        /// The agent's process, as the kernel recorded it; nil when it cannot be read.
        private let peerPID: Int32?

        /// Connects; never waits (a Unix socket's connect completes or fails at once).
        public init(socketPath: String) throws(Unavailable) {
            do {
                fd = try SystemCall.connectUnix(socketPath)
                let peer = try? SystemCall.peerCredentials(fd)
                peerUID = peer?.uid
                peerPID = peer?.pid
            } catch {
                switch error {
                case .noSuchFileOrDirectory: throw Unavailable("no agent socket at \(socketPath)")
                case Errno.connectionRefused: throw Unavailable("no agent listens on \(socketPath)")
                default: throw Unavailable("could not connect to the agent at \(socketPath): \(error.message)", noteworthy: true)
                }
            }
        }

        deinit { SystemCall.closeAfterUse(fd) }

        private static func readable(_ fd: Int32, within milliseconds: Int32) throws(FrameIO.ReadFailure) -> Bool {
            do { return try SystemCall.wait(fd, milliseconds: milliseconds) } catch { throw .system(error) }
        }

        static func milliseconds(_ duration: Duration) -> Int32 {
            Int32(clamping: duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)
        }

        /// Whether process `pid` is running or waiting (state R, S or D in /proc/PID/stat), not
        /// stopped, traced, dead or gone.
        private static func isAtWork(_ pid: Int32) -> Bool {
            let state = state(of: pid)
            return state == "R" || state == "S" || state == "D"
        }

        /// The state letter of process `pid` in /proc/PID/stat; nil when it cannot be read.
        private static func state(of pid: Int32) -> Character? {
            guard let stat = try? SystemCall.readWhole("/proc/\(pid)/stat"),
                let end = stat.lastIndex(of: ")")
            else { return nil }
            return stat[stat.index(after: end)...].drop { $0 == " " }.first
        }

        /// What the agent's process is doing, for a person: busy, stopped or gone; nil when it
        /// cannot be told.
        var peerState: String? {
            guard let pid = peerPID, pid > 0 else { return nil }
            switch Self.state(of: pid) {
            case "R", "S", "D": return "its process \(pid) is running: busy"
            case "T", "t": return "its process \(pid) is stopped"
            case "Z", "X": return "its process \(pid) has ended"
            case nil: return nil
            default: return nil
            }
        }

        /// Sends `request` and reads the answer, both within `deadline`, or within `patience` when
        /// it is given and the agent's process is still running or waiting (on the token
        /// endpoint, say) at `deadline`.
        public func send(_ request: AgentRequest, deadline: Duration, patience: Duration? = nil) throws(Unavailable) -> AgentResponse {
            try send(request, deadline: deadline, patience: patience, whileStopped: false, waiting: nil)
        }

        /// ``send(_:deadline:patience:)``; with `whileStopped`, the client waits out `patience`
        /// whatever the agent's process is doing (it has no direct path to go to), and `waiting`
        /// is called once when the answer takes longer than `deadline`.
        func send(
            _ request: AgentRequest, deadline: Duration, patience: Duration?, whileStopped: Bool, waiting: (@Sendable () -> Void)?
        ) throws(Unavailable) -> AgentResponse {
            var milliseconds = Self.milliseconds(deadline)
            let start = SystemCall.monotonicMilliseconds
            var bytes = request.encoded()
            defer { bytes.wipe() }
            // The agent refuses a larger frame before reading it; such a request (a store of a
            // token entry of some tens of kilobytes) goes direct instead.
            guard bytes.count <= AgentProtocol.headerLength + AgentProtocol.maximumBodyLength else {
                throw Unavailable("the request is larger than the \(AgentProtocol.maximumBodyLength) bytes the agent protocol carries")
            }
            do {
                try FrameIO.write(fd, bytes, deadlineMilliseconds: milliseconds)
            } catch {
                // An agent that refuses this peer answers as it accepts and closes at once, so
                // the write can find the connection closed: its answer may be waiting to be read.
                if let body = try? FrameIO.readBody(fd, idleMilliseconds: 50, deadlineMilliseconds: 50),
                    let response = try? AgentResponse(body: body), case .failure = response
                {
                    return response
                }
                throw Unavailable("the agent did not take the request: \(error.message)", noteworthy: true)
            }
            var left = max(1, Int32(clamping: Int64(milliseconds) - (SystemCall.monotonicMilliseconds - start)))
            let body: [UInt8]
            do throws(FrameIO.ReadFailure) {
                if let patience, whileStopped || (peerPID ?? 0) > 0 {
                    // The first byte of the answer may wait on the agent's refresh: slices of
                    // `deadline`, while the agent's process is at work (or whatever it does,
                    // `whileStopped`), up to `patience` in all.
                    let slice = milliseconds
                    let longest = Int64(Self.milliseconds(max(patience, deadline)))
                    var told = false
                    while try !Self.readable(fd, within: left) {
                        let spent = SystemCall.monotonicMilliseconds - start
                        guard spent < longest, whileStopped || Self.isAtWork(peerPID ?? 0) else { throw FrameIO.ReadFailure.timedOut }
                        if !told {
                            told = true
                            waiting?()
                        }
                        left = Int32(clamping: min(Int64(slice), longest - spent))
                        milliseconds = Int32(clamping: spent + Int64(left))
                    }
                    left = max(left, 50)
                }
                body = try FrameIO.readBody(fd, idleMilliseconds: left, deadlineMilliseconds: left)
            } catch {
                switch error {
                case .closed, .system(Errno.connectionReset):
                    // (A connection the agent never accepted is reset when it dies.)
                    throw Unavailable("the agent closed the connection without an answer", noteworthy: true)
                case .timedOut: throw Unavailable("the agent did not answer within \(milliseconds) ms", noteworthy: true, timedOut: true)
                case .malformed(let reason): throw Unavailable("the agent's answer is not a frame: \(reason)", noteworthy: true)
                case .system(let errno): throw Unavailable("could not read the agent's answer: \(errno.message)", noteworthy: true)
                }
            }
            do {
                let response = try AgentResponse(body: body)
                if case .failure(let code, let message) = response, code == VaultError.Code.unsupportedVersion.description {
                    throw Unavailable("the agent refused this client's protocol version: \(message)", versionMismatch: true)
                }
                return response
            } catch let error as AgentProtocol.DecodingError {
                if let version = error.peerVersion {
                    throw Unavailable(
                        "the agent speaks protocol version \(version), this vault speaks \(AgentProtocol.version)",
                        versionMismatch: true)
                }
                throw Unavailable("the agent's answer could not be read: \(error.reason)", noteworthy: true)
            } catch let error as Unavailable {
                throw error
            } catch {
                throw Unavailable("the agent's answer could not be read", noteworthy: true)
            }
        }
    }
}
