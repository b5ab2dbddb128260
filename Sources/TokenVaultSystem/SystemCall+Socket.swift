// Owns: the Unix-domain socket calls of the agent and its clients (and the loopback TCP listener
// of a login's redirect, SystemCall+Loopback.swift), in the same thin layer and with the same
// EINTR policy as the rest of SystemCall. Every socket is non-blocking and
// close-on-exec; waiting is `poll` with a deadline, so that no peer can hold a caller past it.
internal import Glibc

extension SystemCall {
    /// The credentials the kernel recorded for a socket's peer when it connected (`SO_PEERCRED`).
    package struct PeerCredentials: Sendable, Equatable {
        package var pid: Int32
        package var uid: UInt32
        package var gid: UInt32
    }

    /// `SO_PEERCRED` from `<asm-generic/socket.h>` (17 on every architecture Swift runs on Linux).
    private static let peerCredentialsOption: Int32 = 17

    private static func unixAddress(_ path: String) throws(Errno) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw Errno.nameTooLong
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    private static func streamSocket() throws(Errno) -> Int32 {
        try retrying { Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0) }
    }

    /// A non-blocking socket connected to the listening socket at `path`. A Unix-domain connect
    /// completes at once or fails (`ENOENT` no socket, `ECONNREFUSED` nobody listening, `EAGAIN`
    /// its backlog is full); it never waits.
    package static func connectUnix(_ path: String) throws(Errno) -> Int32 {
        var address = try unixAddress(path)
        let fd = try streamSocket()
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        if result != 0 {
            let code = Errno.current
            closeAfterUse(fd)
            throw code
        }
        return fd
    }

    /// A non-blocking socket listening at `path`, created with `mode` (the umask is tightened
    /// around `bind` so that the socket never exists with wider permissions).
    package static func listenUnix(_ path: String, mode: UInt32, backlog: Int32) throws(Errno) -> Int32 {
        var address = try unixAddress(path)
        let fd = try streamSocket()
        let previous = umask(mode_t(0o777 & ~mode))
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        let bindError = Errno.current
        umask(previous)
        guard bound == 0 else {
            closeAfterUse(fd)
            throw bindError
        }
        guard Glibc.listen(fd, backlog) == 0 else {
            let code = Errno.current
            closeAfterUse(fd)
            throw code
        }
        return fd
    }

    /// The next connection, non-blocking and close-on-exec, or nil when none is waiting.
    /// (`accept` and then `fcntl`, as the Glibc module does not export the GNU `accept4`: the agent
    /// starts no process, so no child can inherit the descriptor in between.)
    package static func accept(_ fd: Int32) throws(Errno) -> Int32? {
        let connection: Int32
        do {
            connection = try retrying { Glibc.accept(fd, nil, nil) }
        } catch {
            if error == .wouldBlock || error == Errno.connectionAborted { return nil }
            throw error
        }
        setCloseOnExec(connection)
        setNonBlocking(connection, true)
        return connection
    }

    /// The peer's pid, uid and gid, as the kernel recorded them at connect time.
    package static func peerCredentials(_ fd: Int32) throws(Errno) -> PeerCredentials {
        var raw: (Int32, UInt32, UInt32) = (0, 0, 0)
        var length = socklen_t(MemoryLayout.size(ofValue: raw))
        try retrying { getsockopt(fd, SOL_SOCKET, peerCredentialsOption, &raw, &length) }
        return PeerCredentials(pid: raw.0, uid: raw.1, gid: raw.2)
    }

    /// `SO_PEERGROUPS` from `<asm-generic/socket.h>` (59; Linux 4.13 and later).
    private static let peerGroupsOption: Int32 = 59

    /// The supplementary groups the kernel recorded for a socket's peer when it connected
    /// (`SO_PEERGROUPS`): what the connecting process had, not what /etc/group says now.
    package static func peerGroups(_ fd: Int32) throws(Errno) -> [UInt32] {
        var groups = [UInt32](repeating: 0, count: 64)
        while true {
            var length = socklen_t(groups.count * MemoryLayout<UInt32>.size)
            let result = groups.withUnsafeMutableBytes { getsockopt(fd, SOL_SOCKET, peerGroupsOption, $0.baseAddress, &length) }
            if result == 0 { return Array(groups.prefix(Int(length) / MemoryLayout<UInt32>.size)) }
            let code = Errno.current
            if code == .interrupted { continue }
            // ERANGE: `length` now says how much room the list needs.
            guard code == .resultTooLarge, Int(length) > groups.count * MemoryLayout<UInt32>.size, length <= 65_536 * 4 else { throw code }
            groups = [UInt32](repeating: 0, count: Int(length) / MemoryLayout<UInt32>.size)
        }
    }

    /// Waits until `fd` is readable (or writable) or `milliseconds` pass; true when it is ready
    /// (an error or hang-up counts as ready: the next call reports it).
    package static func wait(_ fd: Int32, forWriting: Bool = false, milliseconds: Int32) throws(Errno) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(forWriting ? POLLOUT : POLLIN), revents: 0)
        return try retrying { Glibc.poll(&entry, 1, milliseconds) } > 0
    }

    /// One `recv` into `buffer`: how many bytes, 0 at end of stream, nil when nothing is there yet.
    package static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int? {
        do {
            return try retrying { Glibc.recv(fd, buffer.baseAddress, buffer.count, 0) }
        } catch .wouldBlock {
            return nil
        }
    }

    /// One `send` (never raising SIGPIPE): how many bytes, nil when the socket's buffer is full.
    package static func send(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(Errno) -> Int? {
        do {
            return try retrying { Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) }
        } catch .wouldBlock {
            return nil
        }
    }

    /// Changes `path`'s permission bits.
    package static func chmod(_ path: String, _ mode: UInt32) throws(Errno) {
        try retrying { Glibc.chmod(path, mode_t(mode)) }
    }

    /// Removes `path` if it is there.
    package static func unlinkIfPresent(_ path: String) throws(Errno) {
        do {
            try retrying { Glibc.unlink(path) }
        } catch .noSuchFileOrDirectory {}
    }

    /// The monotonic clock, in milliseconds: deadlines that no clock change moves.
    package static var monotonicMilliseconds: Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Int64(time.tv_sec) * 1000 + Int64(time.tv_nsec) / 1_000_000
    }
}

