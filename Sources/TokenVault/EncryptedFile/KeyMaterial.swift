// Owns: reading key files and passphrase files into secure memory, and their checks.
internal import TokenVaultSystem

/// Reads key files and passphrase files straight into secure memory, and turns a
/// ``VaultConfiguration/KeySource`` into what unlocks a vault.
enum KeyMaterial {
    /// What a key source yields: a ready 32-byte master key, or a passphrase still to stretch.
    enum Secret {
        case key(SecretBytes)
        case passphrase(SecretBytes)

        var kind: VaultHeader.KeyKind {
            switch self {
            case .key: .keyFile
            case .passphrase: .passphrase
            }
        }
    }

    /// The largest key or passphrase file read.
    static let maximumFileSize = 64 * 1024

    /// Loads the secret behind `source`, checking the file's permissions.
    static func load(_ source: VaultConfiguration.KeySource, allowInsecurePermissions: Bool) throws -> Secret {
        switch source {
        case .keyFile(let path):
            let raw = try readFile(path, what: "key file", allowInsecurePermissions: allowInsecurePermissions)
            return .key(try parseKey(raw, path: path))
        case .passphraseFile(let path):
            let raw = try readFile(path, what: "passphrase file", allowInsecurePermissions: allowInsecurePermissions)
            let passphrase = try raw.withUnsafeBytes { bytes in
                try SecretBytes(copyingSecure: UnsafeRawBufferPointer(rebasing: bytes[..<trimmedLength(bytes, allWhitespace: false)]))
            }
            guard passphrase.count > 0 else {
                throw VaultError(.invalidInput, "The passphrase file \(path) is empty.")
            }
            return .passphrase(passphrase)
        case .passphrase(let passphrase):
            guard passphrase.count > 0 else {
                throw VaultError(.invalidInput, "The passphrase is empty.")
            }
            return .passphrase(passphrase)
        }
    }

    /// Reads a whole key or passphrase file into secure memory. It must be a regular file owned
    /// by this user (a FIFO, even `<(…)`, is refused rather than waited on).
    static func readFile(_ path: String, what: String, allowInsecurePermissions: Bool) throws -> SecretBytes {
        // O_NONBLOCK: a FIFO is refused below instead of waiting for a writer that never comes.
        let fd = try fileCall("open", path) { try SystemCall.open(path, [.readOnly, .nonBlocking]) }
        defer { SystemCall.closeAfterUse(fd) }
        let status = try fileCall("inspect", path) { try SystemCall.fstat(fd) }
        guard status.isRegularFile else {
            throw VaultError(
                .invalidInput, "The \(what) \(path) is not a regular file (it is a FIFO, a device or a directory); give the path of a file.")
        }
        let grantedBySystemd = isSystemdGrant(path, status, fd: fd)
        guard status.isOwnedByCaller || grantedBySystemd else {
            throw VaultError(
                .insecurePermissions,
                "The \(what) \(path) belongs to another user (uid \(status.owner)); it must be owned by the user who opens the vault. Nothing was read."
            )
        }
        if status.groupOrOtherBits != 0 && !allowInsecurePermissions && !grantedBySystemd {
            throw VaultError(
                .insecurePermissions,
                "The \(what) \(path) can be read or written by group or others (mode \(octal(status.permissionBits))). Run `chmod 600 \(path)`, or accept it explicitly: --allow-insecure-permissions or TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS=1 for the vault command, allowInsecurePermissions in the library."
            )
        }
        guard status.size <= Int64(maximumFileSize) else {
            throw VaultError(.invalidInput, "The \(what) \(path) is larger than \(maximumFileSize / 1024) KiB; it is not a \(what).")
        }
        let scratch = try SecureBuffer(capacity: maximumFileSize + 1)
        return try scratch.withBytes(count: maximumFileSize + 1) { buffer in
            var total = 0
            while total < buffer.count {
                let n = try fileCall("read", path) {
                    try SystemCall.read(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[total...]))
                }
                if n == 0 { break }
                total += n
            }
            guard total <= maximumFileSize else {
                throw VaultError(.invalidInput, "The \(what) \(path) is larger than \(maximumFileSize / 1024) KiB; it is not a \(what).")
            }
            return try SecretBytes(copyingSecure: UnsafeRawBufferPointer(rebasing: buffer[..<total]))
        }
    }

    /// The fewest characters a passphrase for a new vault (or a rekey) may have. Existing vaults
    /// with shorter passphrases still open.
    static let minimumPassphraseLength = 8

    /// Refuses a passphrase shorter than ``minimumPassphraseLength`` characters (Unicode scalars
    /// of its UTF-8, counted without decoding it out of secure memory). A key passes.
    /// `rekeying` says it in the words of a rekey, which changes nothing when it refuses.
    static func checkNewPassphrase(_ secret: Secret, rekeying: Bool = false) throws {
        guard case .passphrase(let passphrase) = secret else { return }
        let characters = passphrase.withUnsafeBytes { bytes in bytes.reduce(0) { $0 + ($1 & 0xC0 == 0x80 ? 0 : 1) } }
        guard characters >= minimumPassphraseLength else {
            throw VaultError(
                .invalidInput,
                rekeying
                    ? "A new passphrase must be at least \(minimumPassphraseLength) characters long; this one is shorter. Nothing was changed."
                    : "A passphrase for a new vault must be at least \(minimumPassphraseLength) characters long; this one is shorter. Nothing was created."
            )
        }
    }

    /// Whether `path` is a credential that systemd passed a service running as another user than
    /// the service manager's: a file directly in `$CREDENTIALS_DIRECTORY`, owned by root, read-only,
    /// readable by no one but its owner and, through an access-control list, this user. systemd
    /// (exec-credential.c, write_credential) makes each credential file `0400` and, for a service
    /// with `User=` or `DynamicUser=`, grants that user read access with an ACL entry, which shows
    /// as the group read bit (the ACL mask): so the file is neither this user's nor `0600`, and is
    /// as private as a credential gets. (Where the file system has no ACLs, systemd gives the file
    /// to the service's user instead, and the ordinary checks pass.)
    ///
    /// Held to exactly that shape (issue 34): the path itself is the file (no symbolic link, which
    /// systemd never makes there); its group is root's; the group read bit is the mask of an ACL
    /// whose only named user is this one, with no group and no other access (a plain `0440` file
    /// readable by a shared group is refused); and the directory is a directory owned by root or
    /// this user that no group or other can write (systemd makes it `0500`/`0550`).
    static func isSystemdGrant(_ path: String, _ status: SystemCall.FileStatus, fd: Int32) -> Bool {
        guard status.owner == 0, status.group == 0, !status.isOwnedByCaller, status.permissionBits & ~UInt32(0o440) == 0,
            VaultConfiguration.isInSystemdCredentialsDirectory(path)
        else { return false }
        // The name is the file that was opened, not a link to it.
        guard let named = try? SystemCall.lstat(path), !named.isSymbolicLink,
            named.device == status.device, named.inode == status.inode
        else { return false }
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        guard let parent = try? SystemCall.lstat(directory), parent.isDirectory,
            parent.owner == 0 || parent.isOwnedByCaller, parent.permissionBits & 0o022 == 0
        else { return false }
        // Group bits set: they must be an ACL's mask, granting this user alone.
        guard status.permissionBits & 0o040 != 0 else { return true }
        return aclGrantsOnlyCaller(fd)
    }

    /// Whether the file's `system.posix_acl_access` names this user as its only user, and gives
    /// its group, named groups and others no read access. `false` when there is no ACL.
    private static func aclGrantsOnlyCaller(_ fd: Int32) -> Bool {
        guard let buffer = SystemCall.extendedAttribute(fd, "system.posix_acl_access", maximumLength: 1024) else { return false }
        let length = buffer.count
        // Version 2, then entries of (tag u16, permissions u16, id u32), little-endian.
        guard length >= 4, (length - 4) % 8 == 0 else { return false }
        func u16(_ at: Int) -> UInt16 { UInt16(buffer[at]) | UInt16(buffer[at + 1]) << 8 }
        func u32(_ at: Int) -> UInt32 { UInt32(u16(at)) | UInt32(u16(at + 2)) << 16 }
        guard u32(0) == 2 else { return false }
        var grantsCaller = false
        for entry in stride(from: 4, to: length, by: 8) {
            let (tag, permissions, id) = (u16(entry), u16(entry + 2), u32(entry + 4))
            switch tag {
            case 0x01, 0x10: continue  // the owner (root), the mask
            case 0x02:  // a named user: this one only
                guard id == SystemCall.effectiveUserID else { return false }
                grantsCaller = permissions & 4 != 0
            case 0x04, 0x08, 0x20:  // the owning group, a named group, others: nothing
                guard permissions == 0 else { return false }
            default:
                return false
            }
        }
        return grantsCaller
    }

    /// Runs one system call on a key or passphrase file; a missing file is `keyFileMissing`.
    private static func fileCall<Result>(_ operation: String, _ path: String, _ body: () throws -> Result) throws -> Result {
        do {
            return try body()
        } catch let errno as Errno {
            if errno == .noSuchFileOrDirectory {
                throw VaultError(.keyFileMissing, "The key or passphrase file \(path) does not exist.", underlying: errno)
            }
            throw VaultError.system(errno, operation, path)
        }
    }

    /// The length of `bytes` without one trailing newline (`\n` or `\r\n`), or without all
    /// trailing whitespace when `allWhitespace` is set.
    static func trimmedLength(_ bytes: UnsafeRawBufferPointer, allWhitespace: Bool) -> Int {
        var end = bytes.count
        if allWhitespace {
            while end > 0, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[end - 1]) { end -= 1 }
            return end
        }
        if end > 0, bytes[end - 1] == 0x0A {
            end -= 1
            if end > 0, bytes[end - 1] == 0x0D { end -= 1 }
        }
        return end
    }

    /// A 32-byte key from a key file's content: 32 raw bytes (one trailing newline allowed),
    /// 64 hex digits, or base64 (standard or URL-safe, padded or not).
    static func parseKey(_ raw: SecretBytes, path: String) throws -> SecretBytes {
        let keyBytes = Sodium.kdfKeyBytes
        return try raw.withUnsafeBytes { bytes in
            if bytes.count == keyBytes || (bytes.count == keyBytes + 1 && bytes[keyBytes] == 0x0A) {
                return try SecretBytes(copyingSecure: UnsafeRawBufferPointer(rebasing: bytes[..<keyBytes]))
            }
            let text = UnsafeRawBufferPointer(rebasing: bytes[..<trimmedLength(bytes, allWhitespace: true)])
            if text.count > 0 {
                let scratch = try SecureBuffer(capacity: text.count)
                let key: SecretBytes? = try scratch.withBytes(count: text.count) { output in
                    if text.count == 2 * keyBytes, Sodium.hexDecode(text, into: output) == keyBytes {
                        return try SecretBytes(copyingSecure: UnsafeRawBufferPointer(rebasing: output[..<keyBytes]))
                    }
                    if (43...44).contains(text.count), Sodium.base64Decode(text, into: output) == keyBytes {
                        return try SecretBytes(copyingSecure: UnsafeRawBufferPointer(rebasing: output[..<keyBytes]))
                    }
                    return nil
                }
                if let key { return key }
            }
            throw VaultError(
                .invalidInput,
                "The key file \(path) does not hold a 32-byte key: it must hold 32 raw bytes (`head -c 32 /dev/urandom`), 64 hex digits, or the base64 of 32 bytes."
            )
        }
    }

    static func octal(_ mode: UInt32) -> String {
        "0" + String(mode, radix: 8)
    }
}
