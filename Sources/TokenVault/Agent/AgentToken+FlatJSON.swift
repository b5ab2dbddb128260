// Owns: reading a `token` response's payload without JSONDecoder, for the one message a cold
// `vault get` through the agent reads. Anything it does not fully understand is left to
// JSONDecoder, which stays the definition of what the payload means.

extension AgentToken {
    /// The token in `payload` when it is a flat JSON object whose values are strings, numbers,
    /// booleans and nulls, read without JSONDecoder; nil for anything else, which JSONDecoder
    /// then reads (or refuses) as before.
    ///
    /// Why: JSONDecoder's first use in a process builds its generic containers through the
    /// runtime's type lookups, about 4 % of a cold `vault get` through the agent (`perf`,
    /// release build). What it answers is what JSONDecoder answers for the same bytes:
    /// `AgentWireTests` and the FuzzAgentProtocol property compare the two, and every doubt
    /// (a duplicate or unknown key, a nested value, an escape that does not make valid text, a
    /// number past what a Double holds) answers nil.
    @_spi(AgentWire) public init?(flatJSON payload: some Collection<UInt8>) {
        var reader = FlatJSONReader(Array(payload))
        guard let fields = reader.object() else { return nil }
        var accessToken: String?
        var tokenType: String?
        var expiresAt: Double??
        var scope: String??
        var fresh: Bool?
        for (key, value) in fields {
            switch (key, value) {
            case ("access_token", .string(let text)) where accessToken == nil: accessToken = text
            case ("token_type", .string(let text)) where tokenType == nil: tokenType = text
            case ("expires_at", .number(let number)) where expiresAt == nil: expiresAt = .some(number)
            case ("expires_at", .null) where expiresAt == nil: expiresAt = .some(nil)
            case ("scope", .string(let text)) where scope == nil: scope = .some(text)
            case ("scope", .null) where scope == nil: scope = .some(nil)
            case ("fresh", .bool(let flag)) where fresh == nil: fresh = flag
            default: return nil
            }
        }
        guard let accessToken, let tokenType, let fresh else { return nil }
        self.init(accessToken: accessToken, tokenType: tokenType, expiresAt: nil, scope: scope ?? nil, fresh: fresh)
        self.expiresAt = expiresAt ?? nil
    }
}

/// A reader of one flat JSON object (RFC 8259) into ``JSONValue``s, strict: no nesting (so no
/// array or object value), and nil at the first byte it does not expect.
private struct FlatJSONReader {
    private let bytes: [UInt8]
    private var index = 0

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// The object's members in order, when the input is one object and nothing else.
    mutating func object() -> [(String, JSONValue)]? {
        skipSpace()
        guard take(UInt8(ascii: "{")) else { return nil }
        var members: [(String, JSONValue)] = []
        skipSpace()
        if !take(UInt8(ascii: "}")) {
            repeat {
                skipSpace()
                guard let key = string() else { return nil }
                skipSpace()
                guard take(UInt8(ascii: ":")) else { return nil }
                skipSpace()
                guard let value = value() else { return nil }
                members.append((key, value))
                skipSpace()
            } while take(UInt8(ascii: ","))
            guard take(UInt8(ascii: "}")) else { return nil }
        }
        skipSpace()
        return index == bytes.count ? members : nil
    }

    private mutating func value() -> JSONValue? {
        guard index < bytes.count else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "\""): return string().map(JSONValue.string)
        case UInt8(ascii: "t"): return literal("true") ? .bool(true) : nil
        case UInt8(ascii: "f"): return literal("false") ? .bool(false) : nil
        case UInt8(ascii: "n"): return literal("null") ? .null : nil
        default: return number().map(JSONValue.number)
        }
    }

    /// A number as JSONEncoder writes an expiry, `-?(0|[1-9][0-9]*)(.[0-9]+)?`, as a Double;
    /// nil for an exponent (JSONDecoder's reading of those has quirks: it refuses `0e1`) and for
    /// what a Double cannot hold.
    private mutating func number() -> Double? {
        let start = index
        _ = take(UInt8(ascii: "-"))
        let integer = index
        guard digits() else { return nil }
        // No leading zero before more digits ("01"), which Double(_:) would accept.
        if bytes[integer] == UInt8(ascii: "0"), index - integer > 1 { return nil }
        if take(UInt8(ascii: ".")) {
            guard digits() else { return nil }
        }
        let text = bytes[start..<index]
        guard let number = Double(String(decoding: text, as: UTF8.self)), number.isFinite else { return nil }
        // Digits too small for a Double read as zero here.
        if number == 0, text.contains(where: { (UInt8(ascii: "1")...UInt8(ascii: "9")).contains($0) }) { return nil }
        return number
    }

    private mutating func digits() -> Bool {
        let start = index
        while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        return index > start
    }

    private func isDigit(_ byte: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }

    /// A string, its escapes resolved; nil for a control character, a bad escape, a lone
    /// surrogate or bytes that are not UTF-8.
    private mutating func string() -> String? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        var text: [UInt8] = []
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(validating: text, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { return nil }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): text.append(escape)
                case UInt8(ascii: "b"): text.append(0x08)
                case UInt8(ascii: "f"): text.append(0x0C)
                case UInt8(ascii: "n"): text.append(0x0A)
                case UInt8(ascii: "r"): text.append(0x0D)
                case UInt8(ascii: "t"): text.append(0x09)
                case UInt8(ascii: "u"):
                    guard let scalar = unicodeEscape() else { return nil }
                    UTF8.encode(scalar) { text.append($0) }
                default: return nil
                }
            case 0x00..<0x20:
                return nil
            default:
                text.append(byte)
            }
        }
        return nil
    }

    /// The scalar of a `\u` escape (the `\u` already read), a surrogate pair taken whole.
    private mutating func unicodeEscape() -> Unicode.Scalar? {
        guard let high = hex4() else { return nil }
        if (0xD800..<0xDC00).contains(high) {
            guard take(UInt8(ascii: "\\")), take(UInt8(ascii: "u")), let low = hex4(), (0xDC00..<0xE000).contains(low) else { return nil }
            return Unicode.Scalar(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
        }
        return Unicode.Scalar(high)  // nil for a lone low surrogate
    }

    private mutating func hex4() -> UInt32? {
        guard index + 4 <= bytes.count else { return nil }
        var value: UInt32 = 0
        for byte in bytes[index..<index + 4] {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt32(digit)
        }
        index += 4
        return value
    }

    private mutating func literal(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count else { return false }
        let matches = word.withUTF8Buffer { expected in bytes[index..<index + count].elementsEqual(expected) }
        if matches { index += count }
        return matches
    }

    private mutating func take(_ byte: UInt8) -> Bool {
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    private mutating func skipSpace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }
}
