// Owns: sealed rows made in bulk, for benchmarks that fill a table with real entries by SQL.
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
public import Foundation
public import TokenVault

extension PostgresStore {
    /// One row of `tokenvault_entries`, sealed exactly as ``save(_:for:contentType:)`` would seal it.
    @_spi(Benchmarks)
    public struct SealedRow: Sendable {
        public let rowHash: Data
        public let serviceHash: Data
        public let version: Int64
        public let sealed: Data
    }

    /// Rows for `entries` at `version`, sealed with this vault's current keys and bound to their
    /// place: inserted by SQL (for instance with `unnest`), they are entries this store reads
    /// like any other. For benchmarks that need a big table fast; applications use
    /// ``saveAll(_:)``, which also refuses to replace a newer version.
    @_spi(Benchmarks)
    public func sealedRows(_ entries: [(key: CredentialKey, secret: Data)], version: Int64 = 1) throws -> [SealedRow] {
        let sealing = current
        return try entries.map { entry in
            try Self.checkSize(entry.secret, entry.key)
            let rowHash = sealing.keys.rowHash(entry.key)
            let sealed = try sealing.keys.seal(
                entry.key, secret: entry.secret,
                associatedData: Self.associatedData(vaultID: sealing.vaultID, rowHash: rowHash, version: version))
            return SealedRow(
                rowHash: Data(rowHash), serviceHash: Data(sealing.keys.serviceHash(entry.key.service)), version: version,
                sealed: Data(sealed))
        }
    }
}
#endif
