// Owns: reusable secure scratch memory for plaintext, wiped after every use.

/// A growable scratch buffer in `sodium_malloc` memory, for plaintext that exists only briefly:
/// records being built before sealing and records just opened.
///
/// It is not `Sendable`: each owner uses it under its own lock. It is wiped after every use by
/// ``withBytes(count:_:)`` and again when freed.
// @unchecked: it owns a `sodium_malloc` pointer, which Swift cannot check; one caller uses it at
// a time (ScratchPool lends it out and takes it back).
final class SecureBuffer: @unchecked Sendable {  // a sodium_malloc pointer, lent to one caller at a time
    private var pointer: UnsafeMutableRawPointer?
    private(set) var capacity: Int = 0

    init(capacity: Int = 4096) throws {
        try Sodium.ensureInitialized()
        try reserve(capacity)
    }

    deinit {
        if let pointer { Sodium.secureFree(pointer) }
    }

    private func reserve(_ count: Int) throws {
        guard count > capacity else { return }
        let newCapacity = max(count, capacity * 2)
        guard let memory = Sodium.secureAllocate(newCapacity) else {
            throw VaultError(.io, "Could not allocate \(newCapacity) bytes of secure memory.")
        }
        if let pointer { Sodium.secureFree(pointer) }
        pointer = memory
        capacity = newCapacity
    }

    /// Lends `count` bytes of secure memory to `body`, then wipes them.
    func withBytes<Result>(count: Int, _ body: (UnsafeMutableRawBufferPointer) throws -> Result) throws -> Result {
        try reserve(max(count, 1))
        let buffer = UnsafeMutableRawBufferPointer(start: pointer, count: count)
        defer { Sodium.wipe(pointer!, count: count) }
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
