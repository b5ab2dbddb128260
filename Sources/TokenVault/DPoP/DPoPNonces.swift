// Owns: the DPoP nonces servers handed out (RFC 9449 §8, §9), kept per server in memory.
package import FoundationEssentials
internal import Synchronization

/// The latest `DPoP-Nonce` each server gave this process, so that the next proof to it carries
/// the nonce and does not need a challenge first. An authorization server's nonce and a
/// resource server's are kept apart (§8: they are independent), even on one origin.
package enum DPoPNonces {
    /// Whose nonce: the token endpoint's server, or a resource server.
    package enum Role: Sendable { case authorizationServer, resourceServer }

    private static let nonces = Mutex<[String: String]>([:])
    /// Bounded: a process that talks to very many servers forgets the oldest nonces at random.
    private static let limit = 256

    package static func nonce(for url: URL, _ role: Role) -> String? {
        guard let server = server(url, role) else { return nil }
        return nonces.withLock { $0[server] }
    }

    /// Keeps `nonce` (a `DPoP-Nonce` header's value) for `url`'s server.
    package static func remember(_ nonce: String?, for url: URL, _ role: Role) {
        guard let nonce, !nonce.isEmpty, nonce.count <= 512, let server = server(url, role) else { return }
        nonces.withLock { table in
            if table.count >= limit, table[server] == nil { table.remove(at: table.startIndex) }
            table[server] = nonce
        }
    }

    /// `as|https://host:port`.
    private static func server(_ url: URL, _ role: Role) -> String? {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else { return nil }
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        return "\(role == .authorizationServer ? "as" : "rs")|\(scheme)://\(host):\(port)"
    }
}
