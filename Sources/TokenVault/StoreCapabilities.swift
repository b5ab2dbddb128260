// Owns: what a command can ask of a store beyond the CredentialStore seam, by capability, never
// by which backend it is.

/// A store sealed with a key of TokenVault's, which can seal every entry again under another
/// (`vault rekey`): the encrypted file and PostgreSQL. The Secret Service has no key of ours.
package protocol RekeyableStore: CredentialStore {
    /// Seals every entry again under `newSource`, all or nothing; the number of entries.
    /// - Throws: ``VaultError``; when it throws, the vault is readable with the old key as before.
    func rekeyAll(to newSource: VaultConfiguration.KeySource, kdf: EncryptedFileStore.KDFParameters?) async throws -> Int
}

/// What `vault status` shows of a registered backend (``VaultBackend``), beside what every
/// backend shows: rows for people and fields for `--json`, in one section (`database`).
package struct BackendStatus: Sendable {
    /// A value of a `--json` field.
    package enum Value: Sendable {
        case string(String)
        case int(Int)
        case bool(Bool)
        case null
    }

    /// The rows of the text output, in order: label and value.
    package var rows: [(label: String, value: String)]
    /// The fields of the section in `--json`, in order.
    package var fields: [(key: String, value: Value)]

    package init(rows: [(label: String, value: String)] = [], fields: [(key: String, value: Value)] = []) {
        self.rows = rows
        self.fields = fields
    }
}

/// A registered backend that describes where its vault is before opening it.
package protocol StatusDescribingBackend: VaultBackend {
    /// The name of the status section (`database`) and what is known without opening: where the
    /// vault is and how it is reached (never a password).
    func statusSection(for configuration: VaultConfiguration) throws -> (name: String, status: BackendStatus)
}

/// A store that reports more about itself once open (the server's version, TLS, the schema).
package protocol StatusReportingStore: CredentialStore {
    func statusReport() async throws -> BackendStatus
}

/// A store holding connections that a short-lived command closes before it exits.
package protocol ClosableStore: CredentialStore {
    func close()
}
