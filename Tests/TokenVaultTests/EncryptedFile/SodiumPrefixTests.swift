// The two-step open that a pass through the log uses (authenticate everything, decrypt only a
// prefix), checked against libsodium's own XChaCha20-Poly1305 IETF decrypt: the same verdict
// on every message, the same plaintext bytes, and any changed bit refused.
import Foundation
import Testing
@testable import TokenVault

@Suite struct SodiumPrefixTests {
    /// `plaintext` sealed under `key` and `ad` by libsodium.
    static func seal(_ plaintext: [UInt8], ad: [UInt8], key: SecretBytes) -> [UInt8] {
        var sealed: [UInt8] = []
        plaintext.withUnsafeBytes { Sodium.seal($0, associatedData: ad, key: key, appendingTo: &sealed) }
        return sealed
    }

    /// libsodium's verdict and plaintext.
    static func open(_ sealed: [UInt8], ad: [UInt8], key: SecretBytes) -> [UInt8]? {
        var plaintext = [UInt8](repeating: 0, count: max(0, sealed.count - 40))
        let count = sealed.withUnsafeBytes { sealedBytes in
            ad.withUnsafeBytes { adBytes in
                plaintext.withUnsafeMutableBytes { Sodium.open(sealedBytes, associatedData: adBytes, key: key, into: $0) }
            }
        }
        return count.map { Array(plaintext[..<$0]) }
    }

    /// The two-step open's verdict and the `prefixCount` bytes it decrypted (`nil` if refused).
    static func openPrefix(_ sealed: [UInt8], ad: [UInt8], key: SecretBytes, prefixCount: Int) -> [UInt8]? {
        let marker: UInt8 = 0xA5
        var prefix = [UInt8](repeating: marker, count: prefixCount)
        let accepted = sealed.withUnsafeBytes { sealedBytes in
            ad.withUnsafeBytes { adBytes in
                prefix.withUnsafeMutableBytes {
                    Sodium.authenticate(sealedBytes, associatedData: adBytes, key: key, decryptingPrefixInto: $0)
                }
            }
        }
        guard accepted else {
            #expect(prefix.allSatisfy { $0 == marker }, "a refused message wrote into the prefix")
            return nil
        }
        return prefix
    }

    @Test func agreesWithLibsodiumOnEveryLengthAroundTheBlockAndPaddingEdges() throws {
        try Sodium.ensureInitialized()
        let key = try SecretBytes.random(count: Sodium.aeadKeyBytes)
        // Plaintext lengths across Poly1305's 16-byte padding and ChaCha20's 64-byte blocks,
        // associated data of every padding remainder, and prefixes from none to all.
        for length in [0, 1, 9, 15, 16, 17, 63, 64, 65, 127, 128, 129, 600, 1000] {
            for adLength in [0, 1, 15, 16, 17, 36] {
                let plaintext = Sodium.randomBytes(length)
                let ad = Sodium.randomBytes(adLength)
                let sealed = Self.seal(plaintext, ad: ad, key: key)
                #expect(Self.open(sealed, ad: ad, key: key) == plaintext)
                for prefixCount in Set([0, min(1, length), min(9, length), min(64, length), min(65, length), min(128, length), length]) {
                    let prefix = Self.openPrefix(sealed, ad: ad, key: key, prefixCount: prefixCount)
                    #expect(prefix == Array(plaintext[..<prefixCount]), "length \(length), ad \(adLength), prefix \(prefixCount)")
                    var rest = [UInt8](repeating: 0, count: prefixCount)
                    sealed.withUnsafeBytes { sealedBytes in
                        rest.withUnsafeMutableBytes { Sodium.decryptPrefix(of: sealedBytes, key: key, into: $0) }
                    }
                    #expect(rest == Array(plaintext[..<prefixCount]))
                }
            }
        }
    }

    @Test func refusesEveryChangedBitAsLibsodiumDoes() throws {
        try Sodium.ensureInitialized()
        let key = try SecretBytes.random(count: Sodium.aeadKeyBytes)
        let ad = Sodium.randomBytes(36)
        let plaintext = Sodium.randomBytes(70)
        let sealed = Self.seal(plaintext, ad: ad, key: key)
        #expect(Self.openPrefix(sealed, ad: ad, key: key, prefixCount: 9) == Array(plaintext[..<9]))
        // Every bit of the nonce, the ciphertext and the tag.
        for bit in 0..<(sealed.count * 8) {
            var changed = sealed
            changed[bit / 8] ^= 1 << (bit % 8)
            #expect(Self.open(changed, ad: ad, key: key) == nil)
            #expect(Self.openPrefix(changed, ad: ad, key: key, prefixCount: 9) == nil, "bit \(bit) of the sealed bytes")
        }
        // Every bit of the associated data, and associated data one byte shorter or longer.
        for bit in 0..<(ad.count * 8) {
            var changed = ad
            changed[bit / 8] ^= 1 << (bit % 8)
            #expect(Self.openPrefix(sealed, ad: changed, key: key, prefixCount: 9) == nil, "bit \(bit) of the associated data")
        }
        #expect(Self.openPrefix(sealed, ad: Array(ad.dropLast()), key: key, prefixCount: 9) == nil)
        #expect(Self.openPrefix(sealed, ad: ad + [0], key: key, prefixCount: 9) == nil)
        // Another key, a cut message, and a message too short to hold a nonce and a tag.
        let other = try SecretBytes.random(count: Sodium.aeadKeyBytes)
        #expect(Self.openPrefix(sealed, ad: ad, key: other, prefixCount: 9) == nil)
        #expect(Self.openPrefix(Array(sealed.dropLast()), ad: ad, key: key, prefixCount: 9) == nil)
        #expect(Self.openPrefix(Array(sealed.prefix(39)), ad: ad, key: key, prefixCount: 0) == nil)
    }
}
