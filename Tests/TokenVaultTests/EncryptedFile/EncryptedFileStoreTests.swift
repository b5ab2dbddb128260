import Foundation
import Logging
import Testing
import TokenVaultTesting
@testable import TokenVaultTestSupport
@testable import TokenVault

import Glibc

@Suite struct EncryptedFileStoreTests {
    typealias S = FileTestSupport

    // MARK: Conformance

    @Test(arguments: StoreConformance.cases)
    func conformance(_ check: StoreConformance.Case) async throws {
        let dir = try TemporaryDirectory()
        let store = try await S.open(dir.file("vault"), .keyFile(try S.keyFile(in: dir)))
        try await check.run(on: store, traits: .init(maximumSecretSize: EncryptedFileStore.maximumSecretSize))
        // Everything the case left behind reads back the same after a reopen.
        let before = try await S.contents(store)
        let reopened = try await S.open(dir.file("vault"), .keyFile(dir.file("key")))
        #expect(try await S.contents(reopened) == before)
    }

    @Test func backendName() async throws {
        let dir = try TemporaryDirectory()
        let store = try await S.open(dir.file("vault"), .keyFile(try S.keyFile(in: dir)))
        #expect(store.backendName == "file")
    }

    @Test func tooLargeIsRefused() async throws {
        let dir = try TemporaryDirectory()
        let store = try await S.open(dir.file("vault"), .keyFile(try S.keyFile(in: dir)))
        let error = await S.errorCode {
            try await store.save(Data(count: EncryptedFileStore.maximumSecretSize + 1), for: S.key("big"))
        }
        #expect(error?.code == .tooLarge)
        #expect(try await store.load(S.key("big")) == nil)
    }

    // MARK: Keys

    @Test func keyFileForms() async throws {
        let dir = try TemporaryDirectory()
        let raw = (0..<32).map { UInt8(($0 * 37 + 11) & 0xFF) }
        let hex = raw.map { String(format: "%02x", $0) }.joined()
        let base64 = Data(raw).base64EncodedString()
        let forms: [(String, [UInt8])] = [
            ("raw", raw),
            ("raw-newline", raw + [0x0A]),
            ("hex", Array(hex.utf8)),
            ("hex-newline", Array((hex.uppercased() + "\n").utf8)),
            ("base64", Array((base64 + "\n").utf8)),
            ("base64url-unpadded", Array(base64.replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").utf8)),
        ]
        let vault = dir.file("vault")
        for (name, bytes) in forms {
            try S.write(bytes, to: dir.file(name))
        }
        let first = try await S.open(vault, .keyFile(dir.file("raw")))
        try await first.save(Data("s".utf8), for: S.key("a"))
        // Every form of the same 32 bytes opens the same vault.
        for (name, _) in forms {
            let store = try await S.open(vault, .keyFile(dir.file(name)))
            #expect(try await store.load(S.key("a")) == Data("s".utf8), "key file form \(name)")
        }
    }

    @Test func badKeyFiles() async throws {
        let dir = try TemporaryDirectory()
        for (name, bytes) in [("short", [UInt8](repeating: 1, count: 31)), ("long", [UInt8](repeating: 1, count: 40)),
                              ("hex-63", Array(String(repeating: "a", count: 63).utf8)), ("empty", [])] {
            try S.write(bytes, to: dir.file(name))
            let error = await S.errorCode { _ = try await S.open(dir.file("vault-\(name)"), .keyFile(dir.file(name))) }
            #expect(error?.code == .invalidInput, "key file \(name)")
        }
        let missing = await S.errorCode { _ = try await S.open(dir.file("vault"), .keyFile(dir.file("nope"))) }
        #expect(missing?.code == .keyFileMissing)
        let missingPassphrase = await S.errorCode { _ = try await S.open(dir.file("vault"), .passphraseFile(dir.file("nope"))) }
        #expect(missingPassphrase?.code == .keyFileMissing)
        #expect(!FileManager.default.fileExists(atPath: dir.file("vault")), "no vault is created without a key")
    }

    @Test func passphraseVault() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let passphrase = try S.passphraseFile("correct horse battery staple", in: dir)
        let store = try await S.open(vault, .passphraseFile(passphrase))
        try await store.save(Data("token".utf8), for: S.key("a"))
        // A typed passphrase (no newline) is the same passphrase as the file less its newline.
        let typed = try SecretBytes(copying: Array("correct horse battery staple".utf8))
        let again = try await S.open(vault, .passphrase(typed))
        #expect(try await again.load(S.key("a")) == Data("token".utf8))
        // The KDF parameters come from the header, not from the options, when opening.
        let withOtherDefaults = try await EncryptedFileStore.open(
            path: vault, keySource: .passphrase(typed), options: .init(kdf: .interactive))
        #expect(try await withOtherDefaults.load(S.key("a")) == Data("token".utf8))
    }

    /// Once, with libsodium's MODERATE default, as a real deployment would.
    @Test func defaultModerateKDF() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let passphrase = try S.passphraseFile("a passphrase with the default cost", in: dir)
        let store = try await EncryptedFileStore.open(path: vault, keySource: .passphraseFile(passphrase))
        try await store.save(Data("v".utf8), for: S.key("a"))
        let header = try S.read(vault)
        #expect(header.readLE(UInt64.self, at: 24) == 3)
        #expect(header.readLE(UInt64.self, at: 32) == 256 << 20)
        let reopened = try await EncryptedFileStore.open(path: vault, keySource: .passphraseFile(passphrase))
        #expect(try await reopened.load(S.key("a")) == Data("v".utf8))
    }

    @Test func hugeKDFMemoryInHeaderIsRefused() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let passphrase = try S.passphraseFile("pw-longer-than-8", in: dir)
        _ = try await EncryptedFileStore.open(
            path: vault, keySource: .passphraseFile(passphrase), options: .init(kdf: .init(opsLimit: 1, memoryLimit: 64 << 20)))
        let error = await S.errorCode {
            _ = try await EncryptedFileStore.open(
                path: vault, keySource: .passphraseFile(passphrase), options: .init(maximumKDFMemoryLimit: 32 << 20))
        }
        #expect(error?.code == .invalidInput)
    }

    @Test func tooManyKDFPassesInHeaderAreRefusedBeforeRunning() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let passphrase = try S.passphraseFile("pw-longer-than-8", in: dir)
        _ = try await EncryptedFileStore.open(
            path: vault, keySource: .passphraseFile(passphrase), options: .init(kdf: .init(opsLimit: 3, memoryLimit: 8 << 20)))
        // A copy whose header asks for those 3 passes over 1 GiB (the most memory allowed by
        // default), its unkeyed checksum recomputed as whoever can write the file would: Argon2id
        // takes seconds on it, so the bound below fails if the passes are checked after it runs.
        // (3 passes over 8 MiB take milliseconds, which no bound could tell apart.) The bound is
        // a fifth of what Argon2id needs here (about 54 s on 2 cores), so a loaded machine does
        // not fail it, while running the KDF first still would.
        let costly = dir.file("costly")
        var forged = try S.read(vault)
        withUnsafeBytes(of: UInt64(1 << 30).littleEndian) { forged.replaceSubrange(32..<40, with: $0) }
        forged.replaceSubrange(136..<168, with: Sodium.hash(Array(forged[0..<136])))
        try S.write(forged, to: costly)
        let clock = ContinuousClock()
        let start = clock.now
        let error = await S.errorCode {
            _ = try await EncryptedFileStore.open(
                path: costly, keySource: .passphraseFile(passphrase), options: .init(maximumKDFOpsLimit: 2))
        }
        #expect(error?.code == .invalidInput)
        #expect(error?.message.contains("3 passes") == true)
        #expect(clock.now - start < .seconds(10), "refused before Argon2id runs")
        // Within the limit it opens.
        _ = try await EncryptedFileStore.open(path: vault, keySource: .passphraseFile(passphrase), options: .init(maximumKDFOpsLimit: 3))
    }

    // MARK: Errors, each with its own code

    @Test func wrongPassphrase() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let store = try await S.open(vault, .passphraseFile(try S.passphraseFile("right-passphrase-1234", in: dir)))
        try await store.save(Data("secret-value-5678".utf8), for: S.key("a"))
        let wrong = try S.passphraseFile("wrong-passphrase-9999", in: dir, name: "wrong")
        let error = await S.errorCode { _ = try await S.open(vault, .passphraseFile(wrong)) }
        #expect(error?.code == .authenticationFailed)
        Self.expectNoSecret(in: error, secrets: ["right-passphrase-1234", "wrong-passphrase-9999", "secret-value-5678"])
        // A key file for a passphrase vault is a wrong key too.
        let keyError = await S.errorCode { _ = try await S.open(vault, .keyFile(try S.keyFile(in: dir))) }
        #expect(keyError?.code == .authenticationFailed)
    }

    @Test func wrongKeyFile() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let store = try await S.open(vault, .keyFile(try S.keyFile(in: dir)))
        try await store.save(Data("x".utf8), for: S.key("a"))
        let other = try S.keyFile(in: dir, name: "other")
        let error = await S.errorCode { _ = try await S.open(vault, .keyFile(other)) }
        #expect(error?.code == .authenticationFailed)
        let passphraseError = await S.errorCode {
            _ = try await S.open(vault, .passphraseFile(try S.passphraseFile("pw-longer-than-8", in: dir)))
        }
        #expect(passphraseError?.code == .authenticationFailed)
    }

    @Test func notAVault() async throws {
        let dir = try TemporaryDirectory()
        let key = try S.keyFile(in: dir)
        let cases: [(String, [UInt8])] = [
            ("text", Array("[tokens]\ngithub = ghp_notreallyatoken\n".utf8)),
            ("short-garbage", [0x01, 0x02, 0x03]),
            ("binary", [UInt8](repeating: 0xAB, count: 4096)),
        ]
        for (name, bytes) in cases {
            try S.write(bytes, to: dir.file(name))
            let error = await S.errorCode { _ = try await S.open(dir.file(name), .keyFile(key)) }
            #expect(error?.code == .notAVault, "\(name)")
            #expect(try S.read(dir.file(name)) == bytes, "a file that is not a vault is never touched")
        }
    }

    @Test func emptyFile() async throws {
        let dir = try TemporaryDirectory()
        try S.write([], to: dir.file("vault"))
        let error = await S.errorCode { _ = try await S.open(dir.file("vault"), .keyFile(try S.keyFile(in: dir))) }
        #expect(error?.code == .emptyFile)
        #expect(try S.read(dir.file("vault")).isEmpty, "an empty file is not turned into an empty vault")
    }

    @Test func futureVersion() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        _ = try await S.open(vault, .keyFile(key))
        var bytes = try S.read(vault)
        // A version-2 header written by a future TokenVault: its version and prefix check agree.
        bytes[8] = 2
        let check = Sodium.hash(Array(bytes[0..<12]))
        bytes.replaceSubrange(12..<16, with: check[0..<4])
        try S.write(bytes, to: vault)
        let error = await S.errorCode { _ = try await S.open(vault, .keyFile(key)) }
        #expect(error?.code == .unsupportedVersion)
    }

    @Test func truncatedHeader() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        _ = try await S.open(vault, .keyFile(key))
        let bytes = try S.read(vault)
        try S.write(Array(bytes[0..<100]), to: vault)
        let error = await S.errorCode { _ = try await S.open(vault, .keyFile(key)) }
        #expect(error?.code == .truncated)
    }

    @Test func missingFileWithoutCreate() async throws {
        let dir = try TemporaryDirectory()
        let error = await S.errorCode {
            _ = try await EncryptedFileStore.open(
                path: dir.file("vault"), keySource: .keyFile(try S.keyFile(in: dir)), options: .init(createIfMissing: false))
        }
        #expect(error?.code == .backendUnavailable)
        #expect(!FileManager.default.fileExists(atPath: dir.file("vault")))
    }

    static func expectNoSecret(in error: VaultError?, secrets: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        guard let error else { return }
        for text in [error.message, error.description, error.debugDescription, String(describing: error)] {
            for secret in secrets {
                #expect(!text.contains(secret), "an error message shows a secret", sourceLocation: sourceLocation)
            }
        }
    }

    // MARK: Permissions

    @Test func createsPrivateFileAndDirectory() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.path + "/nested/deeper/vault"
        let oldMask = umask(0o022)
        defer { umask(oldMask) }
        _ = try await S.open(vault, .keyFile(try S.keyFile(in: dir)))
        #expect(try S.mode(of: vault) == 0o600)
        #expect(try S.mode(of: vault + ".lock") == 0o600)
        #expect(try S.mode(of: dir.path + "/nested/deeper") == 0o700)
        #expect(try S.mode(of: dir.path + "/nested") == 0o700)
    }

    @Test func refusesReadableVault() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let store = try await S.open(vault, .keyFile(key))
        try await store.save(Data("x".utf8), for: S.key("a"))
        for mode in [0o644, 0o640, 0o604, 0o660] {
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: vault)
            let error = await S.errorCode { _ = try await S.open(vault, .keyFile(key)) }
            #expect(error?.code == .insecurePermissions, "mode \(String(mode, radix: 8))")
        }
        let allowed = try await EncryptedFileStore.open(
            path: vault, keySource: .keyFile(key), options: .init(allowInsecurePermissions: true))
        #expect(try await allowed.load(S.key("a")) == Data("x".utf8))
    }

    @Test func refusesReadableKeyAndPassphraseFiles() async throws {
        let dir = try TemporaryDirectory()
        let key = try S.keyFile(in: dir)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: key)
        let error = await S.errorCode { _ = try await S.open(dir.file("vault"), .keyFile(key)) }
        #expect(error?.code == .insecurePermissions)
        let passphrase = try S.passphraseFile("pw-longer-than-8", in: dir)
        try FileManager.default.setAttributes([.posixPermissions: 0o640], ofItemAtPath: passphrase)
        let passphraseError = await S.errorCode { _ = try await S.open(dir.file("vault2"), .passphraseFile(passphrase)) }
        #expect(passphraseError?.code == .insecurePermissions)
        _ = try await EncryptedFileStore.open(
            path: dir.file("vault3"), keySource: .keyFile(key), options: .init(allowInsecurePermissions: true))
    }

    // MARK: Durability, batches, compaction, rekey

    @Test func reopenKeepsEverything() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let store = try await S.open(vault, .keyFile(key))
        for index in 0..<20 {
            try await store.save(Data("value \(index)".utf8), for: S.key("k\(index)"))
        }
        try await store.delete(S.key("k3"))
        try await store.save(Data("changed".utf8), for: S.key("k4"))
        let reopened = try await S.open(vault, .keyFile(key))
        #expect(try await reopened.keys().count == 19)
        #expect(try await reopened.load(S.key("k3")) == nil)
        #expect(try await reopened.load(S.key("k4")) == Data("changed".utf8))
        #expect(try await reopened.load(S.key("k19")) == Data("value 19".utf8))
    }

    @Test func namesAndSecretsAreNotInTheFile() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let store = try await S.open(vault, .keyFile(try S.keyFile(in: dir)))
        try await store.save(Data("ghp_SECRETTOKENVALUE".utf8), for: try CredentialKey(service: "github.example", account: "octocat"))
        let text = String(decoding: try S.read(vault), as: UTF8.self)
        for visible in ["ghp_SECRETTOKENVALUE", "github.example", "octocat"] {
            #expect(!text.contains(visible))
        }
    }

    @Test func batchIsOneAtomicAppend() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let store = try await S.open(vault, .keyFile(key))
        try await store.save(Data("before".utf8), for: S.key("before"))
        let sizeBefore = try S.read(vault).count
        let entries = (0..<10).map { CredentialWrite(key: S.key("b\($0)"), secret: Data("batch \($0)".utf8), contentType: .json) }
        try await store.saveAll(entries)
        let full = try S.read(vault)
        // Cut the batch anywhere: the reopened vault holds all of it or none of it.
        for cut in stride(from: sizeBefore, to: full.count, by: 37) {
            try S.write(Array(full[..<cut]), to: vault)
            let reopened = try await S.open(vault, .keyFile(key))
            #expect(try await reopened.keys() == [S.key("before")], "cut at \(cut)")
        }
        try S.write(full, to: vault)
        #expect(try await S.open(vault, .keyFile(key)).keys().count == 11)
    }

    @Test func compactionKeepsDataAndShrinksTheFile() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let options = EncryptedFileStore.Options(kdf: .minimum, compactionMinimumDeadBytes: 1 << 40)  // no automatic compaction
        let store = try await S.open(vault, .keyFile(key), options: options)
        let other = try await S.open(vault, .keyFile(key), options: options)  // "another process"
        for round in 0..<10 {
            for index in 0..<20 {
                try await store.save(Data("round \(round) value \(index)".utf8), for: S.key("k\(index)"))
            }
        }
        for index in 10..<20 { try await store.delete(S.key("k\(index)")) }
        let expected = try await S.contents(store)
        #expect(try await S.contents(other) == expected)
        let before = try S.read(vault).count
        // What a process killed during a compaction leaves behind is cleaned up by the next one.
        try S.write([1, 2, 3], to: dir.file(".vault.tmp-abandoned"))
        try await store.compact()
        let after = try S.read(vault).count
        #expect(after < before / 5)
        #expect(try await S.contents(store) == expected)
        // The other instance notices the replaced file, and can keep writing to it.
        #expect(try await S.contents(other) == expected)
        try await other.save(Data("after compaction".utf8), for: S.key("new"))
        #expect(try await store.load(S.key("new")) == Data("after compaction".utf8))
        #expect(try await S.contents(S.open(vault, .keyFile(key))).count == expected.count + 1)
        #expect(try S.mode(of: vault) == 0o600)
        // No temporary file is left behind.
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains(".tmp-") }
        #expect(leftovers.isEmpty)
    }

    @Test func automaticCompaction() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let store = try await S.open(
            vault, .keyFile(key), options: .init(kdf: .minimum, compactionMinimumDeadBytes: 16 * 1024))
        let value = Data(repeating: 0x41, count: 600)
        for round in 0..<100 {
            try await store.save(value + Data("\(round)".utf8), for: S.key("only"))
        }
        // 100 records of ~650 bytes were written; dead ones are compacted away as they pile up.
        #expect(try S.read(vault).count < 40 * 1024)
        #expect(try await S.open(vault, .keyFile(key)).load(S.key("only")) == value + Data("99".utf8))
    }

    @Test func rekeyFromPassphraseToKeyFileAndBack() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let oldPassphrase = try S.passphraseFile("old passphrase", in: dir, name: "old")
        let store = try await S.open(vault, .passphraseFile(oldPassphrase))
        for index in 0..<5 { try await store.save(Data("v\(index)".utf8), for: S.key("k\(index)")) }
        let other = try await S.open(vault, .passphraseFile(oldPassphrase))
        let expected = try await S.contents(store)

        let key = try S.keyFile(in: dir)
        try await store.rekey(to: .keyFile(key))
        #expect(try await S.contents(store) == expected)
        #expect(try await S.open(vault, .keyFile(key)).load(S.key("k4")) == Data("v4".utf8))
        let oldError = await S.errorCode { _ = try await S.open(vault, .passphraseFile(oldPassphrase)) }
        #expect(oldError?.code == .authenticationFailed)
        // A process that still has the old key is told so on its next operation.
        let staleError = await S.errorCode { _ = try await other.load(S.key("k1")) }
        #expect(staleError?.code == .authenticationFailed)

        let newPassphrase = try S.passphraseFile("new passphrase", in: dir, name: "new")
        try await store.rekey(to: .passphraseFile(newPassphrase), kdf: .minimum)
        try await store.save(Data("after".utf8), for: S.key("after"))
        let reopened = try await S.open(vault, .passphraseFile(newPassphrase))
        #expect(try await reopened.load(S.key("after")) == Data("after".utf8))
        #expect(try await reopened.keys().count == 6)
        #expect(try S.mode(of: vault) == 0o600)
    }

    @Test func secondInstanceSeesWritesAndDeletes() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let first = try await S.open(vault, .keyFile(key))
        let second = try await S.open(vault, .keyFile(key))
        try await first.save(Data("one".utf8), for: S.key("a"))
        #expect(try await second.load(S.key("a")) == Data("one".utf8))
        try await second.save(Data("two".utf8), for: S.key("a"))
        try await second.save(Data("three".utf8), for: S.key("b"))
        #expect(try await first.load(S.key("a")) == Data("two".utf8))
        #expect(try await first.keys() == [S.key("a"), S.key("b")])
        #expect(try await first.delete(S.key("b")))
        #expect(try await second.load(S.key("b")) == nil)
        #expect(try await second.delete(S.key("b")) == false)
    }

    /// A warm get no longer `stat`s the path when nothing happened (the inotify watch says so),
    /// once the store has made a few dozen reads.
    /// Changes from outside the store must still show at once: a backup copy renamed over the
    /// vault by hand, then a write by another instance into that new file (which only a watch on
    /// the new file's inode, installed at the reload, reports).
    @Test func aFileRenamedOverTheVaultAndWritesToItAreSeenAtOnce() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let backup = dir.file("vault.backup")
        let key = try S.keyFile(in: dir)
        let reader = try await S.open(vault, .keyFile(key))
        try await reader.save(Data("backed up".utf8), for: S.key("a"))
        try FileManager.default.copyItem(atPath: vault, toPath: backup)
        try await reader.save(Data("newer".utf8), for: S.key("a"))
        // A store watches the file only after a few dozen reads (a short-lived process never does).
        #expect(!reader.watchesFile)
        for _ in 0..<40 { #expect(try await reader.load(S.key("a")) == Data("newer".utf8)) }
        #expect(reader.watchesFile)

        #expect(rename(backup, vault) == 0)
        #expect(try await reader.load(S.key("a")) == Data("backed up".utf8))
        #expect(try await reader.load(S.key("a")) == Data("backed up".utf8))

        let writer = try await S.open(vault, .keyFile(key))
        try await writer.save(Data("after the restore".utf8), for: S.key("a"))
        #expect(try await reader.load(S.key("a")) == Data("after the restore".utf8))
        try await writer.save(Data("and again".utf8), for: S.key("b"))
        #expect(try await reader.keys() == [S.key("a"), S.key("b")])
        #expect(try await reader.load(S.key("b")) == Data("and again".utf8))
    }

    @Test func descriptionsShowNoSecret() async throws {
        let typed = try SecretBytes(copying: Array("hunter2-passphrase".utf8))
        let source = VaultConfiguration.KeySource.passphrase(typed)
        #expect(!String(describing: source).contains("hunter2"))
        #expect(!String(reflecting: typed).contains("hunter2"))
        #expect(!String(describing: EncryptedFileStore.KDFParameters.moderate).isEmpty)
    }
}

// MARK: - Logs

/// Keeps every log line, message and metadata, as text.
final class CapturingLogHandler: LogHandler, @unchecked Sendable {
    private let lock = NSLock()
    private var _lines: [String] = []
    var lines: [String] { lock.withLock { _lines } }
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        lock.withLock { _lines.append("\(event.level) \(event.message) \(merged)") }
    }
}

@Suite struct EncryptedFileLoggingTests {
    typealias S = FileTestSupport

    @Test func logsShowNoSecret() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let handler = CapturingLogHandler()
        let logger = Logger(label: "test") { _ in handler }
        let passphrase = try S.passphraseFile("log-passphrase-SECRET1", in: dir)
        let store = try await EncryptedFileStore.open(
            path: vault, keySource: .passphraseFile(passphrase), options: S.cheap, logger: logger)
        for round in 0..<3 {
            try await store.save(Data("log-token-SECRET2-\(round)".utf8), for: S.key("acct"))
        }
        try await store.compact()
        // A torn tail, seen and repaired.
        let bytes = try S.read(vault)
        try S.write(bytes + Array(bytes[VaultHeader.length..<VaultHeader.length + 30]), to: vault)
        let reopened = try await EncryptedFileStore.open(
            path: vault, keySource: .passphraseFile(passphrase), options: S.cheap, logger: logger)
        try await reopened.save(Data("log-token-SECRET3".utf8), for: S.key("acct2"))
        let newKey = try S.keyFile(in: dir)
        try await reopened.rekey(to: .keyFile(newKey))
        #expect(handler.lines.count >= 3, "the store logged what it did")
        #expect(handler.lines.contains { $0.contains("incomplete last write") })
        let keyBytes = try S.read(newKey).map { String(format: "%02x", $0) }.joined()
        for line in handler.lines {
            #expect(!line.contains("SECRET"), "a log line shows a secret: redacted")
            #expect(!line.lowercased().contains(keyBytes))
        }
    }
}

@Suite struct EncryptedFileVaultFacadeTests {
    typealias S = FileTestSupport

    /// `Vault.open` with the file backend named explicitly opens this store, and fails closed.
    @Test func vaultOpensTheFileBackend() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("tokens.vault")
        let configuration = VaultConfiguration(backend: .file, filePath: vault, keySource: .keyFile(try S.keyFile(in: dir)))
        let opened = try await Vault.open(configuration)
        #expect(opened.store.backendName == "file")
        #expect(opened.selection.backend == .file)
        try await opened.saveSecret(Data("api-key".utf8), for: S.key("a"))
        #expect(try await Vault.open(configuration).secret(for: S.key("a")) == Data("api-key".utf8))

        let wrongKey = VaultConfiguration(backend: .file, filePath: vault, keySource: .keyFile(try S.keyFile(in: dir, name: "other")))
        let error = await S.errorCode { _ = try await Vault.open(wrongKey) }
        #expect(error?.code == .authenticationFailed)
    }
}
