import FoundationEssentials

/// `application/x-www-form-urlencoded`, as the WHATWG URL standard and RFC 6749 Appendix B
/// define it: letters, digits and `*-._` stay, a space becomes `+`, every other byte of the
/// UTF-8 form is percent-encoded.
enum FormEncoding {
    private static let unreserved: Set<UInt8> = Set(Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789*-._".utf8))

    static func encode(_ value: String) -> String {
        var result = ""
        for byte in value.utf8 {
            if unreserved.contains(byte) {
                result.append(Character(Unicode.Scalar(byte)))
            } else if byte == 0x20 {
                result.append("+")
            } else {
                result += "%" + hexString([byte]).uppercased()
            }
        }
        return result
    }

    static func body(_ fields: [(String, String)]) -> Data {
        Data(fields.map { "\(encode($0.0))=\(encode($0.1))" }.joined(separator: "&").utf8)
    }

    /// The fields of a form body, in order; a field that does not decode is left out.
    static func decode(_ body: String) -> [(name: String, value: String)] {
        body.split(separator: "&").compactMap { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let decode = { (text: Substring) in String(text).replacing("+", with: " ").percentDecoded }
            guard let name = decode(parts[0]), let value = decode(parts.count > 1 ? parts[1] : "") else { return nil }
            return (name, value)
        }
    }
}
