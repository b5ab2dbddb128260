// Owns: where the log's sealed bytes are read from, by file offset: the open vault file (`pread`)
// or, in tests, an array. The index keeps only offsets, so a vault's records are not held in
// memory; a pass through the log reads ahead in chunks, a lookup reads its one record.
internal import FoundationEssentials
internal import TokenVaultSystem

/// The bytes of a vault file, read by file offset into one reusable buffer of ordinary memory.
///
/// Only sealed bytes (frames and their headers) go through it, never plaintext: a frame is
/// ciphertext, and opening it writes the plaintext into a ``SecureBuffer``.
///
/// A pointer it returns is valid until the next call. It is not `Sendable`: its owner uses it
/// under its own lock.
final class LogSource {
    private enum Storage {
        case file(fd: Int32, path: String)
        /// Test bytes that begin at file offset `base`.
        case bytes([UInt8], base: Int64)
    }

    private var storage: Storage
    private var buffer: UnsafeMutableRawPointer?
    private var capacity = 0
    /// The file offset of the buffer's first byte, and how many bytes of it hold file data.
    private var bufferStart: Int64 = 0
    private var filled = 0

    /// How much a pass through the log reads at once (256 KiB; tests make it small).
    let chunkSize: Int
    static let defaultChunkSize = 256 * 1024
    /// A buffer grown past this for a pass (or one large record) is given back afterwards.
    static let keptCapacity = 16 * 1024

    init(fd: Int32, path: String, chunkSize: Int = defaultChunkSize) {
        storage = .file(fd: fd, path: path)
        self.chunkSize = max(1, chunkSize)
    }

    /// Bytes of a log that begin at file offset `base` (just after the header, by default).
    init(bytes: [UInt8], base: Int64 = Int64(VaultHeader.length), chunkSize: Int = defaultChunkSize) {
        storage = .bytes(bytes, base: base)
        self.chunkSize = max(1, chunkSize)
    }

    deinit {
        SystemCall.freeBytes(buffer)
    }

    /// Reads from `fd` from now on (after a rewrite or a reload replaced the file).
    func switchTo(fd: Int32, path: String) {
        storage = .file(fd: fd, path: path)
        filled = 0
    }

    /// The bytes `[offset, offset + count)`, or `nil` if the source ends before `offset + count`.
    /// With `readAhead` (a pass through the log), up to a chunk more is read (bounded by `end`) so
    /// that the next calls of the pass are served from memory.
    func bytes(at offset: Int64, count: Int, end: Int64? = nil, readAhead: Bool = false) throws -> UnsafeRawBufferPointer? {
        precondition(offset >= 0 && count >= 0)
        if let end, offset + Int64(count) > end { return nil }
        // Only a pass reads from what it read ahead; a lookup always reads the file, so that a
        // record changed since is caught by its tag rather than served from an older read.
        if readAhead, filled > 0, offset >= bufferStart, offset + Int64(count) <= bufferStart + Int64(filled) {
            return UnsafeRawBufferPointer(start: buffer! + Int(offset - bufferStart), count: count)
        }
        var want = count
        if readAhead {
            want = max(count, chunkSize)
            if let end { want = Int(min(Int64(want), end - offset)) }
        }
        try reserve(want)
        filled = 0
        bufferStart = offset
        filled = try read(into: UnsafeMutableRawBufferPointer(start: buffer, count: want), at: offset)
        guard filled >= count else { return nil }
        return UnsafeRawBufferPointer(start: buffer, count: count)
    }

    /// Fills `target` from file offset `offset`, or fewer bytes at the end. Returns how many.
    private func read(into target: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        switch storage {
        case .file(let fd, let path):
            return try withErrnoMapped("read", path) { try SystemCall.pread(fd, into: target, at: offset) }
        case .bytes(let bytes, let base):
            guard offset >= base, offset - base < Int64(bytes.count) else { return 0 }
            let start = Int(offset - base)
            let count = min(target.count, bytes.count - start)
            bytes.withUnsafeBytes { source in
                target.baseAddress!.copyMemory(from: source.baseAddress! + start, byteCount: count)
            }
            return count
        }
    }

    /// Whether every byte in `[offset, end)` is zero (the zero fill of a write that did not reach
    /// the disk). Read a chunk at a time.
    func isZero(from offset: Int64, to end: Int64) throws -> Bool {
        var position = offset
        while position < end {
            let count = Int(min(Int64(chunkSize), end - position))
            guard let chunk = try bytes(at: position, count: count) else { return false }
            if !chunk.allSatisfy({ $0 == 0 }) { return false }
            position += Int64(count)
        }
        return true
    }

    /// Ends a pass: what was read ahead is forgotten (bytes past the last complete batch may be
    /// rewritten by another process), and a large buffer is given back.
    func endPass() {
        filled = 0
        if capacity > Self.keptCapacity {
            SystemCall.freeBytes(buffer)
            buffer = nil
            capacity = 0
        }
    }

    private func reserve(_ count: Int) throws {
        guard count > capacity || buffer == nil else { return }
        let newCapacity = max(count, 4096)
        SystemCall.freeBytes(buffer)
        buffer = nil
        capacity = 0
        filled = 0
        guard let memory = SystemCall.allocateBytes(newCapacity) else {
            throw VaultError(.io, "Could not allocate \(newCapacity) bytes to read the vault file.")
        }
        buffer = memory
        capacity = newCapacity
    }
}
