// Owns: reusable secure scratch memory for plaintext, wiped after every use.
internal import CSodium

/// A growable scratch buffer in `sodium_malloc` memory, for plaintext that exists only briefly:
/// records being built before sealing and records just opened.
///
/// It is not `Sendable`: each owner uses it under its own lock. It is wiped after every use by
/// ``withBytes(count:_:)`` and again when freed.
final class SecureBuffer {
    private var pointer: UnsafeMutableRawPointer?
    private(set) var capacity: Int = 0

    init(capacity: Int = 4096) throws {
        try Sodium.ensureInitialized()
        try reserve(capacity)
    }

    deinit {
        if let pointer { sodium_free(pointer) }
    }

    private func reserve(_ count: Int) throws {
        guard count > capacity else { return }
        let newCapacity = max(count, capacity * 2)
        guard let memory = sodium_malloc(newCapacity) else {
            throw VaultError(.io, "Could not allocate \(newCapacity) bytes of secure memory.")
        }
        if let pointer { sodium_free(pointer) }
        pointer = memory
        capacity = newCapacity
    }

    /// Lends `count` bytes of secure memory to `body`, then wipes them.
    func withBytes<Result>(count: Int, _ body: (UnsafeMutableRawBufferPointer) throws -> Result) throws -> Result {
        try reserve(max(count, 1))
        let buffer = UnsafeMutableRawBufferPointer(start: pointer, count: count)
        defer { sodium_memzero(pointer!, count) }
        return try body(buffer)
    }
}

extension SecretBytes {
    /// Copies bytes that are already in secure memory into a new ``SecretBytes``.
    convenience init(copyingSecure bytes: UnsafeRawBufferPointer) throws {
        try self.init(count: bytes.count) { buffer in
            if bytes.count > 0 { buffer.copyMemory(from: bytes) }
        }
    }
}
