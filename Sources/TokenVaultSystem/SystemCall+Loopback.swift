// Owns: the IPv4 TCP calls of a login's loopback redirect listener (RFC 8252 §7.3): a socket on
// 127.0.0.1, its port, its peer's address, a receive time-out. Accepting, receiving and sending
// are SystemCall+Socket.swift's, as for the agent's Unix-domain sockets.
internal import Glibc

extension SystemCall {
    /// 127.0.0.1 in host byte order.
    private static let loopbackAddress: UInt32 = 0x7f00_0001

    /// A new IPv4 stream socket, close-on-exec (blocking until ``setNonBlocking(_:_:)``).
    package static func inetStreamSocket() throws(Errno) -> Int32 {
        try retrying { socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
    }

    /// Binds `fd` to 127.0.0.1 and `port` (0: one the kernel picks). With `reuseAddress`, a port
    /// left in TIME_WAIT can be bound again at once (`SO_REUSEADDR`).
    package static func bindLoopback(_ fd: Int32, port: UInt16, reuseAddress: Bool) throws(Errno) {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = loopbackAddress.bigEndian
        if reuseAddress {
            var one: Int32 = 1
            _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw Errno.current }
    }

    /// Starts listening on the bound socket `fd`.
    package static func listen(_ fd: Int32, backlog: Int32) throws(Errno) {
        guard Glibc.listen(fd, backlog) == 0 else { throw Errno.current }
    }

    /// The IPv4 address (raw, in network byte order) and port of `fd`'s own end
    /// (`getsockname`), or of its peer's (`getpeername`); nil when it is not IPv4.
    package static func inetAddress(_ fd: Int32, peer: Bool) throws(Errno) -> (address: UInt32, port: UInt16)? {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { peer ? getpeername(fd, $0, &length) : getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw Errno.current }
        guard address.sin_family == sa_family_t(AF_INET) else { return nil }
        return (address.sin_addr.s_addr, UInt16(bigEndian: address.sin_port))
    }

    /// The raw (network-order) form of 127.0.0.1, as ``inetAddress(_:peer:)`` reports it.
    package static var loopbackAddressRaw: UInt32 { loopbackAddress.bigEndian }

    /// Makes a blocking receive on `fd` give up after `seconds` (`SO_RCVTIMEO`): it then fails
    /// with `EAGAIN`, which ``receive(_:into:)`` reports as nil.
    package static func setReceiveTimeout(_ fd: Int32, seconds: Int) {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }
}
