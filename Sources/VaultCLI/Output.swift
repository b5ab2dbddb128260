#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import Foundation
import TokenVault

internal import TokenVaultSystem

/// Where `vault` writes: results to stdout, messages to stderr. Never a secret in a message.
///
/// Every write is checked: a stdout or stderr that cannot take the output (a full disk as with
/// `> /dev/full`, a closed descriptor as with `2>&-`, a reader that went away) throws
/// ``OutputFailure``, which `vault` turns into exit code 74 (EX_IOERR), never a trap.
enum Output {
    static func error(_ message: String) throws {
        try write("vault: \(message)\n", to: .standardError)
    }

    static func warning(_ message: String) throws {
        try write("vault: warning: \(message)\n", to: .standardError)
    }

    static func note(_ message: String) throws {
        try write("\(message)\n", to: .standardError)
    }

    /// Writes `object` as pretty JSON with sorted keys to stdout.
    static func json(_ object: Any) throws {
        let data = try JSONSerialization.data(
            withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        try write(data + Data("\n".utf8), to: .standardOutput)
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
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded()))
    }

    /// Text columns padded to the widest cell.
    static func table(_ rows: [[String]]) -> String {
        guard let columns = rows.map(\.count).max() else { return "" }
        let widths = (0..<columns).map { column in rows.map { column < $0.count ? $0[column].count : 0 }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }.joined(separator: "\n")
    }
}

/// Stdout or stderr could not be written: exit code 74 (EX_IOERR).
struct OutputFailure: Error, CustomStringConvertible {
    enum Stream: String {
        case standardOutput = "standard output"
        case standardError = "standard error"

        var descriptor: Int32 { self == .standardOutput ? STDOUT_FILENO : STDERR_FILENO }
    }

    let stream: Stream
    let errno: Int32

    var description: String { "Could not write to \(stream.rawValue): \(Errno.message(errno))." }
}
#endif
