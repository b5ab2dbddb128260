internal import CSodiumFuzz

/// How FuzzVaultFile turns the fuzzer's bytes into a vault file.
///
/// Arbitrary bytes almost never pass a header MAC or a record's Poly1305 tag, so taking them
/// only as a whole file would fuzz little beyond the first checks. The first byte of an input
/// therefore picks a mode (modulo 4), and the rest is used as:
///
/// - **0, raw:** the whole file, as an attacker without the key could write it.
/// - **1, forged checksums:** the whole file, after the harness recomputes the two unkeyed
///   checksums (the prefix check, bytes 12..<16, and the header checksum, bytes 136..<168) as an
///   attacker who knows the format would. This reaches the key kind, the Argon2id limits and
///   the key check.
/// - **2, sealed records:** record *plaintexts*, which the harness seals with the fixed key, in
///   order, after a valid fixed header: this fuzzes what the library does with records that
///   pass authentication (the plaintext decoder, batches, the index, reads, compaction). The
///   layout is one control byte, then records, each a u16 LE length and that many bytes
///   (fewer if the input ends first). Control bits: `0x1F` cut that many bytes off the end
///   (a torn tail); `0x20` seal the last record with the wrong sequence number; `0x40` append
///   16 zero bytes (the zero fill a power loss leaves); `0x80` add one to the last frame's
///   length field (a frame that reaches past the end).
/// - **3, header then raw:** the valid fixed header followed by the bytes as they are, to fuzz
///   the frame headers (length, complement, zero fill, torn tails).
///
/// The header, key and nonces are fixed, so an input always makes the same file. They are
/// built here from the published format (the FileFormat article), independently of the
/// library's own code, so a drift between the two shows up as inputs that no longer open.
public enum VaultFileInput: Sendable {
    public enum Mode: UInt8, Sendable, CaseIterable {
        case raw = 0
        case forgedChecksums = 1
        case sealedRecords = 2
        case headerThenRaw = 3
    }

    /// The fixed 32-byte master key: what the harness's key file holds. A test key, not a secret.
    public static let key: [UInt8] = (0..<32).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
    static let salt: [UInt8] = Array("fuzz-salt-000001".utf8)
    static let fileID: [UInt8] = Array("fuzz-file-id-001".utf8)

    static let headerLength = 168
    static let frameHeaderLength = 8
    static let nonceBytes = 24
    static let tagBytes = 16

    /// The vault file that `input` stands for.
    public static func fileBytes(_ input: [UInt8]) -> [UInt8] {
        guard let first = input.first else { return [] }
        let rest = Array(input.dropFirst())
        switch Mode(rawValue: first % 4)! {
        case .raw:
            return rest
        case .forgedChecksums:
            return forgingChecksums(rest)
        case .sealedRecords:
            return sealedRecordsFile(rest)
        case .headerThenRaw:
            return header + rest
        }
    }

    /// An input in the sealed-records mode: what a seed generator or a test writes.
    public static func sealedRecordsInput(_ plaintexts: [[UInt8]], control: UInt8 = 0) -> [UInt8] {
        var input: [UInt8] = [Mode.sealedRecords.rawValue, control]
        for plaintext in plaintexts {
            precondition(plaintext.count <= Int(UInt16.max))
            input.append(UInt8(plaintext.count & 0xFF))
            input.append(UInt8(plaintext.count >> 8))
            input += plaintext
        }
        return input
    }

    /// A record plaintext as the FileFormat article lays it out. Lengths are taken from the parts,
    /// so a test can also build records that the library must refuse.
    public static func plaintext(
        operation: UInt8, continues: Bool = false, service: [UInt8], account: [UInt8], secret: [UInt8]
    ) -> [UInt8] {
        var bytes: [UInt8] = [operation | (continues ? 0x80 : 0)]
        appendLE(UInt16(truncatingIfNeeded: service.count), to: &bytes)
        appendLE(UInt16(truncatingIfNeeded: account.count), to: &bytes)
        appendLE(UInt32(truncatingIfNeeded: secret.count), to: &bytes)
        return bytes + service + account + secret
    }

    // MARK: Modes

    static func forgingChecksums(_ file: [UInt8]) -> [UInt8] {
        var file = file
        if file.count >= 16 {
            file.replaceSubrange(12..<16, with: hash(Array(file[0..<12]))[0..<4])
        }
        if file.count >= headerLength {
            file.replaceSubrange(136..<168, with: hash(Array(file[0..<136])))
        }
        return file
    }

    static func sealedRecordsFile(_ rest: [UInt8]) -> [UInt8] {
        guard let control = rest.first else { return header }
        var plaintexts: [ArraySlice<UInt8>] = []
        var position = 1
        while position < rest.count {
            var length = Int(rest[position])
            if position + 1 < rest.count { length |= Int(rest[position + 1]) << 8 }
            position = min(position + 2, rest.count)
            let end = min(position + length, rest.count)
            plaintexts.append(rest[position..<end])
            position = end
        }
        var file = header
        var lastFrame = file.count
        for (sequence, plaintext) in plaintexts.enumerated() {
            let isLast = sequence == plaintexts.count - 1
            lastFrame = file.count
            let place = UInt64(sequence) + (isLast && control & 0x20 != 0 ? 1 : 0)
            seal(Array(plaintext), sequence: place, appendingTo: &file)
        }
        if control & 0x80 != 0, !plaintexts.isEmpty {
            let length = readLE32(file, at: lastFrame) &+ 1
            file.replaceSubrange(lastFrame..<lastFrame + 8, with: le32(length) + le32(~length))
        }
        if control & 0x40 != 0 {
            file += [UInt8](repeating: 0, count: 16)
        }
        let cut = min(Int(control & 0x1F), file.count - headerLength)
        return Array(file.dropLast(cut))
    }

    // MARK: The format, from the FileFormat article

    static let subkeys: (record: [UInt8], keyCheck: [UInt8], header: [UInt8]) = (subkey(1), subkey(2), subkey(3))

    /// The header of a key-file vault with the fixed key, salt and file id.
    public static let header: [UInt8] = {
        var bytes: [UInt8] = [0x89, 0x54, 0x56, 0x41, 0x55, 0x4C, 0x54, 0x0A]
        appendLE(UInt16(1), to: &bytes)
        appendLE(UInt16(headerLength), to: &bytes)
        bytes += hash(bytes)[0..<4]
        bytes.append(1)  // key file
        bytes += [UInt8](repeating: 0, count: 7)
        appendLE(UInt64(0), to: &bytes)
        appendLE(UInt64(0), to: &bytes)
        bytes += salt + fileID
        bytes += hash(Array("TokenVault key check v1".utf8) + salt, key: subkeys.keyCheck)
        bytes += hash(bytes, key: subkeys.header)
        bytes += hash(bytes)
        precondition(bytes.count == headerLength)
        return bytes
    }()

    /// Appends one frame: `L ‖ ~L ‖ nonce ‖ ciphertext ‖ tag`, sealed with the record key and
    /// the associated data `"TVR1" ‖ file id ‖ sequence ‖ L ‖ ~L`. The nonce is fixed by the
    /// sequence number so that an input always gives the same file (never do this for real).
    static func seal(_ plaintext: [UInt8], sequence: UInt64, appendingTo file: inout [UInt8]) {
        let length = UInt32(nonceBytes + plaintext.count + tagBytes)
        let frameHeader = le32(length) + le32(~length)
        var ad = Array("TVR1".utf8) + fileID
        appendLE(sequence, to: &ad)
        ad += frameHeader
        var nonce = [UInt8](repeating: 0x5A, count: nonceBytes)
        withUnsafeBytes(of: sequence.littleEndian) { nonce.replaceSubrange(0..<8, with: $0) }
        var sealed = [UInt8](repeating: 0, count: plaintext.count + tagBytes)
        var sealedLength: UInt64 = 0
        let status = crypto_aead_xchacha20poly1305_ietf_encrypt(
            &sealed, &sealedLength, plaintext, UInt64(plaintext.count), ad, UInt64(ad.count), nil, nonce,
            subkeys.record)
        precondition(status == 0 && Int(sealedLength) == sealed.count)
        file += frameHeader + nonce + sealed
    }

    static func subkey(_ id: UInt64) -> [UInt8] {
        precondition(sodium_init() >= 0)
        var out = [UInt8](repeating: 0, count: 32)
        let context = Array("TokVault".utf8).map { CChar(bitPattern: $0) }
        let status = crypto_kdf_derive_from_key(&out, 32, id, context, key)
        precondition(status == 0)
        return out
    }

    static func hash(_ input: [UInt8], key: [UInt8]? = nil) -> [UInt8] {
        precondition(sodium_init() >= 0)
        var out = [UInt8](repeating: 0, count: 32)
        let status: Int32
        if let key {
            status = crypto_generichash(&out, 32, input, UInt64(input.count), key, key.count)
        } else {
            status = crypto_generichash(&out, 32, input, UInt64(input.count), nil, 0)
        }
        precondition(status == 0)
        return out
    }

    static func appendLE<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { bytes += $0 }
    }

    static func le32(_ value: UInt32) -> [UInt8] {
        var bytes: [UInt8] = []
        appendLE(value, to: &bytes)
        return bytes
    }

    static func readLE32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        (0..<4).reversed().reduce(UInt32(0)) { $0 << 8 | UInt32(bytes[offset + $1]) }
    }
}
