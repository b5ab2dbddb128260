// Owns: wiping a byte array in place (sodium_memzero through Sodium).

extension Array where Element == UInt8 {
    /// Overwrites every byte with zero (sodium_memzero, which the compiler cannot drop).
    package mutating func wipe() {
        withUnsafeMutableBytes { raw in
            if let base = raw.baseAddress { Sodium.wipe(base, count: raw.count) }
        }
    }
}
