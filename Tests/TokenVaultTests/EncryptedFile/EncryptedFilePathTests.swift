// Issue 13's findings for the file backend, each a test that failed before its fix: one vault
// reached by two names, files and locks that belong to someone else, a lock held forever,
// FIFOs, a read-only mount without a lock file, a sparse tail, short passphrases, and messages.
import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault
import TokenVaultSystem

import Glibc

@Suite(.serialized) struct EncryptedFilePathTests {
    typealias S = FileTestSupport

    // MARK: 1. One vault, two names

    /// Two writer processes, one through the real path and one through a symbolic link, lose
    /// no acknowledged write: both take the same lock (`vault.lock`, none for the link).
    @Test func writersThroughASymlinkShareOneLock() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let alias = dir.file("alias")
        let key = try S.keyFile(in: dir)
        _ = try await S.open(vault, .keyFile(key))
        #expect(symlink(vault, alias) == 0)
        let count = 300
        let writers = try [("real", vault), ("link", alias)].map { service, path in
            (service, try S.helper(["write", path, key, service, "\(count)"]))
        }
        for (service, (process, output)) in writers {
            let acknowledged = await LineReader(output).remainingLines().filter { $0.hasPrefix("ack ") }.count
            await process.exited()
            #expect(process.terminationStatus == 0 && acknowledged == count, "writer \(service)")
        }
        let store = try await S.open(vault, .keyFile(key))
        for service in ["real", "link"] {
            #expect(try await store.keys(service: service).count == count, "\(service): acknowledged writes lost")
            for index in 0..<count {
                let value = try await store.load(S.key("\(index)", service: service))
                #expect(value == S.helperValue(service: service, index: index), "\(service)/\(index)")
            }
        }
        #expect(!FileManager.default.fileExists(atPath: alias + ".lock"), "the link got a lock of its own")
    }

    /// Compaction and rekey through a symbolic link replace the real file, not the link.
    @Test func compactionAndRekeyThroughASymlinkReplaceTheRealFile() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let alias = dir.file("alias")
        let key = try S.keyFile(in: dir)
        _ = try await S.open(vault, .keyFile(key))
        #expect(symlink(vault, alias) == 0)
        let store = try await S.open(alias, .keyFile(key))
        for index in 0..<5 { try await store.save(Data("value \(index)".utf8), for: S.key("\(index)")) }
        try await store.compact()
        #expect(try VaultIO.lstat(alias)?.isSymbolicLink == true, "compaction replaced the link")
        let newKey = try S.keyFile(in: dir, name: "new-key")
        try await store.rekey(to: .keyFile(newKey))
        #expect(try VaultIO.lstat(alias)?.isSymbolicLink == true, "rekey replaced the link")
        let real = try await S.open(vault, .keyFile(newKey))
        #expect(try await real.load(S.key("3")) == Data("value 3".utf8))
        let old = await S.errorCode { _ = try await S.open(vault, .keyFile(key)) }
        #expect(old?.code == .authenticationFailed, "the real file still opens with the old key")
    }

    /// A hard link cannot be told from the original by name, so a vault with two is refused.
    @Test func hardLinkedVaultIsRefused() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        _ = try await S.open(vault, .keyFile(key))
        #expect(link(vault, dir.file("second")) == 0)
        for path in [vault, dir.file("second")] {
            let error = await S.errorCode { _ = try await S.open(path, .keyFile(key)) }
            #expect(error?.code == .insecurePermissions)
            #expect(error?.message.contains("hard links") == true)
        }
    }

    // MARK: 5. Someone else's files and locks

    @Test(.enabled(if: getuid() == 0, "giving a file to another user needs root"))
    func filesOwnedByAnotherUserAreRefused() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let store = try await S.open(vault, .keyFile(key))
        try await store.save(Data("root's token".utf8), for: S.key("a"))
        for path in [vault, key, vault + ".lock"] {
            #expect(chown(path, 65534, 65534) == 0)
            let error = await S.errorCode { _ = try await S.open(vault, .keyFile(key)) }
            #expect(error?.code == .insecurePermissions, "\(path) owned by another user was accepted")
            #expect(chown(path, 0, 0) == 0)
        }
        _ = try await S.open(vault, .keyFile(key))
    }

    /// A dangling `vault.lock` symbolic link is refused, and nothing is created where it points.
    @Test func lockFileSymlinkIsNeverFollowed() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        _ = try await S.open(vault, .keyFile(key))
        try FileManager.default.removeItem(atPath: vault + ".lock")
        #expect(symlink(dir.file("elsewhere"), vault + ".lock") == 0)
        let error = await S.errorCode { _ = try await S.open(vault, .keyFile(key)) }
        #expect(error?.code == .insecurePermissions)
        #expect(!FileManager.default.fileExists(atPath: dir.file("elsewhere")))
    }

    /// A dangling symbolic link as the vault path: no vault is created where it points.
    @Test func vaultIsNeverCreatedThroughADanglingSymlink() async throws {
        let dir = try TemporaryDirectory()
        let key = try S.keyFile(in: dir)
        #expect(symlink(dir.file("target"), dir.file("vault")) == 0)
        let error = await S.errorCode { _ = try await S.open(dir.file("vault"), .keyFile(key)) }
        #expect(error?.code == .insecurePermissions)
        #expect(!FileManager.default.fileExists(atPath: dir.file("target")))
    }

    /// A lock held by another holder makes an open and a save fail with `timeout` after
    /// `lockTimeout`, naming the lock file and the holder's PID.
    @Test func lockWaitIsBoundedAndNamesTheHolder() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let options = EncryptedFileStore.Options(kdf: .minimum, lockTimeout: .milliseconds(300))
        let store = try await S.open(vault, .keyFile(key), options: options)
        // Another open file description of the lock file conflicts, even in this process.
        let holder = open(vault + ".lock", O_RDWR | O_CLOEXEC)
        #expect(holder >= 0 && flock(holder, LOCK_EX) == 0)
        defer { close(holder) }
        let clock = ContinuousClock()
        let start = clock.now
        let openError = await S.errorCode { _ = try await S.open(vault, .keyFile(key), options: options) }
        let saveError = await S.errorCode { try await store.save(Data("x".utf8), for: S.key("a")) }
        #expect(clock.now - start < .seconds(5))
        for error in [openError, saveError] {
            #expect(error?.code == .timeout)
            #expect(error?.message.contains(vault + ".lock") == true)
            #expect(error?.message.contains("PID \(getpid())") == true, "\(error?.message ?? "")")
            #expect(error?.message.contains("longer than 0.3 s") == true, "\(error?.message ?? "")")
        }
    }

    // MARK: 6, 14. FIFOs and devices

    /// A FIFO as key file, passphrase file or vault is refused at once, not waited on, and no
    /// lock file is made for a vault that is not a regular file.
    @Test func fifosAreRefusedWithoutWaiting() async throws {
        let dir = try TemporaryDirectory()
        let fifo = dir.file("fifo")
        #expect(mkfifo(fifo, 0o600) == 0)
        let keyError = await S.errorCode { _ = try await S.open(dir.file("vault"), .keyFile(fifo)) }
        #expect(keyError?.code == .invalidInput)
        let passphraseError = await S.errorCode { _ = try await S.open(dir.file("vault"), .passphraseFile(fifo)) }
        #expect(passphraseError?.code == .invalidInput)
        let key = try S.keyFile(in: dir)
        let vaultError = await S.errorCode { _ = try await S.open(fifo, .keyFile(key)) }
        #expect(vaultError?.code == .notAVault)
        #expect(!FileManager.default.fileExists(atPath: fifo + ".lock"))
    }

    @Test func devNullIsNotAVaultAndGetsNoLockFile() async throws {
        let dir = try TemporaryDirectory()
        let key = try S.keyFile(in: dir)
        let error = await S.errorCode { _ = try await S.open("/dev/null", .keyFile(key)) }
        #expect(error?.code == .notAVault)
        #expect(!FileManager.default.fileExists(atPath: "/dev/null.lock"))
    }

    // MARK: 8. A read-only mount without the lock file

    @Test(.enabled(if: getuid() == 0, "mounting a tmpfs needs root"))
    func readOnlyMountWithoutLockFileCanBeRead() async throws {
        let dir = try TemporaryDirectory()
        let mountPoint = dir.file("ro")
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: false)
        guard EncryptedFileProcessTests.run("/bin/mount", ["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", mountPoint]) else {
            Issue.record("Running as root but could not mount a tmpfs at \(mountPoint).")
            return
        }
        defer { _ = EncryptedFileProcessTests.run("/bin/umount", [mountPoint]) }
        let vault = mountPoint + "/vault"
        let key = try S.keyFile(in: dir)
        do {
            // Closed before the remount: a file open for writing keeps a mount from going read-only.
            let store = try await S.open(vault, .keyFile(key))
            try await store.save(Data("kept".utf8), for: S.key("a"))
        }
        try FileManager.default.removeItem(atPath: vault + ".lock")
        // The store closes its file and lock when its last reference goes (EncryptedFileStore
        // lets go of each job's captures before its caller resumes); the Swift runtime may still
        // hold the store for a moment on another thread, so this waits, bounded, for this
        // process's descriptors under the mount to be gone: the condition remount needs.
        let open = Self.descriptorsOpen(under: mountPoint, within: .seconds(10))
        #expect(open.isEmpty, "still open under the mount: \(open)")
        #expect(EncryptedFileProcessTests.run("/bin/mount", ["-o", "remount,ro", mountPoint]))
        let reader = try await S.open(vault, .keyFile(key))
        #expect(try await reader.load(S.key("a")) == Data("kept".utf8))
        #expect(try await reader.keys() == [S.key("a")])
        let error = await S.errorCode { try await reader.save(Data("x".utf8), for: S.key("b")) }
        #expect(error?.code == .permissionDenied)
    }

    /// This process's open descriptors whose file is under `directory`, once there are none or
    /// `bound` has passed.
    static func descriptorsOpen(under directory: String, within bound: Duration) -> [String] {
        let clock = ContinuousClock()
        let deadline = clock.now + bound
        while true {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
            let open = names.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)") }
                .filter { $0.hasPrefix(directory + "/") }
            if open.isEmpty || clock.now >= deadline { return open }
            usleep(2_000)  // polling the condition itself; the close happens on another thread
        }
    }

    // MARK: 14. Smaller

    /// A 2 GiB sparse tail is a torn tail found in a moment, not 2 GiB read into memory; the
    /// next write cuts it off.
    @Test func hugeSparseTailIsNotRead() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let store = try await S.open(vault, .keyFile(key))
        try await store.save(Data("before the hole".utf8), for: S.key("a"))
        let size = try #require(try VaultIO.stat(vault)?.size)
        #expect(truncate(vault, off_t(size) + (2 << 30)) == 0)
        let clock = ContinuousClock()
        let start = clock.now
        let reopened = try await S.open(vault, .keyFile(key))
        #expect(try await reopened.load(S.key("a")) == Data("before the hole".utf8))
        #expect(try await store.load(S.key("a")) == Data("before the hole".utf8))
        #expect(clock.now - start < .seconds(3), "the sparse tail was read")
        try await reopened.save(Data("after".utf8), for: S.key("b"))
        #expect(try #require(try VaultIO.stat(vault)?.size) < 1 << 20, "the sparse tail was not cut off")
    }

    @Test func shortPassphraseIsRefusedForANewVaultOnly() async throws {
        let dir = try TemporaryDirectory()
        let short = try S.passphraseFile("seven77", in: dir)
        let error = await S.errorCode { _ = try await S.open(dir.file("new"), .passphraseFile(short)) }
        #expect(error?.code == .invalidInput)
        #expect(error?.message.contains("8 characters") == true)
        #expect(!FileManager.default.fileExists(atPath: dir.file("new")))
        // Eight characters, some beyond ASCII, are enough.
        _ = try await S.open(dir.file("ok"), .passphraseFile(try S.passphraseFile("pässwörd", in: dir, name: "eight")))
        // A vault made before the minimum existed still opens with its short passphrase.
        let existing = dir.file("existing")
        let header = VaultHeader.new(kind: .passphrase, kdf: .minimum, salt: Sodium.randomBytes(Sodium.saltBytes))
        let keys = try VaultKeys.derive(from: .passphrase(try SecretBytes(copying: Array("seven77".utf8))), header: header, path: existing)
        try S.write(header.encoded(keys: keys), to: existing)
        _ = try await S.open(existing, .passphraseFile(short))
        // A rekey to a short passphrase is refused like a new vault.
        let store = try await S.open(dir.file("ok"), .passphraseFile(dir.file("eight")))
        let rekeyError = await S.errorCode { try await store.rekey(to: .passphraseFile(short)) }
        #expect(rekeyError?.code == .invalidInput)
    }

    /// "64 MiB, more than the 64 MiB" said nothing; two different limits never read alike.
    @Test func memoryLimitMessageTellsTheFiguresApart() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let passphrase = try S.passphraseFile("correct horse", in: dir)
        _ = try await EncryptedFileStore.open(
            path: vault, keySource: .passphraseFile(passphrase),
            options: .init(kdf: .init(opsLimit: 1, memoryLimit: (8 << 20) + 1024)))
        let error = await S.errorCode {
            _ = try await EncryptedFileStore.open(
                path: vault, keySource: .passphraseFile(passphrase), options: .init(maximumKDFMemoryLimit: 8 << 20))
        }
        #expect(error?.code == .invalidInput)
        #expect(error?.message.contains("\((8 << 20) + 1024) bytes") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("8 MiB, more than the 8 MiB") == false)
    }
}
