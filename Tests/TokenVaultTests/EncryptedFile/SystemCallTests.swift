// The POSIX layer on its own: errno mapping, AtomicFile.replace (used by the vault and by the
// plist migration) failing at each step, and a FIFO given where a plist is expected.
import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault
import TokenVaultSystem
@testable import TokenVaultMigration

import Glibc

@Suite struct SystemCallTests {
    typealias S = FileTestSupport

    @Test func errnoBecomesTheRightVaultError() {
        #expect(VaultError.system(.noSpace, "write to", "/x").code == .diskFull)
        #expect(VaultError.system(.diskQuotaExceeded, "write to", "/x").code == .diskFull)
        #expect(VaultError.system(.permissionDenied, "open", "/x").code == .permissionDenied)
        #expect(VaultError.system(.readOnlyFileSystem, "open", "/x").code == .permissionDenied)
        let io = VaultError.system(.ioError, "flush to disk", "/x")
        #expect(io.code == .io && io.message.contains("/x") && io.message.contains("flush to disk"))
        #expect((io.underlying as? Errno) == .ioError)
    }

    @Test func statOfAMissingPathIsNil() throws {
        let dir = try TemporaryDirectory()
        #expect(try SystemCall.stat(dir.file("missing")) == nil)
        try S.write([1], to: dir.file("plain"))
        #expect(throws: Errno.notDirectory) { _ = try SystemCall.stat(dir.file("plain") + "/x") }
        #expect(try SystemCall.stat(dir.path)?.isDirectory == true)
    }

    /// Each step of an atomic replacement failing in turn leaves the old file exactly as it
    /// was and no temporary file behind; the directory sync failing after the rename is
    /// returned, not thrown, because the new file is already in place.
    @Test func atomicReplaceFailingAtEachStepKeepsTheOldFile() throws {
        let dir = try TemporaryDirectory()
        let path = dir.file("file")
        try S.write(Array("old".utf8), to: path, mode: 0o640)
        for kind in ["create", "write", "sync", "rename"] {
            let recorder = FileOperationRecorder(failing: (kind, 0, .noSpace))
            FileOperationHooks.install(recorder, below: dir.path)
            defer { FileOperationHooks.remove(recorder) }
            #expect(throws: VaultError.self, "\(kind)") {
                _ = try AtomicFile.replace(path, with: Array("new".utf8), attributes: .init(mode: 0o640), diskFull: "kept")
            }
            #expect(try S.read(path) == Array("old".utf8), "\(kind)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["file"], "\(kind): a temporary file was left")
        }
        let recorder = FileOperationRecorder(failing: ("syncDirectory", 0, .ioError))
        FileOperationHooks.install(recorder, below: dir.path)
        defer { FileOperationHooks.remove(recorder) }
        let warning = try AtomicFile.replace(path, with: Array("new".utf8), attributes: .init(mode: 0o640))
        #expect(warning?.code == .io)
        #expect(try S.read(path) == Array("new".utf8))
        #expect(try S.mode(of: path) == 0o640, "the mode asked for, whatever the umask")
    }

    /// A FIFO given as the plist to migrate is refused at once instead of waiting for a writer.
    @Test func plistFIFOIsRefusedWithoutWaiting() throws {
        let dir = try TemporaryDirectory()
        let fifo = dir.file("domain.plist")
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(throws: VaultError.self) { _ = try PlistSyscall.readFile(fifo, limit: 1 << 20) }
    }
}
