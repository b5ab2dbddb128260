// Scratch directories: one private directory per test, removed when the test ends.
import Foundation

import Glibc

/// A private scratch directory (0700) for one test, removed when the test ends.
final class TemporaryDirectory: @unchecked Sendable {
    let path: String

    init() throws {
        var base = NSTemporaryDirectory()
        while base.count > 1 && base.hasSuffix("/") { base.removeLast() }
        var template = Array((base + "/tokenvault-file-test.XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw SetupFailure("mkdtemp failed under \(base)")
        }
        path = String(cString: made)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)  // cleanup of a scratch dir, not a vault write
    }

    func file(_ name: String) -> String { path + "/" + name }
}


extension TemporaryDirectory {
    /// A fresh random 32-byte key file, raw, `0600`, at `name` in this directory.
    func keyFile(_ name: String = "key") throws -> String {
        let path = file(name)
        var key = [UInt8](repeating: 0, count: 32)
        for index in key.indices { key[index] = UInt8.random(in: 0...255) }
        guard FileManager.default.createFile(atPath: path, contents: Data(key), attributes: [.posixPermissions: 0o600]) else {
            throw SetupFailure("could not write \(path)")
        }
        return path
    }
}
