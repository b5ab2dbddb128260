// Owns: the schema (created on first use, versioned) and the header row (KDF parameters, salt,
// vault id, key check, MAC).
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
import Foundation
import TokenVault
import PostgresNIO

/// The tables, version 2 (version 1 is the same but for the hashes of names, below):
///
/// ```sql
/// tokenvault_header (id = 1, schema_version, key_kind 1 key file | 2 passphrase, ops_limit,
///                    mem_limit, salt (16), vault_id (16), key_check (32), header_mac (32))
/// tokenvault_entries (row_hash (32) PRIMARY KEY, service_hash (32), version, sealed)
/// PROCEDURE tokenvault_save_v1, tokenvault_delete_v1   (a lone save or delete in one CALL)
/// ```
///
/// `key_check` is the file vault's (BLAKE2b keyed with subkey 2 of
/// `"TokenVault key check v1" ‖ salt`); `header_mac` is BLAKE2b keyed with subkey 3 of
/// `"TVPH" ‖ schema_version (u32 LE) ‖ key_kind ‖ ops_limit (u64 LE) ‖ mem_limit (u64 LE) ‖ salt ‖ vault_id ‖ key_check`.
///
/// Version 2 scopes `row_hash` and `service_hash` to the vault (its `vault_id` is hashed with the
/// name, ``RowSealingKeys``): two vaults that share a key file no longer hash a name alike, so an
/// administrator who reads both cannot link their entries. A version 1 vault keeps its unscoped
/// hashes and opens as before; `vault rekey` writes every row again and makes it version 2. The
/// version is covered by the header MAC, so it cannot be turned back without the key.
enum PostgresSchema {
    static let currentVersion: Int32 = 2
    /// The oldest header version this code opens.
    static let oldestVersion: Int32 = 1
    /// The advisory lock that serialises the creation of the schema (`"TVschema"`).
    static let creationLock: Int64 = 0x5456_7363_6865_6D61

    static let createStatements: [String] = [
        """
        CREATE TABLE IF NOT EXISTS tokenvault_header (
            id smallint PRIMARY KEY CHECK (id = 1),
            schema_version integer NOT NULL,
            key_kind smallint NOT NULL,
            ops_limit bigint NOT NULL,
            mem_limit bigint NOT NULL,
            salt bytea NOT NULL,
            vault_id bytea NOT NULL,
            key_check bytea NOT NULL,
            header_mac bytea NOT NULL)
        """,
        """
        CREATE TABLE IF NOT EXISTS tokenvault_entries (
            row_hash bytea PRIMARY KEY,
            service_hash bytea NOT NULL,
            version bigint NOT NULL,
            sealed bytea NOT NULL)
        """,
        "CREATE INDEX IF NOT EXISTS tokenvault_entries_service ON tokenvault_entries (service_hash)",
    ] + procedureStatements

    /// The procedures a lone save or delete is one round trip with (`CALL`, outside any
    /// transaction block): the write and its NOTIFY, then a `COMMIT` inside the procedure, so
    /// the CALL's reply is sent only once the write is committed and durable (a lone statement of
    /// the extended protocol replies before its commit at Sync). Part of schema version 1: they
    /// add no data and change no table, code that does not know them keeps working beside them
    /// (so a fleet can upgrade host by host), and a vault created before them gets them on its
    /// first save (``createProcedures(on:)``). A change to one gets a new name (`_v2`), never a
    /// new body under the old one.
    static let procedureStatements: [String] = [
        """
        CREATE OR REPLACE PROCEDURE tokenvault_save_v1(
            p_row_hash bytea, p_service_hash bytea, p_version bigint, p_sealed bytea, p_vault_id bytea,
            p_channel text, p_payload text, INOUT written boolean DEFAULT NULL)
        LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO tokenvault_entries (row_hash, service_hash, version, sealed)
            SELECT p_row_hash, p_service_hash, p_version, p_sealed
            FROM tokenvault_header WHERE id = 1 AND vault_id = p_vault_id
            ON CONFLICT (row_hash) DO UPDATE SET service_hash = EXCLUDED.service_hash, version = EXCLUDED.version, sealed = EXCLUDED.sealed
            WHERE tokenvault_entries.version < EXCLUDED.version;
            written := FOUND;
            IF written THEN
                PERFORM pg_notify(p_channel, p_payload);
            END IF;
            COMMIT;
        END
        $$
        """,
        """
        CREATE OR REPLACE PROCEDURE tokenvault_delete_v1(
            p_row_hash bytea, p_vault_id bytea, p_channel text, p_payload text, INOUT deleted boolean DEFAULT NULL)
        LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM tokenvault_entries WHERE row_hash = p_row_hash
            AND EXISTS (SELECT 1 FROM tokenvault_header WHERE id = 1 AND vault_id = p_vault_id);
            deleted := FOUND;
            IF deleted THEN
                PERFORM pg_notify(p_channel, p_payload);
            END IF;
            COMMIT;
        END
        $$
        """,
    ]

    /// Creates (or replaces) the procedures in a vault whose schema predates them, under the
    /// creation lock, in a transaction of its own on `connection`.
    /// - Throws: the database's error; `42501` (insufficient privilege) when the user may not
    ///   create them, and the caller then writes without them.
    static func createProcedures(on connection: PostgresConnection) async throws {
        try await PostgresSQL.transaction(on: connection) {
            try await connection.run("SELECT pg_advisory_xact_lock(\(creationLock))", logger: PostgresSQL.silent)
            for statement in procedureStatements {
                try await connection.run(PostgresQuery(unsafeSQL: statement), logger: PostgresSQL.silent)
            }
        }
    }

    struct Header: Sendable {
        var schemaVersion: Int32
        var passphrase: Bool
        var opsLimit: Int64
        var memLimit: Int64
        var salt: [UInt8]
        var vaultID: [UInt8]
        var keyCheck: [UInt8]
        var mac: [UInt8]

        func macInput() -> [UInt8] {
            var bytes = Array("TVPH".utf8)
            bytes.appendLittleEndian(UInt32(bitPattern: schemaVersion))
            bytes.append(passphrase ? 2 : 1)
            bytes.appendLittleEndian(UInt64(bitPattern: opsLimit))
            bytes.appendLittleEndian(UInt64(bitPattern: memLimit))
            return bytes + salt + vaultID + keyCheck
        }
    }

    /// Opens (or, on first use, creates) the vault: the schema, then the header row, then the keys.
    static func openVault(
        client: PostgresPool, configuration: PostgresStore.Configuration, secret: RowSealingSecret,
        options: PostgresStore.Options, logger: Logger
    ) async throws -> PostgresStore.Sealing {
        let vault = PostgresStore.vaultName(configuration)
        let header = try await PostgresStore.withDeadline(options.operationTimeout, what: "open the vault", vault: vault) {
            // A connect that fails for a reason of its own (a refused login, a certificate that
            // does not verify or names another host) fails at once, with that reason; only a
            // refused or unreachable server is tried again until the deadline.
            try await PostgresStore.retrying(what: "open the vault", vault: vault) {
                try await client.withConnection { connection in
                    try await readOrCreateHeader(on: connection, secret: secret, options: options, vault: vault)
                }
            }
        }
        return try unlock(header, secret: secret, options: options, vault: vault)
    }

    /// Reads the header row; creates the schema and a new header when there is none (and
    /// creation is allowed). Header and keys of a new vault come from `secret` and `options`.
    static func readOrCreateHeader(
        on connection: PostgresConnection, secret: RowSealingSecret, options: PostgresStore.Options, vault: String
    ) async throws -> (Header, PostgresStore.Sealing?) {
        if let header = try await readHeader(on: connection, vault: vault) { return (header, nil) }
        try await refuseRowsWithoutHeader(on: connection, vault: vault)
        guard options.createIfMissing else {
            throw VaultError(.notFound, "There is no vault in \(vault) yet (no tokenvault_header row); `vault set` creates one.")
        }
        try secret.checkNewPassphrase()
        return try await PostgresSQL.transaction(on: connection) {
            try await connection.run("SELECT pg_advisory_xact_lock(\(creationLock))", logger: PostgresSQL.silent)
            for statement in createStatements {
                try await connection.run(PostgresQuery(unsafeSQL: statement), logger: PostgresSQL.silent)
            }
            // Another host may have created it while this one waited for the lock.
            if let header = try await readHeader(on: connection, vault: vault) { return (header, nil) }
            try await refuseRowsWithoutHeader(on: connection, vault: vault)
            let (header, sealing) = try newHeader(secret: secret, kdf: options.kdf, vault: vault, version: options.newVaultSchemaVersion)
            try await insert(header, on: connection)
            return (header, sealing)
        }
    }

    /// Sealed rows with no header row are damage (the header was deleted), never an empty vault:
    /// a new header would come with a new vault id, under which every old row fails to open.
    /// - Throws: `integrityFailure` when `tokenvault_entries` holds a row.
    static func refuseRowsWithoutHeader(on connection: PostgresConnection, vault: String) async throws {
        let rows: PostgresRowSequence
        do {
            rows = try await connection.query("SELECT EXISTS (SELECT 1 FROM tokenvault_entries)", logger: PostgresSQL.silent)
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "42P01" {
            return  // undefined_table: first use
        }
        var found = false
        for try await (exists) in rows.decode(Bool.self) { found = exists }
        if found {
            throw damaged(
                vault,
                "tokenvault_entries holds sealed rows but tokenvault_header has no header row (it was deleted); without it no entry can be opened, and no new vault is made over them")
        }
    }

    /// A header and keys for a new vault (or a rekeyed one): a new salt and vault id, and the
    /// current version unless a test asks for an older one.
    static func newHeader(
        secret: RowSealingSecret, kdf: EncryptedFileStore.KDFParameters, vault: String, version: Int32 = currentVersion
    ) throws -> (Header, PostgresStore.Sealing) {
        let passphrase = secret.isPassphrase
        let salt = RowSealingKeys.randomBytes(RowSealingKeys.saltBytes)
        let vaultID = RowSealingKeys.randomBytes(16)
        let ops = passphrase ? kdf.opsLimit : 0
        let mem = passphrase ? kdf.memoryLimit : 0
        let keys = try RowSealingKeys(
            secret: secret, passphraseVault: passphrase, salt: salt, opsLimit: ops, memLimit: mem, vaultName: vault,
            hashScope: hashScope(version: version, vaultID: vaultID))
        var header = Header(
            schemaVersion: version, passphrase: passphrase, opsLimit: Int64(ops), memLimit: Int64(mem), salt: salt,
            vaultID: vaultID, keyCheck: keys.keyCheck(salt: salt), mac: [])
        header.mac = keys.headerMAC(header.macInput())
        return (header, PostgresStore.Sealing(keys: keys, vaultID: header.vaultID))
    }

    static func insert(_ header: Header, on connection: PostgresConnection) async throws {
        try await connection.run(
            """
            INSERT INTO tokenvault_header (id, schema_version, key_kind, ops_limit, mem_limit, salt, vault_id, key_check, header_mac)
            VALUES (1, \(header.schemaVersion), \(Int16(header.passphrase ? 2 : 1)), \(header.opsLimit), \(header.memLimit),
                    \(Data(header.salt)), \(Data(header.vaultID)), \(Data(header.keyCheck)), \(Data(header.mac)))
            """, logger: PostgresSQL.silent)
    }

    /// The header row, `nil` when the schema or the row does not exist yet.
    /// - Throws: `unsupportedVersion` for a newer schema; `integrityFailure` for a malformed row.
    static func readHeader(on connection: PostgresConnection, vault: String) async throws -> Header? {
        let rows: PostgresRowSequence
        do {
            rows = try await connection.query(
                """
                SELECT schema_version, key_kind, ops_limit, mem_limit, salt, vault_id, key_check, header_mac
                FROM tokenvault_header WHERE id = 1
                """, logger: PostgresSQL.silent)
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "42P01" {
            return nil  // undefined_table: first use
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "42703" {
            // A column this version does not know: a schema from another version.
            throw VaultError(
                .unsupportedVersion, "The schema of \(vault) is not one this TokenVault knows (its header has other columns). Upgrade TokenVault.",
                underlying: SendableDescription(PostgresSQL.describe(error)))
        }
        var header: Header?
        for try await (version, kind, ops, mem, salt, vaultID, keyCheck, mac) in rows.decode(
            (Int32, Int16, Int64, Int64, Data, Data, Data, Data).self)
        {
            guard version <= currentVersion else {
                throw VaultError(
                    .unsupportedVersion,
                    "\(vault) uses schema version \(version); this TokenVault knows only version \(currentVersion). Upgrade TokenVault to open it.")
            }
            guard version >= oldestVersion, kind == 1 || kind == 2, salt.count == RowSealingKeys.saltBytes, vaultID.count == 16,
                keyCheck.count == RowSealingKeys.hashBytes, mac.count == RowSealingKeys.hashBytes
            else {
                throw damaged(vault, "its header row is malformed")
            }
            header = Header(
                schemaVersion: version, passphrase: kind == 2, opsLimit: ops, memLimit: mem, salt: Array(salt), vaultID: Array(vaultID),
                keyCheck: Array(keyCheck), mac: Array(mac))
        }
        return header
    }

    /// The keys for an existing header: the key check first (a wrong key is
    /// `authenticationFailed`), then the header MAC (a right key and an altered header is `integrityFailure`).
    static func unlock(
        _ read: (Header, PostgresStore.Sealing?), secret: RowSealingSecret, options: PostgresStore.Options, vault: String
    ) throws -> PostgresStore.Sealing {
        let (header, made) = read
        if let made { return made }
        if header.passphrase {
            guard header.opsLimit >= 0, header.memLimit >= 0 else { throw damaged(vault, "its Argon2id parameters are negative") }
            guard UInt64(header.memLimit) <= options.maximumKDFMemoryLimit, UInt64(header.opsLimit) <= options.maximumKDFOpsLimit else {
                throw VaultError(
                    .invalidInput,
                    "\(vault) asks Argon2id for \(header.memLimit / 1024) KiB and \(header.opsLimit) passes, more than this process allows (\(options.maximumKDFMemoryLimit / 1024) KiB, \(options.maximumKDFOpsLimit) passes).")
            }
        } else if header.opsLimit != 0 || header.memLimit != 0 {
            throw damaged(vault, "its key parameters are invalid")
        }
        let keys = try RowSealingKeys(
            secret: secret, passphraseVault: header.passphrase, salt: header.salt, opsLimit: UInt64(header.opsLimit),
            memLimit: UInt64(header.memLimit), vaultName: vault, hashScope: hashScope(version: header.schemaVersion, vaultID: header.vaultID))
        guard RowSealingKeys.constantTimeEqual(keys.keyCheck(salt: header.salt), header.keyCheck) else {
            throw VaultError(.authenticationFailed, "The \(header.passphrase ? "passphrase" : "key") is wrong for \(vault).")
        }
        guard RowSealingKeys.constantTimeEqual(keys.headerMAC(header.macInput()), header.mac) else {
            throw damaged(vault, "its header row was altered")
        }
        return PostgresStore.Sealing(keys: keys, vaultID: header.vaultID)
    }

    /// What the hashes of names are bound to: nothing in version 1, the vault id from version 2.
    static func hashScope(version: Int32, vaultID: [UInt8]) -> [UInt8] {
        version >= 2 ? vaultID : []
    }

    static func damaged(_ vault: String, _ detail: String) -> VaultError {
        VaultError(.integrityFailure, "\(vault) is damaged or was tampered with: \(detail). Restore it from a backup.")
    }
}
#endif
