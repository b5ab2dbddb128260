// Owns: the libsodium calls of the library (init, AEAD, KDF, Argon2id, hashing, encoding).
internal import CSodium
import FoundationEssentials

/// libsodium, reached only through here (the one file that imports CSodium): initialisation,
/// secure memory, randomness, BLAKE2b, SHA-256, subkeys, Argon2id and XChaCha20-Poly1305.
package enum Sodium {
    private static let initialized: Bool = sodium_init() >= 0

    /// Initialises libsodium once per process. Throws if it cannot (no entropy source).
    static func ensureInitialized() throws {
        guard initialized else {
            throw VaultError(.io, "libsodium could not be initialised (no source of randomness).")
        }
    }

    // MARK: Sizes

    /// XChaCha20-Poly1305 IETF key, nonce and tag sizes.
    static let aeadKeyBytes = 32
    static let aeadNonceBytes = 24
    static let aeadTagBytes = 16
    /// `crypto_kdf` master and subkey size, and the 8-byte context every TokenVault subkey uses.
    static let kdfKeyBytes = 32
    static let kdfContext: [CChar] = Array("TokVault".utf8).map { CChar(bitPattern: $0) }
    /// Argon2id salt size (`crypto_pwhash_SALTBYTES`).
    static let saltBytes = 16
    /// `crypto_pwhash_ALG_ARGON2ID13`.
    static var argon2id13: Int32 { crypto_pwhash_alg_argon2id13() }
    static var opsLimitRange: ClosedRange<UInt64> {
        UInt64(crypto_pwhash_opslimit_min())...UInt64(crypto_pwhash_opslimit_max())
    }
    static var memLimitRange: ClosedRange<UInt64> {
        UInt64(crypto_pwhash_memlimit_min())...UInt64(crypto_pwhash_memlimit_max())
    }

    static func checkSizes() {
        assert(crypto_aead_xchacha20poly1305_ietf_keybytes() == aeadKeyBytes)
        assert(crypto_aead_xchacha20poly1305_ietf_npubbytes() == aeadNonceBytes)
        assert(crypto_aead_xchacha20poly1305_ietf_abytes() == aeadTagBytes)
        assert(crypto_kdf_keybytes() == kdfKeyBytes)
        assert(crypto_kdf_contextbytes() == kdfContext.count)
        assert(crypto_pwhash_saltbytes() == saltBytes)
    }

    // MARK: Secure memory

    /// `count` bytes of guarded memory (`sodium_malloc`: guard pages, `mlock`ed, never in a core
    /// dump where the kernel allows), or `nil` when none can be had.
    static func secureAllocate(_ count: Int) -> UnsafeMutableRawPointer? {
        sodium_malloc(count)
    }

    /// Frees memory from ``secureAllocate(_:)``; `sodium_free` wipes it first.
    static func secureFree(_ pointer: UnsafeMutableRawPointer) {
        sodium_free(pointer)
    }

    /// Wipes `count` bytes at `pointer`, in a way the compiler cannot drop.
    static func wipe(_ pointer: UnsafeMutableRawPointer, count: Int) {
        sodium_memzero(pointer, count)
    }

    /// Constant-time comparison of `count` bytes.
    static func constantTimeEqual(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, count: Int) -> Bool {
        sodium_memcmp(a, b, count) == 0
    }

    /// Fills `buffer` with random bytes (for secrets too: libsodium's CSPRNG).
    static func fillRandom(_ buffer: UnsafeMutableRawBufferPointer) {
        if let base = buffer.baseAddress { randombytes_buf(base, buffer.count) }
    }

    // MARK: Randomness

    /// Non-secret random bytes: salts, file ids, nonces.
    static func randomBytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { buffer in
            if let base = buffer.baseAddress { randombytes_buf(base, buffer.count) }
        }
        return bytes
    }

    // MARK: Hashing and subkeys

    /// BLAKE2b with a 32-byte output, keyed when `key` is given.
    static func hash(_ input: UnsafeRawBufferPointer, key: SecretBytes? = nil) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        out.withUnsafeMutableBytes { output in
            let run = { (keyBytes: UnsafeRawBufferPointer) in
                _ = crypto_generichash(
                    output.baseAddress!.assumingMemoryBound(to: UInt8.self), 32,
                    input.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(input.count),
                    keyBytes.baseAddress?.assumingMemoryBound(to: UInt8.self), keyBytes.count)
            }
            if let key { key.withUnsafeBytes(run) } else { run(UnsafeRawBufferPointer(start: nil, count: 0)) }
        }
        return out
    }

    static func hash(_ input: [UInt8], key: SecretBytes? = nil) -> [UInt8] {
        input.withUnsafeBytes { hash($0, key: key) }
    }

    /// Unkeyed BLAKE2b with a 16-byte output: short names for lock files and rejected tokens.
    static func shortHash(_ input: Data) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 16)
        input.withUnsafeBytes { raw in
            _ = crypto_generichash(&digest, digest.count, raw.bindMemory(to: UInt8.self).baseAddress, UInt64(raw.count), nil, 0)
        }
        return digest
    }

    /// SHA-256 (the PKCE challenge, RFC 7636).
    static func sha256(_ input: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        _ = crypto_hash_sha256(&digest, input, UInt64(input.count))
        return digest
    }

    /// Subkey number `id` of `master` (`crypto_kdf_derive_from_key`, context `TokVault`).
    static func deriveSubkey(from master: SecretBytes, id: UInt64) throws -> SecretBytes {
        precondition(master.count == kdfKeyBytes)
        return try SecretBytes(count: kdfKeyBytes) { (subkey) throws in
            let status = master.withUnsafeBytes { masterBytes in
                kdfContext.withUnsafeBufferPointer { context in
                    crypto_kdf_derive_from_key(
                        subkey.baseAddress!.assumingMemoryBound(to: UInt8.self), kdfKeyBytes, id,
                        context.baseAddress!, masterBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
                }
            }
            guard status == 0 else { throw VaultError(.io, "libsodium could not derive a subkey.") }
        }
    }

    /// Argon2id (`crypto_pwhash`, ALG_ARGON2ID13) of `passphrase` into a 32-byte master key.
    static func argon2id(
        passphrase: SecretBytes, salt: [UInt8], opsLimit: UInt64, memLimit: UInt64
    ) throws -> SecretBytes {
        precondition(salt.count == saltBytes)
        return try SecretBytes(count: kdfKeyBytes) { (out) throws in
            let status = passphrase.withUnsafeBytes { pass in
                salt.withUnsafeBufferPointer { saltBytes in
                    // A zero-length passphrase still needs a valid pointer.
                    let empty: CChar = 0
                    return withUnsafePointer(to: empty) { fallback in
                        crypto_pwhash(
                            out.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(kdfKeyBytes),
                            pass.baseAddress?.assumingMemoryBound(to: CChar.self) ?? fallback, UInt64(pass.count),
                            saltBytes.baseAddress!, opsLimit, Int(memLimit), argon2id13)
                    }
                }
            }
            guard status == 0 else {
                throw VaultError(
                    .io,
                    "Argon2id could not run with \(memLimit / 1024) KiB of memory; the system may be short of memory.")
            }
        }
    }

    // MARK: AEAD

    /// Seals `plaintext` with XChaCha20-Poly1305 IETF and a fresh random nonce, appending
    /// `nonce ‖ ciphertext ‖ tag` to `output`.
    static func seal(
        _ plaintext: UnsafeRawBufferPointer, associatedData: [UInt8], key: SecretBytes, appendingTo output: inout [UInt8]
    ) {
        let start = output.count
        let sealedCount = aeadNonceBytes + plaintext.count + aeadTagBytes
        output.append(contentsOf: repeatElement(0, count: sealedCount))
        output.withUnsafeMutableBytes { buffer in
            let nonce = buffer.baseAddress! + start
            randombytes_buf(nonce, aeadNonceBytes)
            let cipher = nonce + aeadNonceBytes
            var cipherLength: UInt64 = 0
            key.withUnsafeBytes { keyBytes in
                associatedData.withUnsafeBufferPointer { ad in
                    _ = crypto_aead_xchacha20poly1305_ietf_encrypt(
                        cipher.assumingMemoryBound(to: UInt8.self), &cipherLength,
                        plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(plaintext.count),
                        ad.baseAddress, UInt64(ad.count), nil,
                        nonce.assumingMemoryBound(to: UInt8.self),
                        keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
                }
            }
            assert(Int(cipherLength) == plaintext.count + aeadTagBytes)
        }
    }

    /// Opens `nonce ‖ ciphertext ‖ tag` into `plaintext` (which must hold at least
    /// `sealed.count - 40` bytes). Returns the plaintext length, or `nil` if authentication fails.
    static func open(
        _ sealed: UnsafeRawBufferPointer, associatedData: UnsafeRawBufferPointer, key: SecretBytes,
        into plaintext: UnsafeMutableRawBufferPointer
    ) -> Int? {
        guard sealed.count >= aeadNonceBytes + aeadTagBytes else { return nil }
        let cipherCount = sealed.count - aeadNonceBytes
        precondition(plaintext.count >= cipherCount - aeadTagBytes)
        var length: UInt64 = 0
        let status = key.withUnsafeBytes { keyBytes in
            crypto_aead_xchacha20poly1305_ietf_decrypt(
                plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self), &length, nil,
                (sealed.baseAddress! + aeadNonceBytes).assumingMemoryBound(to: UInt8.self), UInt64(cipherCount),
                associatedData.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(associatedData.count),
                sealed.baseAddress!.assumingMemoryBound(to: UInt8.self),
                keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return status == 0 ? Int(length) : nil
    }

    /// Authenticates `nonce ‖ ciphertext ‖ tag` as ``open(_:associatedData:key:into:)`` does, but
    /// decrypts only the first `prefix.count` bytes of its plaintext into `prefix` (at most the
    /// plaintext's length). Returns `false`, and leaves `prefix` alone, if authentication fails.
    static func authenticate(
        _ sealed: UnsafeRawBufferPointer, associatedData: UnsafeRawBufferPointer, key: SecretBytes,
        decryptingPrefixInto prefix: UnsafeMutableRawBufferPointer
    ) -> Bool {
        guard sealed.count >= aeadNonceBytes + aeadTagBytes else { return false }
        let cipherCount = sealed.count - aeadNonceBytes - aeadTagBytes
        precondition(prefix.count <= cipherCount)
        let base = sealed.baseAddress!.assumingMemoryBound(to: UInt8.self)
        return key.withUnsafeBytes { keyBytes in
            tokenvault_xchacha20poly1305_ietf_open_prefix(
                prefix.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(prefix.count),
                base + aeadNonceBytes, UInt64(cipherCount), base + aeadNonceBytes + cipherCount,
                associatedData.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(associatedData.count),
                base, keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
        } == 0
    }

    /// Decrypts the first `prefix.count` bytes of the plaintext of `sealed` without authenticating
    /// it: only for bytes that ``authenticate(_:associatedData:key:decryptingPrefixInto:)`` has
    /// just accepted.
    static func decryptPrefix(of sealed: UnsafeRawBufferPointer, key: SecretBytes, into prefix: UnsafeMutableRawBufferPointer) {
        precondition(prefix.count <= sealed.count - aeadNonceBytes - aeadTagBytes)
        guard prefix.count > 0 else { return }
        let base = sealed.baseAddress!.assumingMemoryBound(to: UInt8.self)
        key.withUnsafeBytes { keyBytes in
            tokenvault_xchacha20_ietf_decrypt_prefix(
                prefix.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(prefix.count), base + aeadNonceBytes, base,
                keyBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
    }

    /// Constant-time comparison of two equal-length byte arrays.
    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        return a.withUnsafeBytes { x in b.withUnsafeBytes { y in sodium_memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0 } }
    }

    /// Constant-time comparison of two strings' UTF-8 bytes (states, tokens, passwords): a length
    /// difference is told at once, the bytes without stopping at the first difference.
    package static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let (left, right) = (Array(a.utf8), Array(b.utf8))
        guard left.count == right.count else { return false }
        return left.isEmpty || constantTimeEqual(left, right)  // sodium_memcmp needs real buffers
    }

    /// Wipes ordinary memory that held a secret.
    static func wipe(_ buffer: UnsafeMutableRawBufferPointer) {
        if let base = buffer.baseAddress, buffer.count > 0 { sodium_memzero(base, buffer.count) }
    }

    // MARK: Text encodings, decoded straight into secure memory

    /// Decodes hex into `output`; returns the decoded length, or `nil` if it is not all hex.
    static func hexDecode(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Int? {
        var length = 0
        var end: UnsafePointer<CChar>? = nil
        let status = sodium_hex2bin(
            output.baseAddress!.assumingMemoryBound(to: UInt8.self), output.count,
            input.baseAddress!.assumingMemoryBound(to: CChar.self), input.count, nil, &length, &end)
        guard status == 0, let end, end == input.baseAddress!.assumingMemoryBound(to: CChar.self) + input.count else {
            return nil
        }
        return length
    }

    /// Decodes base64 (standard or URL-safe, padded or not) into `output`; `nil` if it is not base64.
    static func base64Decode(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Int? {
        let variants = [
            sodium_base64_VARIANT_ORIGINAL, sodium_base64_VARIANT_ORIGINAL_NO_PADDING,
            sodium_base64_VARIANT_URLSAFE, sodium_base64_VARIANT_URLSAFE_NO_PADDING,
        ]
        for variant in variants {
            var length = 0
            var end: UnsafePointer<CChar>? = nil
            let status = sodium_base642bin(
                output.baseAddress!.assumingMemoryBound(to: UInt8.self), output.count,
                input.baseAddress!.assumingMemoryBound(to: CChar.self), input.count, nil, &length, &end,
                Int32(variant))
            if status == 0, let end, end == input.baseAddress!.assumingMemoryBound(to: CChar.self) + input.count {
                return length
            }
        }
        return nil
    }
}
