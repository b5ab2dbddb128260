// Owns: the few string and path operations TokenVault took from Foundation's NSString and
// CharacterSet, which FoundationEssentials (all that TokenVault and `vault` import, so that a
// cold `vault` neither loads nor initializes Foundation, CoreFoundation and ICU) does not have.
internal import TokenVaultSystem

extension Unicode.Scalar {
    /// `CharacterSet.whitespaces`: Unicode's space separators (Zs) and tab.
    var isSpaceOrTab: Bool { self == "\t" || properties.generalCategory == .spaceSeparator }

    /// `CharacterSet.whitespacesAndNewlines`: the above, line and paragraph separators, and
    /// U+000A to U+000D and U+0085.
    var isSpaceOrNewline: Bool {
        isSpaceOrTab || (0x0A...0x0D).contains(value) || value == 0x85
            || properties.generalCategory == .lineSeparator || properties.generalCategory == .paragraphSeparator
    }
}

extension StringProtocol {
    /// Without the leading and trailing scalars for which `drop` holds.
    package func trimming(_ drop: (Unicode.Scalar) -> Bool) -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !drop($0) }) else { return "" }
        let last = scalars.lastIndex(where: { !drop($0) })!
        var kept = String.UnicodeScalarView()
        kept.append(contentsOf: scalars[first...last])
        return String(kept)
    }

    /// Without leading and trailing spaces and tabs (`trimmingCharacters(in: .whitespaces)`).
    package func trimmingWhitespace() -> String { trimming(\.isSpaceOrTab) }

    /// Without leading and trailing white space and line ends (`.whitespacesAndNewlines`).
    package func trimmingWhitespaceAndNewlines() -> String { trimming(\.isSpaceOrNewline) }

    /// Whether the two are equal but for case, as header names and auth schemes compare.
    package func equalsIgnoringCase(_ other: some StringProtocol) -> Bool {
        if utf8.count == other.utf8.count, utf8.allSatisfy({ $0 < 0x80 }), other.utf8.allSatisfy({ $0 < 0x80 }) {
            return zip(utf8, other.utf8).allSatisfy { ($0 | 0x20) == ($1 | 0x20) && (($0 | 0x20) >= 0x61 && ($0 | 0x20) <= 0x7A || $0 == $1) }
        }
        return lowercased() == other.lowercased()
    }
}

/// Lowercase hexadecimal of `bytes`, two digits each (`String(format: "%02x")` joined).
package func hexString(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    out.reserveCapacity(bytes.underestimatedCount * 2)
    for byte in bytes {
        out.append(digits[Int(byte >> 4)])
        out.append(digits[Int(byte & 0xF)])
    }
    return String(decoding: out, as: UTF8.self)
}

/// `value` with one decimal ("2.5"), for durations in messages (`String(format: "%.1f")`).
package func oneDecimal(_ value: Double) -> String {
    let tenths = (value * 10).rounded()
    guard tenths.isFinite, abs(tenths) < 1e15 else { return "\(value)" }
    let whole = Int64(tenths)
    return "\(whole < 0 ? "-" : "")\(abs(whole) / 10).\(abs(whole) % 10)"
}

/// Path arithmetic on strings, as NSString did it (`/` separated; a trailing `/` ignored).
package enum PathText {
    /// The last component: `/a/b/` → `b`; `/` → `/`.
    package static func lastComponent(_ path: String) -> String {
        let trimmed = withoutTrailingSlashes(path)
        if trimmed == "/" { return "/" }
        guard let slash = trimmed.lastIndex(of: "/") else { return trimmed }
        return String(trimmed[trimmed.index(after: slash)...])
    }

    /// Without the last component: `/a/b` → `/a`; `/a` → `/`; `/` → `/`; `a` → ``.
    package static func deletingLastComponent(_ path: String) -> String {
        let trimmed = withoutTrailingSlashes(path)
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        if slash == trimmed.startIndex { return "/" }
        return withoutTrailingSlashes(String(trimmed[..<slash]))
    }

    /// `path` and `component` joined by one `/`.
    package static func appending(_ path: String, _ component: String) -> String {
        if path.isEmpty { return component }
        if component.isEmpty { return path }
        let head = withoutTrailingSlashes(path)
        let tail = component.drop { $0 == "/" }
        return head == "/" ? "/" + tail : head + "/" + tail
    }

    /// NSString's `standardizingPath` on Linux: a leading `~` expanded, `.` and empty components
    /// dropped, and symbolic links resolved component by component (`..` after a link goes up
    /// from where the link leads). A relative path stays relative, with only its `.` components
    /// dropped. What does not exist is kept as written. Unlike NSString, a link with a relative
    /// target is resolved too (NSString left such a component as it was), so that every path
    /// that reaches a vault file names the same refresh locks.
    package static func standardized(_ path: String, home: @autoclosure () -> String = SystemCall.homeDirectory) -> String {
        var path = path
        if path == "~" || path.hasPrefix("~/") { path = home() + path.dropFirst() }
        guard path.hasPrefix("/") else {
            let kept = path.split(separator: "/").filter { $0 != "." }
            return kept.isEmpty ? path : kept.joined(separator: "/")
        }
        var resolved = "/"
        var links = 0
        var pending = Array(path.split(separator: "/").map(String.init).reversed())
        while let component = pending.popLast() {
            switch component {
            case "", ".": continue
            case "..": resolved = deletingLastComponent(resolved)
            default:
                let next = appending(resolved, component)
                if links < 40, let target = try? SystemCall.linkTarget(next) {
                    links += 1
                    // The link's target is walked in its place.
                    pending.append(contentsOf: target.split(separator: "/").map(String.init).reversed())
                    if target.hasPrefix("/") { resolved = "/" }
                } else {
                    resolved = next
                }
            }
        }
        return resolved
    }

    private static func withoutTrailingSlashes(_ path: String) -> String {
        var path = Substring(path)
        while path.count > 1, path.hasSuffix("/") { path = path.dropLast() }
        return String(path)
    }
}

/// `value` in hexadecimal, zero-padded to at least `width` digits (`String(format: "%0*x")`).
package func hexDigits(_ value: some BinaryInteger, width: Int, uppercase: Bool = false) -> String {
    let digits = String(value, radix: 16, uppercase: uppercase)
    return String(repeating: "0", count: max(0, width - digits.count)) + digits
}

/// Runs `body` with `strings` as a null-terminated array of C strings, valid only during it.
func withCStrings<R>(_ strings: [String], _ body: (UnsafeMutablePointer<UnsafePointer<CChar>?>) -> R) -> R {
    let copies = strings.map { string in
        string.utf8CString.withUnsafeBufferPointer { bytes in
            let copy = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count)
            copy.initialize(from: bytes.baseAddress!, count: bytes.count)
            return copy
        }
    }
    defer { copies.forEach { $0.deallocate() } }
    var pointers: [UnsafePointer<CChar>?] = copies.map { UnsafePointer($0) } + [nil]
    return pointers.withUnsafeMutableBufferPointer { body($0.baseAddress!) }
}

extension String {
    /// `%XX` sequences decoded (`removingPercentEncoding`): nil when one is malformed or the
    /// bytes are not UTF-8.
    package var percentDecoded: String? {
        guard utf8.contains(UInt8(ascii: "%")) else { return self }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count)
        var iterator = utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(Self.hexValue), let low = iterator.next().flatMap(Self.hexValue) else { return nil }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
