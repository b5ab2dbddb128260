// Owns: what sslmode=verify-full checks of the server's certificate beyond its chain: the host
// name of the URL against the certificate's names, by libpq's rules (issue 34, point 1).
#if Postgres  // built with the package trait Postgres (postgres-nio); see Package.swift
import Foundation
import TokenVault
internal import TokenVaultSystem

/// The names a server certificate gives itself: its subject alternative names of DNS and IP
/// type, in the certificate's order, and the first common name of its subject. Read from the
/// DER of a certificate whose chain BoringSSL has already verified.
struct ServerCertificateNames: Sendable, Equatable {
    enum AlternativeName: Sendable, Equatable {
        case dns([UInt8])
        /// 4 or 16 bytes in network order (another length is refused when checked, as libpq does).
        case ip([UInt8])
    }

    var alternativeNames: [AlternativeName]
    /// The raw bytes of the subject's first CN (libpq compares them as they are).
    var commonName: [UInt8]?

    init(alternativeNames: [AlternativeName], commonName: [UInt8]?) {
        self.alternativeNames = alternativeNames
        self.commonName = commonName
    }

    struct Malformed: Error, CustomStringConvertible {
        var description: String { "the server certificate could not be read for its names" }
    }

    /// Reads the names from an X.509 certificate's DER (RFC 5280, section 4.1).
    init(der: [UInt8]) throws(Malformed) {
        var outer = DERReader(der)
        let certificate = try outer.read(expecting: 0x30)
        var certificateParts = outer.children(of: certificate)
        let tbs = try certificateParts.read(expecting: 0x30)
        var fields = outer.children(of: tbs)
        var field = try fields.read()
        if field.tag == 0xA0 { field = try fields.read() }  // [0] version; then the serial number
        _ = try fields.read(expecting: 0x30)  // signature algorithm
        _ = try fields.read(expecting: 0x30)  // issuer
        _ = try fields.read(expecting: 0x30)  // validity
        let subject = try fields.read(expecting: 0x30)
        _ = try fields.read(expecting: 0x30)  // subject public key info
        var names: [AlternativeName]?
        while !fields.isAtEnd {
            let element = try fields.read()
            guard element.tag == 0xA3 else { continue }  // [1], [2]: unique identifiers
            var wrapper = outer.children(of: element)
            var extensions = outer.children(of: try wrapper.read(expecting: 0x30))
            while !extensions.isAtEnd {
                var parts = outer.children(of: try extensions.read(expecting: 0x30))
                let identifier = try parts.read(expecting: 0x06)
                var value = try parts.read()
                if value.tag == 0x01 { value = try parts.read() }  // critical
                guard value.tag == 0x04, der[identifier.content] == [0x55, 0x1D, 0x11][...] else { continue }
                // Two subjectAltName extensions: BoringSSL refuses such a certificate; so does this.
                guard names == nil else { throw Malformed() }
                var general = outer.children(of: value)
                var list = outer.children(of: try general.read(expecting: 0x30))
                var found: [AlternativeName] = []
                while !list.isAtEnd {
                    let name = try list.read()
                    switch name.tag {
                    case 0x82: found.append(.dns(Array(der[name.content])))  // [2] dNSName
                    case 0x87: found.append(.ip(Array(der[name.content])))  // [7] iPAddress
                    default: continue  // e-mail, URI, directory and other names: not host names
                    }
                }
                names = found
            }
        }
        alternativeNames = names ?? []
        commonName = try Self.firstCommonName(in: subject, of: &outer)
    }

    /// The value of the first CN (2.5.4.3) of a Name, in the order of the DER.
    private static func firstCommonName(in subject: DERReader.Element, of reader: inout DERReader) throws(Malformed) -> [UInt8]? {
        var relativeNames = reader.children(of: subject)
        while !relativeNames.isAtEnd {
            var attributes = reader.children(of: try relativeNames.read(expecting: 0x31))
            while !attributes.isAtEnd {
                var pair = reader.children(of: try attributes.read(expecting: 0x30))
                let type = try pair.read(expecting: 0x06)
                let value = try pair.read()
                if reader.bytes[type.content] == [0x55, 0x04, 0x03][...] { return Array(reader.bytes[value.content]) }
            }
        }
        return nil
    }
}

/// A minimal reader of DER elements (tag, definite length, content), enough for the fields above.
struct DERReader {
    struct Element {
        let tag: UInt8
        let content: Range<Int>
    }

    let bytes: [UInt8]
    private var index: Int
    private let end: Int

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        index = 0
        end = bytes.count
    }

    private init(_ bytes: [UInt8], _ range: Range<Int>) {
        self.bytes = bytes
        index = range.lowerBound
        end = range.upperBound
    }

    var isAtEnd: Bool { index >= end }

    func children(of element: Element) -> DERReader { DERReader(bytes, element.content) }

    mutating func read(expecting tag: UInt8) throws(ServerCertificateNames.Malformed) -> Element {
        let element = try read()
        guard element.tag == tag else { throw ServerCertificateNames.Malformed() }
        return element
    }

    mutating func read() throws(ServerCertificateNames.Malformed) -> Element {
        guard end - index >= 2 else { throw ServerCertificateNames.Malformed() }
        let tag = bytes[index]
        // High tag numbers appear nowhere in what is read here.
        guard tag & 0x1F != 0x1F else { throw ServerCertificateNames.Malformed() }
        let first = bytes[index + 1]
        index += 2
        var length = 0
        if first < 0x80 {
            length = Int(first)
        } else {
            let count = Int(first & 0x7F)
            guard (1...4).contains(count), end - index >= count else { throw ServerCertificateNames.Malformed() }
            for _ in 0..<count {
                length = length << 8 | Int(bytes[index])
                index += 1
            }
        }
        guard length <= end - index else { throw ServerCertificateNames.Malformed() }
        defer { index += length }
        return Element(tag: tag, content: index..<(index + length))
    }
}

/// libpq's host name check for `sslmode=verify-full` (PostgreSQL 14 and later,
/// `pq_verify_peer_name_matches_certificate`), rule for rule:
///
/// - The host is the URL's, as written; an IP address (`inet_aton`, or an IPv6 address) is
///   matched against the iPAddress entries only, byte for byte; a name against the dNSName
///   entries (and the CN), never against the address it resolves to.
/// - A dNSName or CN matches a name equal to it, ignoring ASCII case, or, when it starts with
///   `*.`, a name with exactly one more label on the left (`*.example.com` matches
///   `db.example.com`, not `example.com` nor `a.db.example.com`).
/// - The CN is consulted only when no subject alternative name of the host's own type (DNS for
///   a name, IP for an address) is present, and no alternative name matched.
/// - A name holding a NUL byte, or an iPAddress entry of a length other than 4 or 16, ends the
///   check with a refusal.
enum ServerNameCheck {
    /// `nil` when `names` are valid for `host`; otherwise why not, in libpq's words.
    static func refusal(host: String, names: ServerCertificateNames) -> String? {
        guard !host.isEmpty else { return "a host name must be given for a verified TLS connection" }
        let hostIsAddress = ipv4(host) != nil || ipv6(host) != nil
        var checkCommonName = true
        var examined = 0
        var firstName: String?
        var outcome = Outcome.noMatch
        for alternative in names.alternativeNames {
            switch alternative {
            case .dns(let name):
                if !hostIsAddress { checkCommonName = false }
                examined += 1
                outcome = matchName(name, host: host)
                if firstName == nil, outcome != .embeddedNull { firstName = String(decoding: name, as: UTF8.self) }
            case .ip(let address):
                if hostIsAddress { checkCommonName = false }
                examined += 1
                outcome = matchAddress(address, host: host)
                if firstName == nil, let text = addressText(address) { firstName = text }
            }
            if outcome != .noMatch {
                checkCommonName = false
                break
            }
        }
        if checkCommonName, let commonName = names.commonName {
            examined += 1
            outcome = matchName(commonName, host: host)
            if firstName == nil, outcome != .embeddedNull { firstName = String(decoding: commonName, as: UTF8.self) }
        }
        switch outcome {
        case .match:
            return nil
        case .embeddedNull:
            return "the server certificate holds a name with an embedded NUL byte"
        case .badAddressLength(let length):
            return "the server certificate holds an IP address of \(length) bytes"
        case .noMatch:
            guard let firstName, examined > 0 else { return "the server certificate names no host" }
            let others = examined > 1 ? " (and \(examined - 1) other name\(examined == 2 ? "" : "s"))" : ""
            return "the server certificate for \(quoted(firstName))\(others) does not match the host name \(quoted(host))"
        }
    }

    /// A name from the certificate (or the URL) in quotes, escaped: it reaches a terminal.
    private static func quoted(_ text: String) -> String { "\"\(CredentialKey.escaped(text))\"" }

    enum Outcome: Equatable {
        case match, noMatch, embeddedNull
        case badAddressLength(Int)
    }

    static func matchName(_ name: [UInt8], host: String) -> Outcome {
        guard !name.contains(0) else { return .embeddedNull }
        let host = Array(host.utf8)
        if equalIgnoringASCIICase(name[...], host[...]) { return .match }
        // libpq's wildcard_certificate_match: "*." then the rest, which the host must end with;
        // the part the star stands for holds no dot (but as its last character, as in libpq).
        guard name.count >= 3, name[0] == UInt8(ascii: "*"), name[1] == UInt8(ascii: "."), name.count <= host.count else {
            return .noMatch
        }
        let suffix = name[1...]
        let hostSuffix = host[(host.count - suffix.count)...]
        guard equalIgnoringASCIICase(suffix, hostSuffix) else { return .noMatch }
        let starPart = host[..<(host.count - suffix.count)]
        return starPart.dropLast().contains(UInt8(ascii: ".")) ? .noMatch : .match
    }

    static func matchAddress(_ address: [UInt8], host: String) -> Outcome {
        switch address.count {
        case 4: return ipv4(host) == address ? .match : .noMatch
        case 16: return ipv6(host) == address ? .match : .noMatch
        default: return .badAddressLength(address.count)
        }
    }

    private static func equalIgnoringASCIICase(_ a: ArraySlice<UInt8>, _ b: ArraySlice<UInt8>) -> Bool {
        a.count == b.count && zip(a, b).allSatisfy { lower($0) == lower($1) }
    }

    private static func lower(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte | 0x20 : byte
    }

    /// The host as an IPv4 address the way libpq reads one (`inet_aton`: `127.1` too).
    static func ipv4(_ host: String) -> [UInt8]? { SystemCall.ipv4Address(host) }

    static func ipv6(_ host: String) -> [UInt8]? { SystemCall.ipv6Address(host) }

    private static func addressText(_ address: [UInt8]) -> String? { SystemCall.addressText(address) }
}
#endif
