// Owns: the public secure-memory byte container (sodium_malloc, wiped when freed).

/// Key material and other secrets, kept in memory that libsodium guards.
///
/// The bytes live in `sodium_malloc` memory: guard pages on both sides, locked so it is not
/// swapped out where the kernel allows it, and wiped when freed. They are reached only through
/// ``withUnsafeBytes(_:)`` and compared in constant time. `description` shows only the length.
///
/// A `SecretBytes` is immutable once built, so it is safe to share between tasks.
public final class SecretBytes: @unchecked Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {  // a sodium_malloc pointer, immutable after init
    private let pointer: UnsafeMutableRawPointer?
    /// The number of secret bytes.
    public let count: Int

    /// Copies `bytes` into secure memory. The caller remains responsible for wiping its copy.
    public convenience init(copying bytes: some Sequence<UInt8>) throws {
        let array = Array(bytes)
        try self.init(count: array.count) { buffer in
            buffer.copyBytes(from: array)
        }
    }

    /// Allocates `count` bytes of secure memory and lets `initializer` fill them.
    ///
    /// If `initializer` throws, the memory is wiped and freed and the error is passed on.
    public init(count: Int, initializer: (UnsafeMutableRawBufferPointer) throws -> Void) throws {
        try Sodium.ensureInitialized()
        precondition(count >= 0, "SecretBytes count must not be negative")
        self.count = count
        if count == 0 {
            pointer = nil
            return
        }
        guard let memory = Sodium.secureAllocate(count) else {
            throw VaultError(.io, "Could not allocate \(count) bytes of secure memory.")
        }
        Sodium.wipe(memory, count: count)
        pointer = memory
        do {
            try initializer(UnsafeMutableRawBufferPointer(start: memory, count: count))
        } catch {
            Sodium.secureFree(memory)  // sodium_free wipes before freeing
            throw error
        }
    }

    /// `count` random bytes from libsodium's CSPRNG.
    public static func random(count: Int) throws -> SecretBytes {
        try SecretBytes(count: count) { buffer in
            Sodium.fillRandom(buffer)
        }
    }

    deinit {
        if let pointer { Sodium.secureFree(pointer) }
    }

    /// Calls `body` with a read-only view of the secret. Do not let the pointer escape.
    public func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try body(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    /// Compares two secrets in constant time (for equal lengths).
    public static func == (lhs: SecretBytes, rhs: SecretBytes) -> Bool {
        guard lhs.count == rhs.count else { return false }
        guard lhs.count > 0, let left = lhs.pointer, let right = rhs.pointer else { return true }
        return Sodium.constantTimeEqual(left, right, count: lhs.count)
    }

    public var description: String { "SecretBytes(\(count) bytes, redacted)" }
    public var debugDescription: String { description }
}
