import Foundation
import TokenVault

/// TEST ONLY: a store that keeps each secret as a plain file in one directory, so that test
/// processes can share a store without the encrypted file backend. It exists to exercise the
/// runtime-directory lock (the one the Secret Service uses) across processes. Never use it for
/// real credentials: nothing is encrypted.
final class DirectoryStore: CredentialStore {
    let directory: URL

    init(directory: String) {
        self.directory = URL(fileURLWithPath: directory)
    }

    var backendName: String { "tv-test-directory" }

    private func url(_ key: CredentialKey) -> URL {
        let name = Data("\(key.service)\u{0}\(key.account)".utf8).map { String(format: "%02x", $0) }.joined()
        return directory.appendingPathComponent(name)
    }

    func load(_ key: CredentialKey) async throws -> Data? {
        do {
            return try Data(contentsOf: url(key))
        } catch CocoaError.fileReadNoSuchFile {
            return nil
        }
    }

    func save(_ secret: Data, for key: CredentialKey, contentType: SecretContentType) async throws {
        try secret.write(to: url(key), options: .atomic)
    }

    func delete(_ key: CredentialKey) async throws -> Bool {
        do {
            try FileManager.default.removeItem(at: url(key))
            return true
        } catch CocoaError.fileNoSuchFile {
            return false
        }
    }

    func keys(service: String?) async throws -> [CredentialKey] {
        []
    }
}
