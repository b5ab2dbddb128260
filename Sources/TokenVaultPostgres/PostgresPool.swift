// Owns: making a connection to the server (TCP with keepalives, TLS and, for verify-full, the
// host name check) and the store's pool of them.
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
import Foundation
import TokenVault
import PostgresNIO
import NIOTLS
import Logging
import Synchronization

/// Makes the connections of one store, as its ``PostgresStore/Configuration`` says.
///
/// `sslmode=verify-full` is libpq's here: postgres-nio lets swift-nio-ssl check the host name,
/// and swift-nio-ssl also accepts a certificate whose IP-address entries hold the address it
/// connected to, whatever name the URL gives (a trusted certificate naming an attacker's
/// address passed for any name DNS points there), and offers no hook to change that. So for
/// verify-full the connection is set up here, as libpq does it: TCP, the SSLRequest, the TLS
/// handshake with the chain checked by BoringSSL against the trusted roots, then the URL's host
/// checked against the certificate's names (``ServerNameCheck``), and only then is the channel
/// handed to postgres-nio, which sends the startup message and the password over it. Nothing of
/// the login leaves before the name is checked. The other TCP modes are set up the same way,
/// without the name check (verify-ca, require) or without TLS (disable, loopback only), so that
/// every TCP connection carries keepalives; a Unix socket goes through postgres-nio as it is.
final class PostgresConnector: Sendable {
    let configuration: PostgresStore.Configuration
    let connectTimeout: Duration
    /// Made once (it reads the trusted roots from disk); `nil` without TLS.
    private let tlsContext: NIOSSLContext?
    private let nextID = Atomic(0)

    init(_ configuration: PostgresStore.Configuration, connectTimeout: Duration) throws {
        self.configuration = configuration
        self.connectTimeout = connectTimeout
        tlsContext = try configuration.tlsConfiguration().map { try NIOSSLContext(configuration: $0) }
    }

    /// A new connection, logged in.
    func connect() async throws -> PostgresConnection {
        let id = nextID.add(1, ordering: .relaxed).newValue
        let configuration = self.configuration
        var settings: PostgresConnection.Configuration
        // An established channel is set up on its own event loop, and postgres-nio must be too.
        var eventLoop = PostgresConnection.defaultEventLoopGroup.any()
        if let socketDirectory = configuration.socketDirectory {
            let path = (socketDirectory as NSString).appendingPathComponent(".s.PGSQL.\(configuration.port)")
            settings = PostgresConnection.Configuration(
                unixSocketPath: path, username: configuration.user, password: configuration.password, database: configuration.database)
        } else {
            let channel = try await openChannel(
                host: configuration.bareHost, port: configuration.port, context: tlsContext,
                checkName: configuration.tlsMode == .verifyFull)
            eventLoop = channel.eventLoop
            settings = PostgresConnection.Configuration(
                establishedChannel: channel, username: configuration.user, password: configuration.password,
                database: configuration.database)
        }
        settings.options.connectTimeout = TimeAmount(connectTimeout)
        settings.options.additionalStartupParameters = Self.serverKeepalive
        return try await PostgresConnection.connect(on: eventLoop, configuration: settings, id: id, logger: PostgresSQL.silent)
    }

    /// The server's side of the same, for the whole session of every connection, sent with the
    /// startup message (no round trip): the backend of a client that went silent (cut off,
    /// powered off) ends about 24 s after its last packet, and with it any transaction it held
    /// open and the row locks that transaction took. Without them the server waits out the
    /// kernel's two hours: a `vault set` cut off between its UPDATE and its COMMIT kept the row
    /// locked for every other host that long. The refresh transaction sets these and more for
    /// itself (``PostgresStore/deadPeerSettings``). Settings every PostgreSQL release knows (a
    /// startup parameter the server does not know fails the login); ignored over a Unix socket.
    static let serverKeepalive = [("tcp_keepalives_idle", "18"), ("tcp_keepalives_interval", "2"), ("tcp_keepalives_count", "3")]

    /// TCP keepalives on every connection, as the refresh asks the server to keep them
    /// (``PostgresStore/deadPeerSettings``): a client waiting on a server that went away without
    /// a word (its link cut, a primary fenced and its address moved to the promoted standby)
    /// hears of it within 5 + 2 × 3 s, and the steps that retry do so on a new connection,
    /// instead of waiting out their whole bound. A server that is there answers the probes.
    private static let keepalive: [(name: Int32, value: Int)] = [(TCP_KEEPIDLE, 5), (TCP_KEEPINTVL, 2), (TCP_KEEPCNT, 3)]

    /// TCP to `host` (with keepalives), then, with a TLS `context`, TLS as libpq sets it up and,
    /// for verify-full (`checkName`), the host name checked: a channel ready for the startup
    /// message. The TCP connect and the TLS set-up are each bounded by the connect timeout (the
    /// caller's deadline bounds the whole). Every TCP connection is made here, not by
    /// postgres-nio, which offers no keepalive setting.
    private func openChannel(host: String, port: Int, context: NIOSSLContext?, checkName: Bool) async throws -> any Channel {
        var bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(TimeAmount(connectTimeout))
            .channelOption(ChannelOptions.socketOption(.so_keepalive), value: 1)
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
        for option in Self.keepalive {
            bootstrap = bootstrap.channelOption(
                ChannelOptions.Types.SocketOption(level: NIOBSDSocket.OptionLevel(rawValue: CInt(IPPROTO_TCP)), name: NIOBSDSocket.Option(rawValue: option.name)),
                value: option.value)
        }
        let channel = try await bootstrap.connect(host: host, port: port).get()
        guard let context else { return channel }
        // A server that takes the TCP connection and then says nothing: closing the channel
        // fails whatever waits below.
        let bound = channel.eventLoop.scheduleTask(in: TimeAmount(connectTimeout)) { channel.close(promise: nil) }
        defer { bound.cancel() }
        let vault = PostgresStore.vaultName(configuration)
        let ready = channel.eventLoop.makePromise(of: Void.self)
        do {
            // An IP address is never sent as SNI (RFC 6066); a name is, as libpq does.
            let serverName = ServerNameCheck.ipv4(host) == nil && ServerNameCheck.ipv6(host) == nil ? host : nil
            try await channel.eventLoop.submit {
                let starter = TLSStarter(context: context, serverName: serverName, ready: ready, vault: vault)
                try channel.pipeline.syncOperations.addHandler(starter)
            }.get()
            try await ready.futureResult.get()
            if checkName { try await checkServerName(host: host, channel: channel, vault: vault) }
            return channel
        } catch {
            // A channel closed before the starter was added (a restart) leaves `ready` to be
            // completed here (a second completion is ignored): a promise dropped unfulfilled is
            // a crash in debug builds.
            ready.fail(error)
            channel.close(promise: nil)
            throw error
        }
    }
}

extension PostgresConnector {
    /// Throws unless the leaf certificate on `channel` names `host` by libpq's verify-full rules.
    private func checkServerName(host: String, channel: any Channel, vault: String) async throws {
        guard let certificate = try await channel.nioSSL_peerCertificate().get() else {
            throw VaultError(.backendUnavailable, "The TLS handshake with \(vault) failed: the server presented no certificate.")
        }
        let names: ServerCertificateNames
        do {
            names = try ServerCertificateNames(der: try certificate.toDERBytes())
        } catch {
            throw VaultError(.backendUnavailable, "The TLS handshake with \(vault) failed: \(error).")
        }
        if let refusal = ServerNameCheck.refusal(host: host, names: names) {
            throw VaultError(
                .backendUnavailable,
                "The TLS handshake with \(vault) failed: \(refusal) (sslmode=verify-full checks the URL's host against the names in the certificate, as libpq does). Connect by a name the certificate holds, or have one issued for this name; nothing was sent to the server.")
        }
    }
}

/// Sends the SSLRequest, reads the server's one-byte answer, adds the TLS handler, and reports
/// when its handshake (with the chain verified) is done, leaving the pipeline then. A server
/// that sends more than its one byte before the handshake is refused (CVE-2021-23222: bytes a
/// man in the middle put there).
private final class TLSStarter: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    private enum State { case asking, handshaking, done }
    private var state = State.asking
    private let context: NIOSSLContext
    private let serverName: String?
    private let ready: EventLoopPromise<Void>
    private let vault: String

    init(context: NIOSSLContext, serverName: String?, ready: EventLoopPromise<Void>, vault: String) {
        self.context = context
        self.serverName = serverName
        self.ready = ready
        self.vault = vault
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // Length 8, then the SSLRequest code 80877103.
        let request = context.channel.allocator.buffer(bytes: [0, 0, 0, 8, 0x04, 0xD2, 0x16, 0x2F])
        context.writeAndFlush(NIOAny(request), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard state == .asking else { return }
        let buffer = unwrapInboundIn(data)
        guard buffer.readableBytes == 1, let answer = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else {
            return fail(
                context,
                VaultError(.backendUnavailable, "The server of \(vault) sent more than its answer to the TLS request; refused (it may be a man in the middle)."))
        }
        switch answer {
        case UInt8(ascii: "S"):
            do {
                let handler = try NIOSSLClientHandler(context: self.context, serverHostname: serverName)
                try context.pipeline.syncOperations.addHandler(handler, position: .before(self))
                state = .handshaking
            } catch {
                fail(context, error)
            }
        case UInt8(ascii: "N"):
            fail(
                context,
                VaultError(
                    .backendUnavailable,
                    "The server of \(vault) does not offer TLS, and sslmode requires it. Enable ssl on the server (or, on loopback only, use sslmode=disable)."))
        default:
            fail(context, VaultError(.backendUnavailable, "The server of \(vault) gave no valid answer to the TLS request; is it PostgreSQL?"))
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        context.fireUserInboundEventTriggered(event)
        if state == .handshaking, let event = event as? TLSUserEvent, case .handshakeCompleted = event {
            state = .done
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            ready.succeed(())
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(context, error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(context, ClosedConnection())
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        if state != .done { fail(context, ClosedConnection(), close: false) }
    }

    private func fail(_ context: ChannelHandlerContext, _ error: any Error, close: Bool = true) {
        guard state != .done else { return }
        state = .done
        ready.fail(error)
        if close { context.close(promise: nil) }
    }
}

/// The store's connections: at most `maximum` at once, idle ones reused (the most recent first)
/// and closed after a minute unused, closed ones dropped. A caller that finds all of them in use
/// waits for one (its deadline cancels the wait). A connect that fails fails the caller that
/// asked for it, with its reason, at once: a refused login or a certificate that does not verify
/// is reported as what it is; a refused or unreachable server is retried by the caller
/// (``PostgresStore/retrying(what:vault:_:)``) until its deadline.
final class PostgresPool: Sendable {
    private struct Waiter {
        let id: Int
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var idle: [(connection: PooledConnection, since: ContinuousClock.Instant)] = []
        /// Connections open or being opened, in use or idle.
        var count = 0
        var waiters: [Waiter] = []
        var nextWaiter = 0
        /// Waiters whose wait has not begun yet, and those of them cancelled before it did.
        var starting: Set<Int> = []
        var cancelledEarly: Set<Int> = []
        var closed = false
    }

    private let state = Mutex(State())
    private let connector: PostgresConnector
    private let maximum: Int
    private let idleTimeout: Duration
    private let vault: String

    init(_ connector: PostgresConnector, maximum: Int = 8, idleTimeout: Duration = .seconds(60)) {
        self.connector = connector
        self.maximum = maximum
        self.idleTimeout = idleTimeout
        vault = PostgresStore.vaultName(connector.configuration)
    }

    deinit { close() }

    /// Lends a connection to `body` for its duration. A connection on which `body` met a lost
    /// connection is closed, never lent again. A `body` still running a moment after its
    /// connection closed is left behind (``PooledConnection/run(_:)``) with a lost connection,
    /// which its caller retries on another.
    func withConnection<Result: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> Result) async throws -> Result {
        let pooled = try await lease()
        let result: Result
        do {
            result = try await pooled.run { try await body(pooled.connection) }
        } catch {
            release(pooled, broken: PostgresSQL.isConnectionFailure(error))
            throw error
        }
        release(pooled)
        return result
    }

    /// Closes the idle connections, and those in use as they come back; fails every waiter and
    /// every later call.
    func close() {
        let (idle, waiters) = state.withLock { state in
            state.closed = true
            let idle = state.idle
            state.idle = []
            state.count -= idle.count
            let waiters = state.waiters
            state.waiters = []
            return (idle, waiters)
        }
        for entry in idle { Self.discard(entry.connection) }
        for waiter in waiters { waiter.continuation.resume(throwing: closedError) }
    }

    private var closedError: VaultError { VaultError(.backendUnavailable, "\(vault) is closed.") }

    private enum Step {
        case use(PooledConnection)
        case connect
        case wait
    }

    private func lease() async throws -> PooledConnection {
        while true {
            try Task.checkCancellation()
            var stale: [PooledConnection] = []
            let step: Step? = state.withLock { state in
                guard !state.closed else { return nil }
                let now = ContinuousClock.now
                while let entry = state.idle.popLast() {
                    if entry.connection.connection.isClosed || now - entry.since > idleTimeout {
                        stale.append(entry.connection)
                        state.count -= 1
                        continue
                    }
                    return .use(entry.connection)
                }
                if state.count < maximum {
                    state.count += 1
                    return .connect
                }
                return .wait
            }
            for connection in stale { Self.discard(connection) }
            switch step {
            case nil:
                throw closedError
            case .use(let connection):
                return connection
            case .connect:
                let connection: PooledConnection
                do {
                    connection = PooledConnection(try await connector.connect())
                } catch {
                    giveBackSlot()
                    throw error
                }
                if state.withLock({ $0.closed }) {
                    Self.discard(connection)
                    giveBackSlot()
                    throw closedError
                }
                return connection
            case .wait:
                try await waitForConnection()
            }
        }
    }

    private func release(_ connection: PooledConnection, broken: Bool = false) {
        let (waiter, drop) = state.withLock { state -> (Waiter?, Bool) in
            let drop = broken || state.closed || connection.connection.isClosed
            if drop {
                state.count -= 1
            } else {
                state.idle.append((connection, ContinuousClock.now))
            }
            return (state.waiters.isEmpty ? nil : state.waiters.removeFirst(), drop)
        }
        if drop { Self.discard(connection) }
        waiter?.continuation.resume()
    }

    /// Closes `connection`, keeping it alive until it is closed (postgres-nio asserts that a
    /// connection is closed when it goes away).
    private static func discard(_ pooled: PooledConnection) {
        let connection = pooled.connection
        connection.close().whenComplete { _ in withExtendedLifetime(connection) {} }
    }

    /// A connection that was never made: its place goes to the next waiter.
    private func giveBackSlot() {
        let waiter = state.withLock { state -> Waiter? in
            state.count -= 1
            return state.waiters.isEmpty ? nil : state.waiters.removeFirst()
        }
        waiter?.continuation.resume()
    }

    /// Returns when a connection has come back or a place has freed (then the caller looks again).
    private func waitForConnection() async throws {
        let id = state.withLock { state in
            state.nextWaiter += 1
            state.starting.insert(state.nextWaiter)
            return state.nextWaiter
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let now: Swift.Result<Void, any Error>? = state.withLock { state in
                    state.starting.remove(id)
                    if state.cancelledEarly.remove(id) != nil { return .failure(CancellationError()) }
                    if state.closed { return .failure(closedError) }
                    // Something came back between the look and now.
                    if !state.idle.isEmpty || state.count < maximum { return .success(()) }
                    state.waiters.append(Waiter(id: id, continuation: continuation))
                    return nil
                }
                if let now { continuation.resume(with: now) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                if let index = state.waiters.firstIndex(where: { $0.id == id }) { return state.waiters.remove(at: index) }
                if state.starting.contains(id) { state.cancelledEarly.insert(id) }
                return nil
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }
}
/// A connection of the pool, and the work lent it, which is left behind when the connection
/// closes under it and it does not end.
///
/// postgres-nio hands a statement to its channel without a promise for the write: a statement
/// sent just after the channel closed (between ``PostgresConnection/isClosed`` saying open and
/// the write; the server ended the backend, a restart) is dropped by the closed pipeline and
/// never answered. Waiting for it held a read after `pg_terminate_backend` for its whole 20 s
/// bound in a CI run. A statement in flight when the channel closes is failed by postgres-nio
/// as the channel goes; so work still running `grace` after the close waits on nothing, and
/// ``run(_:)`` gives up on it with a lost connection, which the caller retries on another.
final class PooledConnection: Sendable {
    let connection: PostgresConnection
    static let grace = TimeAmount.milliseconds(250)

    private struct Watch {
        var closed = false
        var run = 0
        var abort: (run: Int, action: @Sendable () -> Void)?
    }
    private let watch = Mutex(Watch())

    init(_ connection: PostgresConnection) {
        self.connection = connection
        let eventLoop = connection.eventLoop
        // The callback holds this object until the connection closes, which every connection
        // of the pool does (the pool closes what it drops, the server what it ends).
        connection.closeFuture.whenComplete { _ in
            self.watch.withLock { $0.closed = true }
            eventLoop.scheduleTask(in: Self.grace) { self.abandonCurrent() }
        }
    }

    private func abandonCurrent() {
        let abort = watch.withLock { watch in
            defer { watch.abort = nil }
            return watch.abort
        }
        abort?.action()
    }

    /// `body`'s result, or ``ClosedConnection`` when the connection closed and `body` had not
    /// ended ``grace`` later; `body` is then cancelled and left to end on its own.
    func run<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result) async throws -> Result {
        try await AbandonableWork.run(
            arm: { abandon in
                let (run, closed) = watch.withLock { watch in
                    watch.run += 1
                    watch.abort = (watch.run, { abandon(ClosedConnection()) })
                    return (watch.run, watch.closed)
                }
                if closed { connection.eventLoop.scheduleTask(in: Self.grace) { abandon(ClosedConnection()) } }
                return run
            },
            ended: { run in
                self.watch.withLock { watch in
                    if watch.abort?.run == run { watch.abort = nil }
                }
            },
            body)
    }
}
#endif
