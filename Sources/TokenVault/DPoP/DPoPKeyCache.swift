// Owns: the DPoP keys this process loaded from entries, kept ready to sign across reads.
internal import Synchronization

/// The DPoP keys this process has loaded from its entries, kept in the form they sign in.
///
/// Every read of a DPoP-bound entry decodes its key: without this cache each read copied the
/// private key into new secure memory, took the RFC 7638 thumbprint, wrote the JOSE header and
/// built swift-crypto's key again (deriving the public point), which was most of what a DPoP
/// call cost the client beyond the signature itself (README, "Adapters and DPoP"). The agent
/// reads the entry for every proof it signs.
///
/// A kept key is found by the entry's stored thumbprint, and handed back only when the entry's
/// private key is byte for byte the kept one (compared in constant time), under the same
/// algorithm and public JWK; any other entry is loaded as before, checked as before, and kept in
/// place of the old one. The private key stays in the kept ``SecretBytes`` (secure memory, wiped
/// when freed) and in the signer's own form (BoringSSL wipes a key it frees); nothing here hands
/// either out. At most ``capacity`` keys are kept, the least recently used leaving first, and a
/// rotation or a logout in this process forgets its key at once.
enum DPoPKeyCache {
    /// The most keys kept at once (an agent serving more DPoP entries loads the rest per read).
    static let capacity = 32

    private struct Kept {
        var key: DPoPKey
        var lastUse: UInt64
        /// How many reads of an entry handed this key out (tests count an entry's reads by it).
        var reads = 1
    }

    private struct State {
        var keys: [String: Kept] = [:]
        var uses: UInt64 = 0
    }

    private static let state = Mutex(State())

    /// The kept key for an entry's stored DPoP fields, or the one `load` makes (and checks), kept
    /// from now on.
    /// - Parameter privateKey: the entry's private key bytes (the caller wipes them).
    static func key(
        thumbprint: String, algorithm: DPoPAlgorithm, publicJWK: [String: String], privateKey: [UInt8], load: () throws -> DPoPKey
    ) throws -> DPoPKey {
        let kept = state.withLock { state -> DPoPKey? in
            guard let kept = state.keys[thumbprint]?.key, kept.algorithm == algorithm, kept.publicJWK == publicJWK,
                Self.same(kept.privateKey, privateKey)
            else { return nil }
            state.uses += 1
            state.keys[thumbprint]?.lastUse = state.uses
            state.keys[thumbprint]?.reads += 1
            return kept
        }
        if let kept { return kept }
        let key = try load()
        state.withLock { state in
            state.uses += 1
            state.keys[key.thumbprint] = Kept(key: key, lastUse: state.uses)
            while state.keys.count > capacity, let oldest = state.keys.min(by: { $0.value.lastUse < $1.value.lastUse })?.key {
                state.keys[oldest] = nil
            }
        }
        return key
    }

    /// Forgets the key with `thumbprint` (a rotation, a logout): the next read loads it again.
    static func forget(_ thumbprint: String) {
        state.withLock { _ = $0.keys.removeValue(forKey: thumbprint) }
    }

    /// How many reads of entries handed out the kept key with `thumbprint`, since it was kept;
    /// 0 when it is not kept (for tests).
    static func reads(of thumbprint: String) -> Int {
        state.withLock { $0.keys[thumbprint]?.reads ?? 0 }
    }

    /// Whether a key with `thumbprint` is kept (for tests).
    static func holds(_ thumbprint: String) -> Bool {
        state.withLock { $0.keys[thumbprint] != nil }
    }

    private static func same(_ kept: SecretBytes, _ bytes: [UInt8]) -> Bool {
        guard kept.count == bytes.count, !bytes.isEmpty else { return false }
        return kept.withUnsafeBytes { left in
            bytes.withUnsafeBytes { right in Sodium.constantTimeEqual(left.baseAddress!, right.baseAddress!, count: bytes.count) }
        }
    }
}
