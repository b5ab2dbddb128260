// Owns: the system agent's policy file: its format, the checks on the file itself, and the
// question "may this peer read this entry?". No socket, no vault (AgentServer asks it).
internal import Glibc  // getpwnam, getgrnam: the user and group databases
internal import TokenVaultSystem

/// Which users and groups, other than its own, a system agent serves, and which entries each
/// may read (access tokens only, as every client).
///
/// The file (`vault agent --policy FILE`) holds one grant per line; `#` starts a comment line:
///
/// ```
/// # who             service            account (default: "default"; * any)
/// user www-data     api.example.com    deploy
/// group webapps     github             *
/// uid 1002          reports.*          *
/// ```
///
/// - who: `user NAME`, `uid N`, `group NAME` or `gid N`. A group grant counts for a peer whose
///   primary or supplementary group it is (`SO_PEERCRED`, `SO_PEERGROUPS`: the groups the
///   connecting process had, not what /etc/group says now). Names are resolved when the file is
///   read: an unknown user or group is an error, never a grant to nobody.
/// - service: a name, or a prefix ending in `*` (`*` alone: every service).
/// - account: a name or `*`; when left out, `default`, as `vault get SERVICE` means.
///
/// Anything else (another first word, a fourth field, an empty `*`-less name) is refused with
/// its line number. Names with white space, or ending in `*` or starting with `#`, cannot be
/// written here. The file must be a regular file (not a symbolic link) owned by root or the
/// agent's user, writable by nobody else, and at most 64 KiB.
package struct AgentPolicy: Sendable, Equatable {
    package enum Subject: Sendable, Equatable, CustomStringConvertible {
        case uid(UInt32)
        case gid(UInt32)

        package var description: String {
            switch self {
            case .uid(let uid): "uid \(uid)"
            case .gid(let gid): "gid \(gid)"
            }
        }
    }

    /// A service name, or a prefix of one.
    package enum Pattern: Sendable, Equatable {
        case exactly(String)
        case prefix(String)

        func matches(_ value: String) -> Bool {
            switch self {
            case .exactly(let name): value == name
            case .prefix(let prefix): value.hasPrefix(prefix)
            }
        }
    }

    package struct Grant: Sendable, Equatable {
        package var subject: Subject
        package var service: Pattern
        /// nil: any account.
        package var account: String?
        /// The line of the file it came from.
        package var line: Int

        func allows(_ key: CredentialKey) -> Bool {
            service.matches(key.service) && (account.map { $0 == key.account } ?? true)
        }
    }

    package var grants: [Grant]

    /// The largest policy file read.
    package static let maximumSize = 64 * 1024

    /// Parses the text of a policy file.
    /// - Throws: ``VaultError`` `.configurationError`, naming the line, for anything it does not know.
    package init(
        text: String, source: String = "the policy",
        user: (String) -> UInt32? = AgentPolicy.userID(named:), group: (String) -> UInt32? = AgentPolicy.groupID(named:)
    ) throws {
        var grants: [Grant] = []
        for (index, raw) in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }).enumerated() {
            let number = index + 1
            let line = Self.trimmed(raw)
            if line.isEmpty || line.hasPrefix("#") { continue }
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            func refuse(_ reason: String) -> VaultError {
                VaultError(.configurationError, "\(source), line \(number): \(reason)")
            }
            guard fields.count >= 3 else { throw refuse("a grant is WHO NAME SERVICE [ACCOUNT] (for example: user www-data api.example.com deploy)") }
            guard fields.count <= 4 else { throw refuse("a grant has at most four fields: WHO NAME SERVICE [ACCOUNT]") }
            let subject: Subject
            switch fields[0] {
            case "user":
                guard let uid = user(fields[1]) else { throw refuse("there is no user \(Self.quoted(fields[1])) on this system") }
                subject = .uid(uid)
            case "group":
                guard let gid = group(fields[1]) else { throw refuse("there is no group \(Self.quoted(fields[1])) on this system") }
                subject = .gid(gid)
            case "uid", "gid":
                guard let id = UInt32(fields[1]) else { throw refuse("\(fields[0]) takes a number, not \(Self.quoted(fields[1]))") }
                subject = fields[0] == "uid" ? .uid(id) : .gid(id)
            default:
                throw refuse("unknown key \(Self.quoted(fields[0])); a grant starts with user, uid, group or gid")
            }
            let service: Pattern
            if fields[2].hasSuffix("*") {
                let prefix = String(fields[2].dropLast())
                guard !prefix.contains("*") else { throw refuse("* may only end a service name") }
                service = .prefix(prefix)
            } else {
                guard !fields[2].contains("*") else { throw refuse("* may only end a service name") }
                service = .exactly(fields[2])
            }
            var account: String? = CredentialKey.defaultAccount
            if fields.count == 4 {
                if fields[3] == "*" {
                    account = nil
                } else {
                    guard !fields[3].contains("*") else { throw refuse("an account is a name or *, not a pattern") }
                    account = fields[3]
                }
            }
            grants.append(Grant(subject: subject, service: service, account: account, line: number))
        }
        self.grants = grants
    }

    /// Reads and parses the policy file at `path`.
    /// - Throws: ``VaultError``: `.notFound` without the file; `.insecurePermissions` when it is
    ///   a symbolic link, not a regular file, owned by another user than root or the caller, or
    ///   writable by its group or others; `.configurationError` for its content.
    package static func load(path: String) throws -> AgentPolicy {
        let fd: Int32
        do {
            fd = try SystemCall.open(path, [.readOnly, .noFollow, .nonBlocking])
        } catch .noSuchFileOrDirectory {
            throw VaultError(.notFound, "There is no agent policy at \(path).")
        } catch Errno.tooManySymbolicLinks {
            throw VaultError(.insecurePermissions, "The agent policy \(path) is a symbolic link; name the file itself.")
        } catch {
            throw VaultError(.permissionDenied, "Could not open the agent policy \(path): \(error.message).")
        }
        defer { SystemCall.closeAfterUse(fd) }
        let status: SystemCall.FileStatus
        let bytes: [UInt8]
        do {
            status = try SystemCall.fstat(fd)
            guard status.isRegularFile else { throw VaultError(.insecurePermissions, "The agent policy \(path) is not a regular file.") }
            guard status.owner == 0 || status.isOwnedByCaller else {
                throw VaultError(
                    .insecurePermissions, "The agent policy \(path) belongs to uid \(status.owner); it must belong to root or to the agent's user.")
            }
            guard status.permissionBits & 0o022 == 0 else {
                throw VaultError(
                    .insecurePermissions,
                    "The agent policy \(path) is writable by its group or others (mode \(String(status.permissionBits, radix: 8))); chmod go-w it.")
            }
            guard status.size <= Int64(maximumSize) else {
                throw VaultError(.tooLarge, "The agent policy \(path) is larger than \(maximumSize) bytes.")
            }
            bytes = try SystemCall.read(fd, at: 0, count: Int(status.size))
        } catch let error as Errno {
            throw VaultError(.io, "Could not read the agent policy \(path): \(error.message).")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw VaultError(.configurationError, "The agent policy \(path) is not UTF-8 text.")
        }
        return try AgentPolicy(text: text, source: "The agent policy \(path)")
    }

    /// The grants that name a peer with `uid`, primary group `gid` and supplementary `groups`.
    package func grants(uid: UInt32, gid: UInt32, groups: [UInt32]) -> [Grant] {
        grants.filter { grant in
            switch grant.subject {
            case .uid(let granted): granted == uid
            case .gid(let granted): granted == gid || groups.contains(granted)
            }
        }
    }

    package static func userID(named name: String) -> UInt32? {
        if let entry = getpwnam(name) { return entry.pointee.pw_uid }
        return nil
    }

    package static func groupID(named name: String) -> UInt32? {
        if let entry = getgrnam(name) { return entry.pointee.gr_gid }
        return nil
    }

    private static func trimmed(_ line: Substring) -> Substring {
        var slice = line
        while let first = slice.first, first == " " || first == "\t" || first == "\r" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" || last == "\r" { slice.removeLast() }
        return slice
    }

    private static func quoted(_ value: String) -> String {
        "\"\(String(value.unicodeScalars.prefix(64).map { $0.properties.generalCategory == .control ? "?" : Character($0) }))\""
    }
}

extension [AgentPolicy.Grant] {
    /// Whether any of these grants lets its peer read `key`.
    package func allow(_ key: CredentialKey) -> Bool { contains { $0.allows(key) } }
}
