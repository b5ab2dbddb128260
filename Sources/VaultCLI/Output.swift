#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import FoundationEssentials
import TokenVault

internal import TokenVaultSystem

/// Where `vault` writes: results to stdout, messages to stderr. Never a secret in a message.
///
/// Every write is checked: a stdout or stderr that cannot take the output (a full disk as with
/// `> /dev/full`, a closed descriptor as with `2>&-`, a reader that went away) throws
/// ``OutputFailure``, which `vault` turns into exit code 74 (EX_IOERR), never a trap.
package enum Output {
    static func error(_ message: String) throws {
        try write("vault: \(message)\n", to: .standardError)
    }

    static func warning(_ message: String) throws {
        try write("vault: warning: \(message)\n", to: .standardError)
    }

    static func note(_ message: String) throws {
        try write("\(message)\n", to: .standardError)
    }

    /// Writes `object` (dictionaries of `String` keys, arrays, `String`, `Bool`, integers,
    /// `Double` and ``JSONNull``) as pretty JSON with sorted keys to stdout.
    static func json(_ object: Any) throws {
        try json(encoding: JSONValue(tree: object))
    }

    /// Writes an `Encodable` value as pretty JSON with sorted keys to stdout.
    static func json(encoding value: some Encodable) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try write(try encoder.encode(value) + Data("\n".utf8), to: .standardOutput)
    }

    static func line(_ text: String) throws {
        try write("\(text)\n", to: .standardOutput)
    }

    /// Writes all of `data` to `stream`, retrying interrupted and partial writes.
    static func write(_ data: Data, to stream: OutputFailure.Stream) throws {
        try data.withUnsafeBytes { bytes in try write(bytes, to: stream) }
    }

    /// Writes `text` as UTF-8, from the string's own storage: `Data(text.utf8)` would copy it,
    /// and its first use asks the runtime whether the view is contiguous bytes, a scan of every
    /// protocol conformance in the binary (about 60 µs of each `vault get`).
    static func write(_ text: String, to stream: OutputFailure.Stream) throws {
        var text = text
        try text.withUTF8 { bytes in try write(UnsafeRawBufferPointer(bytes), to: stream) }
    }

    private static func write(_ bytes: UnsafeRawBufferPointer, to stream: OutputFailure.Stream) throws {
        do {
            try SystemCall.writeAll(stream.descriptor, bytes)
        } catch {
            throw OutputFailure(stream: stream, errno: error.rawValue)
        }
    }

    /// An RFC 3339 timestamp in UTC, to the nearest second: the vault stores an expiry rounded so
    /// (OAuthToken's stored form), and the formatter alone would cut the fraction off, so that
    /// `vault set` said "expires …:46Z" of a token that `vault get` then called expired at :47.
    static func timestamp(_ date: Date) -> String {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded()).ISO8601Format()
    }

    /// Text columns padded to the widest cell.
    package static func table(_ rows: [[String]]) -> String {
        guard let columns = rows.map(\.count).max() else { return "" }
        let widths = (0..<columns).map { column in rows.map { column < $0.count ? $0[column].count : 0 }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell + String(repeating: " ", count: max(0, widths[index] - cell.count))
            }.joined(separator: "  ")
        }.joined(separator: "\n")
    }
}

/// JSON's `null` in the trees ``Output/json(_:)`` writes.
struct JSONNull {}

extension JSONValue {
    /// The tree `object` as JSON: see ``Output/json(_:)`` for what it may hold (anything else
    /// is written as its description).
    init(tree object: Any) {
        switch object {
        case let text as String: self = .string(text)
        case let flag as Bool: self = .bool(flag)
        case let number as Int: self = .number(Double(number))
        case let number as Double: self = .number(number)
        case let number as any BinaryInteger: self = .number(Double(number))
        case let value as JSONValue: self = value
        case is JSONNull: self = .null
        case let values as [Any]: self = .array(values.map(JSONValue.init(tree:)))
        case let fields as [String: Any]: self = .object(fields.mapValues(JSONValue.init(tree:)))
        default: self = .string(String(describing: object))
        }
    }
}

/// Stdout or stderr could not be written: exit code 74 (EX_IOERR).
struct OutputFailure: Error, CustomStringConvertible {
    enum Stream: String {
        case standardOutput = "standard output"
        case standardError = "standard error"

        var descriptor: Int32 { self == .standardOutput ? SystemCall.standardOutput : SystemCall.standardError }
    }

    let stream: Stream
    let errno: Int32

    var description: String { "Could not write to \(stream.rawValue): \(Errno.message(errno))." }
}
#endif
