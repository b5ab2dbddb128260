// Owns: what `vault list` shows of each entry (kind, expiry, whether it refreshes itself), read
// the same way whether the command opens the vault or the agent that holds it open answers.
package import FoundationEssentials

/// One entry as `vault list` shows it: its key, kind, expiry and refreshability, never a secret.
package struct ListedEntry: Sendable, Equatable {
    package enum Kind: String, Sendable {
        /// A token (an OAuth token entry).
        case token
        /// An opaque secret (not a token).
        case secret
        /// An entry this release cannot read (a token in a later format version).
        case unreadable
    }

    package var key: CredentialKey
    package var kind: Kind
    package var expiresAt: Date?
    package var refresh: Refreshability?
    /// Why an ``Kind/unreadable`` entry could not be read.
    package var unreadable: VaultError?

    package init(key: CredentialKey, kind: Kind, expiresAt: Date? = nil, refresh: Refreshability? = nil, unreadable: VaultError? = nil) {
        (self.key, self.kind, self.expiresAt, self.refresh, self.unreadable) = (key, kind, expiresAt, refresh, unreadable)
    }

    package static func == (left: ListedEntry, right: ListedEntry) -> Bool {
        left.key == right.key && left.kind == right.kind && left.expiresAt == right.expiresAt && left.refresh == right.refresh
            && left.unreadable?.code == right.unreadable?.code && left.unreadable?.message == right.unreadable?.message
    }
}

extension Vault {
    /// The entries `vault list` shows, sorted by key, optionally only those of `service` and only
    /// those after `after`, of at most `limit` keys, and the key to go on after when more follow
    /// (nil at the end). An entry that is not a token is a secret; one in a format this release
    /// does not know is listed as unreadable, with its error, and does not stop the listing; one
    /// deleted meanwhile is left out.
    package func listing(service: String?, after: CredentialKey? = nil, limit: Int = .max) async throws
        -> (entries: [ListedEntry], resumeAfter: CredentialKey?)
    {
        var keys = try await keys(service: service)[...]
        if let after { keys = keys.drop { $0 <= after } }
        let examined = keys.prefix(limit)
        var entries: [ListedEntry] = []
        for key in examined {
            do {
                guard let entry = try await tokenEntry(for: key) else { continue }  // deleted meanwhile
                entries.append(ListedEntry(key: key, kind: .token, expiresAt: entry.token.expiresAt, refresh: entry.refreshability()))
            } catch let error as VaultError where error.code == .invalidInput {
                entries.append(ListedEntry(key: key, kind: .secret))
            } catch let error as VaultError where error.code == .unsupportedVersion {
                entries.append(ListedEntry(key: key, kind: .unreadable, unreadable: error))
            }
        }
        return (entries, keys.count > limit ? examined.last : nil)
    }
}

extension Refreshability {
    /// The state named `name` (``name``), or nil for a name this release does not know.
    package static func named(_ name: String) -> Refreshability? {
        [.refreshesItself, .rejected, .noRefreshToken, .noDescription, .notRefreshable].first { $0.name == name }
    }
}
