#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing
@testable import TokenVaultTestSupport

import Glibc

/// A service with `User=` or `DynamicUser=` gets its credentials as systemd's exec-credential.c
/// (write_credential) leaves them: owned by root (the service manager), mode 0400, with an ACL
/// entry that lets the service's user read them, which `stat` shows as mode 0440 (the ACL mask in
/// the group bits). `vault`, run as that user, must take such a key; the ordinary rules (owned by
/// the caller, 0600 or tighter) still hold for every other key file. Needs root, to lay the files
/// out as systemd does and to run `vault` as another user (setpriv).
@Suite(.enabled(if: getuid() == 0, "laying out a credential as systemd does needs root"))
struct SystemdServiceUserTests {
    static let serviceUser: UInt32 = 65534  // nobody, as a DynamicUser= service runs under a uid of its own

    /// `system.posix_acl_access` granting `uid` read access, as systemd's fd_add_uid_acl_permission
    /// does: user::r--, user:uid:r--, group::---, mask::r--, other::---.
    static func grantRead(_ path: String, to uid: UInt32) -> Bool {
        var acl = Data()
        func append<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.littleEndian) { acl.append(contentsOf: $0) } }
        append(UInt32(2))
        for (tag, permission, id) in [(UInt16(0x01), UInt16(4), UInt32.max), (0x02, 4, uid), (0x04, 0, .max), (0x10, 4, .max), (0x20, 0, .max)] {
            append(tag)
            append(permission)
            append(id)
        }
        // setxattr(2) from libc; Swift's Glibc module leaves <sys/xattr.h> out.
        typealias SetXattr = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeRawPointer?, Int, Int32) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "setxattr") else { return false }
        let setxattr = unsafeBitCast(symbol, to: SetXattr.self)
        return acl.withUnsafeBytes { setxattr(path, "system.posix_acl_access", $0.baseAddress, $0.count, 0) } == 0
    }

    /// Runs `vault` as the service user, with only the environment a unit would give it.
    static func vaultAsService(_ vault: String, _ arguments: [String], environment: [String: String], stdin: String = "") throws -> (status: Int32, stdout: String, stderr: String) {
        let result = try ChildProcess.run(
            "/usr/bin/setpriv", ["--reuid=\(serviceUser)", "--regid=\(serviceUser)", "--clear-groups", "--", vault] + arguments,
            environment: environment.merging(["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"]) { $1 }, stdin: Data(stdin.utf8))
        return (result.status, result.stdoutText, result.stderr)
    }

    @Test func aKeyGrantedByACLAsSystemdDoesOpensTheVaultAndOthersAreStillRefused() throws {
        // Directly under /tmp, so that the service user can reach it (a test run's own scratch
        // directory is private to root); traversable, as /run/credentials and /var/lib are.
        var template = Array("/tmp/tokenvault-service-test.XXXXXX".utf8CString)
        let made = try #require(template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) })
        let root = String(cString: made)
        defer { try? FileManager.default.removeItem(atPath: root) }
        #expect(chmod(root, 0o711) == 0)
        let vault = root + "/vault"
        try FileManager.default.copyItem(atPath: try Products.executable("vault"), toPath: vault)
        #expect(chmod(vault, 0o755) == 0)
        let state = root + "/state"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        #expect(chown(state, Self.serviceUser, Self.serviceUser) == 0)
        let credentials = root + "/credentials"
        try FileManager.default.createDirectory(atPath: credentials, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o711])
        let key = credentials + "/token-vault.key"
        let hex = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        #expect(FileManager.default.createFile(atPath: key, contents: Data(hex.utf8), attributes: [.posixPermissions: 0o400]))
        try #require(Self.grantRead(key, to: Self.serviceUser), "setxattr system.posix_acl_access: \(String(cString: strerror(errno)))")
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: key)[.posixPermissions] as? Int)
        #expect(mode == 0o440, "the ACL mask shows as the group read bit: \(String(mode, radix: 8))")

        let environment = ["CREDENTIALS_DIRECTORY": credentials, "TOKEN_VAULT_BACKEND": "file", "TOKEN_VAULT_FILE": state + "/tokens.vault"]
        let token = "gho_fakeServiceUser\(UInt32.random(in: 1000...9999))"
        let set = try Self.vaultAsService(vault, ["set", "api"], environment: environment, stdin: token + "\n")
        #expect(set.status == 0, "\(set)")
        let get = try Self.vaultAsService(vault, ["get", "api"], environment: environment)
        #expect(get.status == 0 && get.stdout == token + "\n", "\(get)")
        let status = try Self.vaultAsService(vault, ["status"], environment: environment)
        #expect(status.stdout.contains("systemd credential token-vault.key"), "\(status)")

        // The same file named outside $CREDENTIALS_DIRECTORY is another user's file: refused.
        var elsewhere = environment
        elsewhere["CREDENTIALS_DIRECTORY"] = nil
        elsewhere["TOKEN_VAULT_KEY_FILE"] = key
        let outside = try Self.vaultAsService(vault, ["get", "api"], environment: elsewhere)
        #expect(outside.status == 1 && outside.stderr.contains("belongs to another user"), "\(outside)")
        // A credential that others can read too is not what systemd makes: refused.
        #expect(chmod(key, 0o444) == 0)
        let loose = try Self.vaultAsService(vault, ["get", "api"], environment: environment)
        #expect(loose.status == 1 && !loose.stdout.contains(token), "\(loose)")
        for result in [set, get, status, outside, loose] {
            #expect(!result.stderr.contains(token) && !result.stderr.contains(hex))
        }
    }

    /// Issue 34, point 8: the exception accepted a symbolic link to a root-owned key, a `0440` key
    /// that a shared group could read, and a credentials directory anyone could write; a second
    /// user read such a key. Each is refused now, while the shape systemd makes still opens.
    @Test func theExceptionHoldsOnlyTheShapeSystemdMakes() throws {
        var template = Array("/tmp/tokenvault-service-shape.XXXXXX".utf8CString)
        let made = try #require(template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) })
        let root = String(cString: made)
        defer { try? FileManager.default.removeItem(atPath: root) }
        #expect(chmod(root, 0o711) == 0)
        let vault = root + "/vault"
        try FileManager.default.copyItem(atPath: try Products.executable("vault"), toPath: vault)
        #expect(chmod(vault, 0o755) == 0)
        let state = root + "/state"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        #expect(chown(state, Self.serviceUser, Self.serviceUser) == 0)
        let hex = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()

        /// A credentials directory with the key laid out by `layout`; the environment that names it.
        func credentials(_ name: String, mode: mode_t = 0o711, layout: (String) throws -> Void) throws -> [String: String] {
            let directory = "\(root)/\(name)"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
            #expect(chmod(directory, mode) == 0)
            try layout(directory + "/token-vault.key")
            return ["CREDENTIALS_DIRECTORY": directory, "TOKEN_VAULT_BACKEND": "file", "TOKEN_VAULT_FILE": state + "/tokens.vault"]
        }
        func systemdKey(_ path: String) throws {
            #expect(FileManager.default.createFile(atPath: path, contents: Data(hex.utf8), attributes: [.posixPermissions: 0o400]))
            try #require(Self.grantRead(path, to: Self.serviceUser), "setxattr: \(String(cString: strerror(errno)))")
        }

        // What systemd makes opens (and creates the vault the others try to read).
        let good = try credentials("good", layout: systemdKey)
        let token = "gho_fakeShape\(UInt32.random(in: 1000...9999))"
        let set = try Self.vaultAsService(vault, ["set", "api"], environment: good, stdin: token + "\n")
        #expect(set.status == 0, "\(set)")

        // A symbolic link to a key in systemd's shape kept elsewhere.
        let elsewhere = root + "/keys"
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o711])
        try systemdKey(elsewhere + "/real.key")
        let linked = try credentials("linked") { path in
            try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: elsewhere + "/real.key")
        }
        // A root-owned 0440 key readable through its group (nogroup, the service's), no ACL.
        let shared = try credentials("shared") { path in
            #expect(FileManager.default.createFile(atPath: path, contents: Data(hex.utf8), attributes: [.posixPermissions: 0o440]))
            #expect(chown(path, 0, Self.serviceUser) == 0)
        }
        // systemd's shape, in a directory anyone can write (and so replace the key in).
        let writable = try credentials("writable", mode: 0o777, layout: systemdKey)

        for (label, environment) in [("symbolic link", linked), ("shared group", shared), ("world-writable directory", writable)] {
            let result = try Self.vaultAsService(vault, ["get", "api"], environment: environment)
            #expect(result.status == 1, "\(label): the key was taken: \(result)")
            #expect(result.stderr.contains("belongs to another user"), "\(label): \(result)")
            #expect(!result.stdout.contains(token) && !result.stderr.contains(hex), "\(label)")
        }
        let again = try Self.vaultAsService(vault, ["get", "api"], environment: good)
        #expect(again.status == 0 && again.stdout == token + "\n", "\(again)")
    }
}
#endif
