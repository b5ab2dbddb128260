// Owns: IP addresses between text and bytes (`inet_aton`, `inet_pton`, `inet_ntop`), for
// TokenVaultPostgres's check of a server certificate's IP names.
internal import Glibc

extension SystemCall {
    /// `host` as an IPv4 address the way libpq reads one (`inet_aton`: `127.1` too), in network order.
    package static func ipv4Address(_ host: String) -> [UInt8]? {
        var address = in_addr()
        guard inet_aton(host, &address) != 0 else { return nil }
        return withUnsafeBytes(of: address.s_addr) { Array($0) }
    }

    /// `host` as an IPv6 address (`inet_pton`), in network order.
    package static func ipv6Address(_ host: String) -> [UInt8]? {
        var address = in6_addr()
        guard inet_pton(AF_INET6, host, &address) == 1 else { return nil }
        return withUnsafeBytes(of: address) { Array($0) }
    }

    /// The text of a 4-byte (IPv4) or 16-byte (IPv6) address (`inet_ntop`); nil for another length.
    package static func addressText(_ address: [UInt8]) -> String? {
        let family: Int32
        switch address.count {
        case 4: family = AF_INET
        case 16: family = AF_INET6
        default: return nil
        }
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let text = address.withUnsafeBytes { bytes in inet_ntop(family, bytes.baseAddress, &buffer, socklen_t(buffer.count)) }
        guard text != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
