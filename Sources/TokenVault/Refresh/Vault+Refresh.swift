public import FoundationEssentials
internal import TokenVaultSystem
import Logging


extension Vault {
    /// Returns the token stored under `key`, refreshing it first if it expires within `leeway`
    /// seconds, so that no two tasks or processes ever refresh the same token at once.
    ///
    /// ```swift
    /// let token = try await vault.freshToken(for: key, leeway: 60) { stale in
    ///     try await myClient.refresh(stale)   // POST grant_type=refresh_token, parse the body
    /// }
    /// request.setValue("\(token.tokenType) \(token.accessToken)", forHTTPHeaderField: "Authorization")
    /// ```
    ///
    /// This is the closure form, for clients that make the request themselves; an entry saved with
    /// a ``ClientRegistration`` is refreshed by the vault itself with
    /// ``freshToken(for:leeway:timeout:client:)``. Here `refresh` is yours. It receives the stored token
    /// (with its refresh token) and returns the token built from the server's response, usually
    /// with ``OAuthToken/init(tokenResponse:receivedAt:)-(Data,_)``. TokenVault merges the two with
    /// ``OAuthToken/updated(byRefresh:)``, so a response without a new refresh token keeps the old
    /// one, and saves the result before returning it.
    ///
    /// **Single flight.** Within a process, concurrent callers for one key share a single refresh
    /// and all get its result; different keys refresh in parallel. Across processes, the refresh
    /// runs under a per-key `flock`. After taking the lock the token is read again, and if another
    /// process refreshed it in the meantime, that token is used and `refresh` is not called. The
    /// kernel releases the lock if its holder dies, so a crashed process blocks nobody. See
    /// <doc:Refreshing>.
    ///
    /// A refresh that has started is finished and saved even if the caller that started it is
    /// cancelled: abandoning it could lose a refresh token that the server has already rotated.
    ///
    /// If the server issues tokens that live less than `leeway`, the token just refreshed (by this
    /// call or by another process while this one waited) is returned rather than refreshing again.
    ///
    /// - Parameters:
    ///   - key: The entry that holds the token.
    ///   - leeway: How long, in seconds, the returned token must stay valid at least.
    ///   - timeout: How long to wait for another process's refresh of the same key to finish.
    ///   - refresh: Runs the refresh grant for the stale token and returns the response as a token.
    /// - Returns: A token valid for at least `leeway` seconds (or as long as the server allows).
    /// - Throws: ``VaultError`` with code
    ///   - `notFound` when nothing is stored under `key`;
    ///   - `reauthenticationRequired` when the server rejected the refresh with `invalid_grant`
    ///     (the OAuth error is ``VaultError/oauthError``; the verdict is stored with the entry, so
    ///     no process presents that refresh token again), or when the token has expired and holds
    ///     no usable refresh token; the user must log in again, and nothing is retried;
    ///   - `timeout` when the per-key lock stayed taken for longer than `timeout`;
    ///   - `invalidInput` when the entry is not a token.
    ///
    ///   Any other error thrown by `refresh` is passed on unchanged. When `refresh` throws, the
    ///   stored token is left as it was (apart from an `invalid_grant` verdict stored beside it).
    public func freshToken(
        for key: CredentialKey,
        leeway: TimeInterval = 60,
        timeout: Duration = .seconds(30),
        refresh: @escaping @Sendable (_ stale: OAuthToken) async throws -> OAuthToken
    ) async throws -> OAuthToken {
        try await freshToken(for: key, leeway: leeway, timeout: timeout, clock: .system, refresh: refresh)
    }

    /// The closure form with an injected clock: `clock.now` decides whether the stored token has
    /// expired, so a test can make it stale without waiting. Everything else is as in
    /// ``freshToken(for:leeway:timeout:refresh:)``.
    ///
    /// ```swift
    /// let anHourLater = VaultClock(now: { Date().addingTimeInterval(3600) }, sleep: { try await Task.sleep(for: $0) })
    /// let token = try await vault.freshToken(for: key, clock: anHourLater) { stale in try await myClient.refresh(stale) }
    /// ```
    public func freshToken(
        for key: CredentialKey,
        leeway: TimeInterval = 60,
        timeout: Duration = .seconds(30),
        clock: VaultClock,
        refresh: @escaping @Sendable (_ stale: OAuthToken) async throws -> OAuthToken
    ) async throws -> OAuthToken {
        guard let (seen, rejection) = try await tokenAndRejection(for: key) else {
            throw Self.noToken(key)
        }
        // A rejected entry's token is never handed out as fresh, however long it has left.
        if let rejection { throw Self.reauthenticationRequired(key, rejection) }
        let now = clock.now
        if !seen.isExpired(at: now(), leeway: leeway) {
            return seen
        }
        return try await flight(
            key, need: .expiring(leeway: leeway, seen: seen), timeout: timeout, now: now,
            operation: { entry in try await refresh(entry.token) })
    }

    /// What makes a flight refresh, once it holds the lock and has read the entry again.
    enum RefreshNeed: Sendable {
        /// The token expires within `leeway` (and was `seen` so before the lock).
        case expiring(leeway: TimeInterval, seen: OAuthToken)
        /// Always: an explicit refresh.
        case always
        /// Only if the stored access token is still this one, which the resource server refused.
        case stillAccessToken(String)
    }

    /// The flight itself, shared by every caller in this process for `key`: lock, read again,
    /// refresh only if still needed, save, unlock.
    func flight(
        _ key: CredentialKey,
        need: RefreshNeed,
        timeout: Duration,
        now: @escaping @Sendable () -> Date,
        operation: @escaping @Sendable (StoredEntry) async throws -> OAuthToken
    ) async throws -> OAuthToken {
        let coordination = try refreshCoordination()
        let vault = self
        return try await coordination.coordinator.run(key) {
            try await vault.refreshUnderLock(
                key, need: need, now: now, coordinator: coordination.coordinator,
                lock: coordination.lock, timeout: timeout, operation: operation)
        }
    }

    /// The stored entry under `key` with its refresh description and verdict, or nil.
    package func storedEntry(for key: CredentialKey) async throws -> StoredEntry? {
        try await storedEntry(for: key, in: store)
    }

    private func storedEntry(for key: CredentialKey, in store: any CredentialStore) async throws -> StoredEntry? {
        guard let data = try await store.load(key) else { return nil }
        do {
            return try StoredEntry(storedForm: data)
        } catch let error as VaultError where error.code == .integrityFailure {
            throw VaultError(.invalidInput, "The entry \(key) holds an opaque secret, not a token.", underlying: error)
        }
    }

    private func refreshUnderLock(
        _ key: CredentialKey,
        need: RefreshNeed,
        now: @Sendable () -> Date,
        coordinator: RefreshCoordinator,
        lock placement: RefreshLockPlacement.Lock,
        timeout: Duration,
        operation: @Sendable (StoredEntry) async throws -> OAuthToken
    ) async throws -> OAuthToken {
        // From the moment the request is about to leave until the answer is saved (committed, for
        // PostgreSQL), a termination signal is held (RefreshTermination), when the program opted in.
        let window = RefreshTermination.Window()
        defer { window.leave() }
        var lock: RefreshLock?
        switch placement {
        case .store(let shared):
            // A store shared across hosts locks for itself: the re-read and the write below then
            // run inside its lock (for PostgreSQL, one transaction holding pg_advisory_xact_lock).
            return try await shared.withRefreshLock(on: key, timeout: timeout) { locked in
                // The journal is committed apart from the lock's transaction (RefreshJournalWriting):
                // written inside it, it would vanish with the process.
                try await refreshLocked(
                    key, store: locked, need: need, now: now, coordinator: coordinator, window: window,
                    journal: locked is any RefreshJournalWriting, operation: operation)
            }
        case .files(let directory):
            lock = try await RefreshLock.acquire(path: directory.lockFilePath(for: key), timeout: timeout)
        case .none:
            break
        }
        defer { lock?.release() }
        // The journal where other processes can see the store (not a MemoryStore's process memory).
        return try await refreshLocked(
            key, store: store, need: need, now: now, coordinator: coordinator, window: window, journal: lock != nil,
            operation: operation)
    }

    /// The locked part of a flight: read the entry again, refresh only if still needed, save.
    /// `store` is the vault's store, or the view of it that a ``StoreRefreshLocking`` store
    /// gives under its lock.
    private func refreshLocked(
        _ key: CredentialKey,
        store: any CredentialStore,
        need: RefreshNeed,
        now: @Sendable () -> Date,
        coordinator: RefreshCoordinator,
        window: RefreshTermination.Window,
        journal: Bool,
        operation: @Sendable (StoredEntry) async throws -> OAuthToken
    ) async throws -> OAuthToken {
        guard let entry = try await storedEntry(for: key, in: store) else {
            throw Self.noToken(key)
        }
        let current = entry.token
        let date = now()
        // A refresh that died after its request may have reached the server: present the same
        // refresh token again at once, whatever the need, while a server's reuse interval lasts.
        let interrupted = try entry.wasInterrupted()
        if interrupted != nil {
            logger.notice("an earlier refresh was interrupted after presenting the refresh token; presenting it again now", metadata: ["key": "\(key)"])
        } else {
            switch need {
            case .expiring(let leeway, let seen):
                if !current.isExpired(at: date, leeway: leeway) {
                    logger.debug("token was refreshed by another caller while waiting", metadata: ["key": "\(key)"])
                    return current
                }
                let changed = current.accessToken != seen.accessToken || current.refreshToken != seen.refreshToken
                if changed && !current.isExpired(at: date, leeway: 0) {
                    // Another process refreshed while we waited, and the server's tokens are shorter-lived
                    // than the leeway. Refreshing again would only burn a refresh token.
                    logger.debug("using the token another caller just refreshed", metadata: ["key": "\(key)"])
                    return current
                }
            case .stillAccessToken(let failed):
                if current.accessToken != failed {
                    logger.debug("the refused access token was already replaced", metadata: ["key": "\(key)"])
                    return current
                }
            case .always:
                break
            }
        }
        if let rejection = try entry.refreshTokenRejected() {
            throw Self.reauthenticationRequired(key, rejection, interrupted: entry.rejection?.interrupted == true)
        }
        guard current.canRefresh(at: date) else {
            let why = current.refreshToken == nil ? "holds no refresh token" : "its refresh token has expired"
            throw VaultError(
                .reauthenticationRequired,
                "The token for \(key) cannot be refreshed: it \(why); log in again to get a new one.")
        }

        if let rejection = await coordinator.rejection(of: current.refreshToken) {
            throw Self.reauthenticationRequired(key, rejection)
        }

        // A DPoP-bound grant is refreshed with its key's proof: without a signer, stop before the
        // journal is written or anything is sent.
        if entry.dpop != nil, DPoPSigners.current == nil { throw DPoPSigners.missing("Refreshing \(key)") }

        logger.debug("refreshing token", metadata: ["key": "\(key)"])
        window.enter()
        if journal, let refreshToken = current.refreshToken {
            // The journal, durable before the request leaves: this refresh token is being presented.
            var presenting = entry
            presenting.presenting = RefreshPresenting(
                refreshTokenHash: try RefreshRejection.hash(refreshToken), at: Int64(date.timeIntervalSince1970.rounded()),
                atMilliseconds: Int64((date.timeIntervalSince1970 * 1000).rounded()), pid: SystemCall.processID)
            if let journaling = store as? any RefreshJournalWriting {
                // Committed now, on its own, where every host sees it (the lock's writes wait for its release).
                try await journaling.commitJournal(presenting.storedForm(), for: key)
            } else {
                try await store.save(presenting.storedForm(), for: key, contentType: .json)
            }
        }
        let response: OAuthToken
        do {
            response = try await operation(entry)
        } catch {
            if let partial = PartialTokenResponse.found(in: error) {
                throw await keepPartial(partial, of: error, entry: entry, key: key, in: store)
            }
            logger.debug("refresh failed; the stored token is unchanged", metadata: ["key": "\(key)"])
            let failure = Self.refreshFailure(error, key: key, interrupted: interrupted != nil)
            if let failure = failure as? VaultError, failure.code == .reauthenticationRequired,
                let oauthError = failure.oauthError
            {
                await coordinator.rememberRejected(current.refreshToken, oauthError)
                await storeVerdict(oauthError, on: entry, key: key, at: date, interrupted: interrupted != nil, in: store)
            }
            throw failure
        }
        let updated = current.updated(byRefresh: response)
        do {
            try await store.save(
                StoredEntry(token: updated, refresh: entry.refresh, dpop: entry.dpop).storedForm(), for: key, contentType: .json)
        } catch {
            // The server may have rotated the refresh token, and the new one is now only in memory.
            logger.error(
                "refreshed a token but could not save it; the next refresh may need a new login",
                metadata: ["key": "\(key)", "code": "\((error as? VaultError)?.code.description ?? "other")"])
            throw error
        }
        return updated
    }

    /// Saves what a refused answer still gave (the new refresh token above all: the server has
    /// spent the old one) and returns the error to throw, which names the refused fields and says
    /// what was kept. Still under the lock.
    private func keepPartial(
        _ partial: PartialTokenResponse, of error: any Error, entry: StoredEntry, key: CredentialKey, in store: any CredentialStore
    ) async -> VaultError {
        let refused = partial.refused.joined(separator: ", ")
        let kept = partial.kept(updating: entry.token)
        do {
            try await store.save(StoredEntry(token: kept, refresh: entry.refresh, dpop: entry.dpop).storedForm(), for: key, contentType: .json)
        } catch let saveError {
            logger.error(
                "a refresh answer with refused fields could not be saved; the next refresh may need a new login",
                metadata: ["key": "\(key)", "code": "\((saveError as? VaultError)?.code.description ?? "other")"])
            return VaultError(
                (saveError as? VaultError)?.code ?? .io,
                "The token endpoint's answer for \(key) had fields TokenVault refused (\(refused)), and saving the new refresh token it held failed as well: \((saveError as? VaultError)?.message ?? "\(type(of: saveError))"). Log in again if the next refresh is rejected.",
                underlying: saveError as? VaultError)
        }
        let state =
            partial.token == nil || partial.refused.contains("expires_in")
            ? "the access token counts as expired, so the next call refreshes again with the new refresh token"
            : "the entry is usable as it is"
        return VaultError(
            (error as? VaultError)?.code ?? .invalidInput,
            "The token endpoint's answer for \(key) had fields TokenVault refused (\(refused)); they were dropped. The new refresh token and everything else in the answer were saved, and \(state).",
            underlying: error as? VaultError)
    }

    /// Stores the server's rejection of the entry's refresh token with the entry, the token itself
    /// untouched, so that no process presents that refresh token again. Still under the lock.
    private func storeVerdict(
        _ oauthError: OAuthErrorResponse, on entry: StoredEntry, key: CredentialKey, at date: Date, interrupted: Bool,
        in store: any CredentialStore
    ) async {
        guard let refreshToken = entry.token.refreshToken else { return }
        do {
            var marked = entry
            marked.presenting = nil
            marked.rejection = RefreshRejection(
                error: oauthError.error, errorDescription: oauthError.errorDescription,
                refreshTokenHash: try RefreshRejection.hash(refreshToken), at: Int64(date.timeIntervalSince1970.rounded()),
                interrupted: interrupted ? true : nil)
            try await store.save(marked.storedForm(), for: key, contentType: .json)
        } catch {
            // The caller is told to log in again either way; this process also remembers it.
            logger.error(
                "could not store the server's rejection of a refresh token; another process may present it once more",
                metadata: ["key": "\(key)", "code": "\((error as? VaultError)?.code.description ?? "other")"])
        }
    }

    /// The coordinator and lock placement for this vault's store.
    private func refreshCoordination() throws -> (coordinator: RefreshCoordinator, lock: RefreshLockPlacement.Lock) {
        let placement = try store.refreshLockPlacement()
        return (RefreshCoordinatorRegistry.shared.coordinator(for: placement.identity), placement.lock)
    }

    static func noToken(_ key: CredentialKey) -> VaultError {
        VaultError(.notFound, "No token is stored under \(key); log in first.")
    }

    /// Turns a refresh closure's failure into what the caller should act on.
    private static func refreshFailure(_ error: any Error, key: CredentialKey, interrupted: Bool) -> any Error {
        let oauthError: OAuthErrorResponse?
        if let error = error as? VaultError {
            oauthError = [.tokenEndpointError, .reauthenticationRequired].contains(error.code) ? error.oauthError : nil
        } else {
            oauthError = error as? OAuthErrorResponse
        }
        guard let oauthError, oauthError.requiresReauthentication else {
            return error
        }
        return reauthenticationRequired(key, oauthError, interrupted: interrupted)
    }

    static func reauthenticationRequired(
        _ key: CredentialKey, _ oauthError: OAuthErrorResponse, interrupted: Bool = false
    ) -> VaultError {
        if oauthError.error == dpopKeyRotated {
            return VaultError(
                .reauthenticationRequired,
                "The DPoP key of \(key) was rotated, and its grant was bound to the old key; log in again (vault login … --dpop) for a new grant.",
                underlying: oauthError)
        }
        if interrupted {
            return VaultError(
                .reauthenticationRequired,
                "Interrupted refresh: log in again. A process refreshing the token for \(key) was stopped after it presented the refresh token and before it could save the server's answer, and the server refuses that refresh token now (\(oauthError.error)).",
                underlying: oauthError)
        }
        return VaultError(
            .reauthenticationRequired,
            "The server rejected the refresh token for \(key) (\(oauthError.error)); log in again to get a new one.",
            underlying: oauthError)
    }
}
