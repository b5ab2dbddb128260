// Owns: the process's environment read from `environ` in one pass over its bytes.
internal import Glibc

extension SystemCall {
    /// The environment, as `ProcessInfo.processInfo.environment` gives it: each `NAME=value`
    /// split at its first `=` (an entry without one is left out; a later entry for a name wins;
    /// bytes that are not UTF-8 are replaced, as `String(cString:)` does). Foundation finds the
    /// `=` among the string's characters and inserts into a dictionary that grows as it goes,
    /// about 9,000 instructions an entry, which a cold `vault` paid on every start; this finds
    /// it among the bytes (so an `=` followed by a combining mark still splits, where
    /// Foundation's character search passes over it) and sizes the dictionary first.
    package static func environment() -> [String: String] {
        // Glibc imports `environ` as never null; it is null after `clearenv()`.
        typealias Entries = UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
        guard let entries = unsafeBitCast(Glibc.environ, to: Entries?.self) else { return [:] }
        return environment(from: entries)
    }

    /// The dictionary of a null-terminated array of `NAME=value` C strings (``environment()``).
    package static func environment(from entries: UnsafePointer<UnsafeMutablePointer<CChar>?>) -> [String: String] {
        var count = 0
        while entries[count] != nil { count += 1 }
        var result = [String: String](minimumCapacity: count)
        for index in 0..<count {
            guard let entry = entries[index] else { break }
            let length = strlen(entry)
            entry.withMemoryRebound(to: UInt8.self, capacity: length) { bytes in
                let buffer = UnsafeBufferPointer(start: bytes, count: length)
                guard let equals = buffer.firstIndex(of: UInt8(ascii: "=")) else { return }
                let name = String(decoding: UnsafeBufferPointer(rebasing: buffer[..<equals]), as: UTF8.self)
                let value = String(decoding: UnsafeBufferPointer(rebasing: buffer[(equals + 1)...]), as: UTF8.self)
                result[name] = value
            }
        }
        return result
    }
}

extension SystemCall {
    /// This user's home directory from the user database (what `NSHomeDirectory()` gave when
    /// `HOME` is unset), or `/` when the database has no entry for the effective user.
    package static var homeDirectory: String {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwuid_r(geteuid(), &entry, &buffer, buffer.count, &result) == 0, result != nil, let directory = entry.pw_dir
        else { return "/" }
        return String(cString: directory)
    }
}
