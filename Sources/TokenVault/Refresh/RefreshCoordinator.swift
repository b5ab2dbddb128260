import FoundationEssentials
import Synchronization

/// Single flight per key inside one process: concurrent callers that find the same key stale
/// share one refresh, and different keys refresh in parallel.
///
/// One coordinator serves every ``Vault`` over the same store (see ``RefreshCoordinatorRegistry``).
/// A flight runs in its own task, so a caller that is cancelled does not abort a refresh that
/// may already have rotated the refresh token on the server: the flight still saves the result.
actor RefreshCoordinator {
    private struct Flight {
        let id: UInt64
        let task: Task<OAuthToken, any Error>
    }

    private var flights: [CredentialKey: Flight] = [:]
    private var nextID: UInt64 = 0

    /// Joins the flight for `key` if one is under way, or starts one that runs `operation`.
    /// Every caller of one flight gets its result: the same token, or the same error.
    func run(
        _ key: CredentialKey,
        _ operation: @escaping @Sendable () async throws -> OAuthToken
    ) async throws -> OAuthToken {
        if let flight = flights[key] {
            return try await flight.task.value
        }
        nextID += 1
        let id = nextID
        let task = Task<OAuthToken, any Error> { try await operation() }
        flights[key] = Flight(id: id, task: task)
        // Awaiting `result` does not end when this caller is cancelled, so the flight is always
        // removed here, after it has finished.
        let result = await task.result
        land(key, id: id)
        return try result.get()
    }

    /// Refresh tokens the server has rejected for good, by a hash, with the server's error. A
    /// caller that finds one of them stored is told to log in again without another request, so
    /// a dead refresh token is presented once per process, never in a loop.
    private var rejected: [Int: OAuthErrorResponse] = [:]
    private var rejectedOrder: [Int] = []
    private static let rejectedLimit = 256

    func rememberRejected(_ refreshToken: String?, _ error: OAuthErrorResponse) {
        guard let refreshToken else { return }
        let hash = refreshToken.hashValue
        if rejected.updateValue(error, forKey: hash) == nil {
            rejectedOrder.append(hash)
            if rejectedOrder.count > Self.rejectedLimit {
                rejected.removeValue(forKey: rejectedOrder.removeFirst())
            }
        }
    }

    func rejection(of refreshToken: String?) -> OAuthErrorResponse? {
        refreshToken.flatMap { rejected[$0.hashValue] }
    }

    private func land(_ key: CredentialKey, id: UInt64) {
        if flights[key]?.id == id {
            flights[key] = nil
        }
    }
}

/// Hands out the one ``RefreshCoordinator`` for a store, so that copies of a ``Vault`` and
/// vaults opened separately on the same vault file or keyring share flights.
///
/// Stores are told apart by what they store into: the vault file's path, the user's Secret
/// Service, or, for any other store, the store object itself (held weakly, so a new store at a
/// reused address never inherits an old one's flights). A store that is a value type has no
/// identity; it gets a coordinator of its own per call, and its refreshes are still serialised
/// by the cross-process lock.
final class RefreshCoordinatorRegistry: Sendable {
    static let shared = RefreshCoordinatorRegistry()

    /// `@unchecked`: `owner` is a store (every `CredentialStore` is Sendable), held weakly only
    /// to compare its identity; `AnyObject` cannot say that it is Sendable.
    private struct Entry: @unchecked Sendable {
        weak var owner: AnyObject?
        let ownedByObject: Bool
        let coordinator: RefreshCoordinator
    }

    private let entries = Mutex<[String: Entry]>([:])

    func coordinator(for identity: RefreshStoreIdentity) -> RefreshCoordinator {
        switch identity {
        case .named(let name):
            return entries.withLock { entries in
                if let entry = entries[name] { return entry.coordinator }
                let coordinator = RefreshCoordinator()
                entries[name] = Entry(owner: nil, ownedByObject: false, coordinator: coordinator)
                return coordinator
            }
        case .object(let object):
            let name = "object:\(ObjectIdentifier(object).hashValue)"
            return entries.withLock { entries in
                // Drop entries whose store is gone, so the table does not grow with short-lived stores.
                entries = entries.filter { !$0.value.ownedByObject || $0.value.owner != nil }
                if let entry = entries[name], entry.owner === object { return entry.coordinator }
                let coordinator = RefreshCoordinator()
                entries[name] = Entry(owner: object, ownedByObject: true, coordinator: coordinator)
                return coordinator
            }
        case .none:
            return RefreshCoordinator()
        }
    }
}

/// What makes two stores "the same store" for refresh coordination.
/// `@unchecked`: `.object` holds a store (every `CredentialStore` is Sendable) only to compare
/// its identity; `AnyObject` cannot say that it is Sendable.
enum RefreshStoreIdentity: @unchecked Sendable {
    /// A store named by where it lives, such as `file:/path/tokens.vault`.
    case named(String)
    /// A store that is a class or actor instance.
    case object(AnyObject)
    /// A value-type store, which has no identity.
    case none
}
