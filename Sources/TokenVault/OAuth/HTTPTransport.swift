internal import CCurl
import FoundationEssentials
internal import Synchronization

/// One HTTP POST (or a GET, for discovery) on libcurl, which is opened with dlopen on the first request (see `CCurl.h`).
///
/// Nothing links libcurl, so a command that sends no request (`vault --version`, a file-vault
/// `vault get`) maps neither it nor the ~28 libraries behind it (issue 17). `curl_easy_perform`
/// blocks, so each request runs on a thread of its own, never on the Swift cooperative pool; the
/// caller's task waits on a continuation that the first of three events resumes: the transfer's
/// end, the caller's cancellation (which also aborts the transfer at curl's next progress call),
/// or a deadline kept on Swift's side, a little after curl's own, so the bound holds even if
/// curl's thread is starved.
///
/// Choices, where URLSession decided before: curl verifies TLS against the system CA store (its
/// default, never turned off); no cookies (curl keeps none unless asked); proxies from the
/// environment (`https_proxy`, `no_proxy`, …) as curl does by default, as URLSession on Linux did,
/// since it is curl too, except for a loopback host (127.0.0.0/8, ::1, localhost), which is
/// always reached directly: plain http is allowed there only because nothing leaves the machine,
/// and `http_proxy` would carry the refresh token and client secret off it in clear; redirects are not followed, so a token request and its secrets go only
/// to the endpoint that was configured (a 3xx answer is an `httpError`).
enum HTTPTransport {
    /// What a request got back.
    struct Response: Sendable {
        var status: Int
        /// The header fields of the final response, in order.
        var headers: [(name: String, value: String)]
        var body: Data

        /// The first value of the header field `name` (case-insensitive).
        func value(forHeader name: String) -> String? {
            headers.first { $0.name.equalsIgnoringCase(name) }?.value
        }
    }

    /// A request that did not get an HTTP answer, in curl's terms.
    struct Failure: Error, Sendable {
        /// The CURLcode.
        var code: Int32
        /// curl's fixed text for the code (names no URL, header or body).
        var reason: String
        /// `errno` of a failed connect, else 0.
        var osErrno: Int32
        /// Whether any byte of the request was sent, so the server may have acted on it.
        var requestSent: Bool
        /// The Swift-side deadline, not curl, ended the wait.
        var deadlineExpired = false

        var timedOut: Bool { deadlineExpired || code == Int32(TV_CURLE_OPERATION_TIMEDOUT) }
        var aborted: Bool { code == Int32(TV_CURLE_ABORTED_BY_CALLBACK) }
        var bodyTooLarge = false
    }

    /// Transfers whose thread is still running (curl not yet returned), for tests that check an
    /// abandoned request really stops.
    static let running = Atomic<Int>(0)

    /// The most of an answer's body that is kept; a longer one fails the request.
    static let maximumBodySize = TokenResponseFields.maximumBodySize

    // MARK: Loading

    /// The process's one load of `libcurl.so.4`, tried once.
    private static let production: Result<Void, VaultError> = load(soname: TV_CURL_SONAME)

    /// Loads libcurl unless it is loaded; throws `networkFailure` with the install hint when it cannot be.
    static func require() throws {
        try production.get()
    }

    /// Opens `soname` and resolves the curl functions TokenVault calls. Tests pass a missing name.
    static func load(soname: String) -> Result<Void, VaultError> {
        guard let detail = DynamicLibrary.load(soname, with: tv_curl_load) else { return .success(()) }
        return .failure(
            VaultError(
                .networkFailure,
                "Sending an HTTP request (a token refresh or a login) needs libcurl, which could not be loaded (\(detail)). "
                    + "Install it (Debian and Ubuntu: apt-get install libcurl4)."))
    }

    // MARK: Sending

    /// POSTs `body` to `url` with `headers` ("Name: value"), bounded by `timeout` in all.
    /// - Throws: ``Failure`` when no HTTP answer came, `CancellationError` when the calling task
    ///   was cancelled (the transfer is aborted and not waited for).
    static func post(_ url: URL, headers: [String], body: Data, timeout: Duration, tls: TransportTLS? = nil) async throws -> Response {
        try await send(url, headers: headers, body: body, get: false, timeout: timeout, tls: tls)
    }

    /// GETs `url` with `headers` ("Name: value"), bounded by `timeout` in all; as ``post(_:headers:body:timeout:)``.
    static func get(_ url: URL, headers: [String], timeout: Duration, tls: TransportTLS? = nil) async throws -> Response {
        try await send(url, headers: headers, body: Data(), get: true, timeout: timeout, tls: tls)
    }

    private static func send(_ url: URL, headers: [String], body: Data, get: Bool, timeout: Duration, tls: TransportTLS?) async throws
        -> Response
    {
        try require()
        let milliseconds = max(1, Int(TokenEndpointClient.seconds(timeout) * 1000))
        let userAgent = "TokenVault/\(TokenVaultVersion.current)"
        let direct = url.host.map(ClientRegistration.isLoopback) ?? false
        let created: OpaquePointer? = withCStrings(headers) { lines in
            body.withUnsafeBytes { bytes in
                tv_curl_transfer_new(
                    url.absoluteString, lines, headers.count, bytes.baseAddress, bytes.count, milliseconds,
                    maximumBodySize, userAgent, direct ? 1 : 0)
            }
        }
        guard let created else {
            throw Failure(code: Int32(TV_CURLE_OUT_OF_MEMORY), reason: "out of memory", osErrno: 0, requestSent: false)
        }
        if get { tv_curl_transfer_use_get(created) }
        let transfer = Transfer(created)
        if let tls {
            let stored = withCString(tls.caBundle) { ca in
                withCString(tls.clientCertificate) { cert in
                    withCString(tls.clientKey) { key in tv_curl_transfer_use_tls(created, ca, cert, key) }
                }
            }
            guard stored == 0 else {
                throw Failure(code: Int32(TV_CURLE_OUT_OF_MEMORY), reason: "out of memory", osErrno: 0, requestSent: false)
            }
        }
        try Task.checkCancellation()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Response, any Error>) in
                transfer.wait(continuation)
                transfer.start(deadline: timeout + .milliseconds(500))
            }
        } onCancel: {
            transfer.finish(.failure(CancellationError()))
        }
    }

    private static func withCString<R>(_ string: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
        guard let string else { return body(nil) }
        return string.withCString { body($0) }
    }

    /// One transfer: owns the C transfer (freed in `deinit`, once its thread let go of it) and
    /// resumes the caller once, with whichever outcome comes first.
    private final class Transfer: Sendable {
        private struct State {
            var continuation: CheckedContinuation<Response, any Error>?
            var pending: Result<Response, any Error>?
            var done = false
            var deadline: Task<Void, Never>?
        }

        nonisolated(unsafe) private let pointer: OpaquePointer
        private let state = Mutex(State())

        init(_ pointer: OpaquePointer) {
            self.pointer = pointer
        }

        deinit {
            tv_curl_transfer_free(pointer)
        }

        func wait(_ continuation: CheckedContinuation<Response, any Error>) {
            let pending: Result<Response, any Error>? = state.withLock { state in
                if let pending = state.pending { return pending }
                state.continuation = continuation
                return nil
            }
            if let pending { continuation.resume(with: pending) }
        }

        /// Starts the thread (unless the outcome is already known) and the Swift-side deadline.
        func start(deadline: Duration) {
            if state.withLock({ $0.done }) { return }
            // The thread's reference, given back in `completed`.
            let context = Unmanaged.passRetained(self).toOpaque()
            HTTPTransport.running.add(1, ordering: .relaxed)
            let error = tv_curl_transfer_start(pointer, { context in
                Unmanaged<Transfer>.fromOpaque(context!).takeRetainedValue().completed()
            }, context)
            guard error == 0 else {
                Unmanaged<Transfer>.fromOpaque(context).release()
                HTTPTransport.running.subtract(1, ordering: .relaxed)
                finish(.failure(Failure(code: -1, reason: "no thread for the request (errno \(error))", osErrno: error, requestSent: false)))
                return
            }
            let timer = Task { [weak self] in
                do { try await Task.sleep(for: deadline) } catch { return }
                self?.finish(.failure(Failure(code: Int32(TV_CURLE_OPERATION_TIMEDOUT), reason: "timeout", osErrno: 0, requestSent: true, deadlineExpired: true)))
            }
            let cancelNow = state.withLock { state in
                if state.done { return true }
                state.deadline = timer
                return false
            }
            if cancelNow { timer.cancel() }
        }

        /// On the transfer's thread, once curl is done.
        private func completed() {
            finish(outcome())
            HTTPTransport.running.subtract(1, ordering: .relaxed)
        }

        /// The first outcome wins; a later one is dropped. Anything but the transfer's own end
        /// also aborts the transfer.
        func finish(_ result: Result<Response, any Error>) {
            let (continuation, timer): (CheckedContinuation<Response, any Error>?, Task<Void, Never>?) = state.withLock { state in
                guard !state.done else { return (nil, nil) }
                state.done = true
                let continuation = state.continuation
                state.continuation = nil
                if continuation == nil { state.pending = result }
                let timer = state.deadline
                state.deadline = nil
                return (continuation, timer)
            }
            tv_curl_transfer_abort(pointer)
            timer?.cancel()
            continuation?.resume(with: result)
        }

        private func outcome() -> Result<Response, any Error> {
            let code = tv_curl_transfer_code(pointer)
            let requestSent = tv_curl_transfer_request_bytes(pointer) > 0
            guard code == Int32(TV_CURLE_OK) else {
                var failure = Failure(
                    code: code, reason: String(cString: tv_curl_transfer_reason(pointer)),
                    osErrno: tv_curl_transfer_os_errno(pointer), requestSent: requestSent)
                failure.bodyTooLarge = code == Int32(TV_CURLE_WRITE_ERROR) && tv_curl_transfer_body_overflowed(pointer) != 0
                return .failure(failure)
            }
            var length = 0
            let body = tv_curl_transfer_body(pointer, &length).map { Data(bytes: $0, count: length) } ?? Data()
            let headerBytes = tv_curl_transfer_headers(pointer, &length).map { Data(bytes: $0, count: length) } ?? Data()
            return .success(
                Response(status: tv_curl_transfer_status(pointer), headers: HTTPTransport.headerFields(headerBytes), body: body))
        }
    }

    /// The fields of one response's header block (the status line and any malformed line skipped).
    static func headerFields(_ block: Data) -> [(name: String, value: String)] {
        let text = String(decoding: block, as: UTF8.self)
        return text.split(omittingEmptySubsequences: true, whereSeparator: { $0 == "\r\n" || $0 == "\n" || $0 == "\r" })
            .compactMap { line in
                guard !line.hasPrefix("HTTP/"), let colon = line.firstIndex(of: ":") else { return nil }
                let name = line[..<colon].trimmingWhitespace()
                let value = line[line.index(after: colon)...].trimmingWhitespace()
                return name.isEmpty ? nil : (name, value)
            }
    }
}
