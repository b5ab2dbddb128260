// FuzzSeeds: writes the seed corpora of FuzzVaultFile, FuzzMigrationDetector and FuzzAgentProtocol into
// Fuzz/<target>/corpus (run by `Scripts/fuzz seeds` from the package root). The seeds are
// committed; run this again only when the file format or the tutorial shapes change.
//
// Vault seeds are real vault files that the library wrote with the harness's fixed key, and
// record plaintexts for the sealed-records mode (see VaultFileInput). Migration seeds are the
// defaults shapes that OAuth tutorials leave behind (Tests/Helpers/tutorial-defaults), in XML and binary.
// Every token value here is made up.
import Foundation
import FuzzHarness
@_spi(AgentWire) import TokenVault

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("FuzzSeeds: \(message)\n".utf8))
    exit(1)
}

func write(_ bytes: [UInt8], _ target: String, _ name: String) throws {
    let directory = "Fuzz/\(target)/corpus"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    try Data(bytes).write(to: URL(fileURLWithPath: "\(directory)/\(name)"))
}

let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("tokenvault-fuzz-seeds-\(UUID().uuidString)")
try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
defer { _ = try? FileManager.default.removeItem(at: scratch) }

func privateFile(_ name: String, _ bytes: [UInt8]) throws -> String {
    let path = scratch.appendingPathComponent(name).path
    guard FileManager.default.createFile(atPath: path, contents: Data(bytes), attributes: [.posixPermissions: 0o600]) else {
        fail("could not write \(path)")
    }
    return path
}

func key(_ service: String, _ account: String = "default") throws -> CredentialKey {
    try CredentialKey(service: service, account: account)
}

let token = Data(#"{"v":1,"access_token":"fuzz-access","token_type":"Bearer","refresh_token":"fuzz-refresh","issued_at":1700000000,"expires_at":1700003600}"#.utf8)

// MARK: FuzzVaultFile: real files written by the library with the fixed key

let keyFile = try privateFile("key", VaultFileInput.key)
let options = EncryptedFileStore.Options(kdf: .minimum)

func vaultFile(_ name: String, source: VaultConfiguration.KeySource, _ fill: (EncryptedFileStore) async throws -> Void) async throws -> [UInt8] {
    let path = scratch.appendingPathComponent(name).path
    let store = try await EncryptedFileStore.open(path: path, keySource: source, options: options)
    try await fill(store)
    return [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
}

let empty = try await vaultFile("empty.vault", source: .keyFile(keyFile)) { _ in }
let history = try await vaultFile("history.vault", source: .keyFile(keyFile)) { store in
    try await store.save(token, for: key("github", "octocat"))
    try await store.save(Data("api-key-1".utf8), for: key("svc", "a"))
    try await store.delete(key("svc", "a"))
    try await store.saveAll([
        CredentialWrite(key: try key("google", "me@example.com"), secret: token, contentType: .json),
        CredentialWrite(key: try key("café", "ünïcode"), secret: Data([0, 1, 2, 255]), contentType: .binary),
    ])
    try await store.save(Data(), for: key("svc", "empty"))
}
let passphrase = try privateFile("passphrase", Array("fuzz passphrase\n".utf8))
let passphraseVault = try await vaultFile("passphrase.vault", source: .passphraseFile(passphrase)) { store in
    try await store.save(Data("x".utf8), for: key("svc"))
}
try write([VaultFileInput.Mode.raw.rawValue] + empty, "FuzzVaultFile", "raw-empty-vault")
try write([VaultFileInput.Mode.raw.rawValue] + history, "FuzzVaultFile", "raw-history-vault")
try write([VaultFileInput.Mode.raw.rawValue] + passphraseVault, "FuzzVaultFile", "raw-passphrase-vault")
try write([VaultFileInput.Mode.forgedChecksums.rawValue] + history, "FuzzVaultFile", "forged-history-vault")
try write([VaultFileInput.Mode.forgedChecksums.rawValue] + passphraseVault, "FuzzVaultFile", "forged-passphrase-vault")

// MARK: FuzzVaultFile: record plaintexts for the sealed-records mode

func put(_ service: String, _ account: String, _ secret: [UInt8], continues: Bool = false) -> [UInt8] {
    VaultFileInput.plaintext(
        operation: 1, continues: continues, service: Array(service.utf8), account: Array(account.utf8), secret: secret)
}

func delete(_ service: String, _ account: String, continues: Bool = false) -> [UInt8] {
    VaultFileInput.plaintext(
        operation: 2, continues: continues, service: Array(service.utf8), account: Array(account.utf8), secret: [])
}

let sealedSeeds: [(String, [[UInt8]], UInt8)] = [
    ("sealed-one-put", [put("github", "octocat", Array(token))], 0),
    ("sealed-put-delete-put", [put("svc", "a", Array("one".utf8)), delete("svc", "a"), put("svc", "b", Array("two".utf8))], 0),
    ("sealed-batch", [put("svc", "a", Array("1".utf8), continues: true), put("svc", "b", Array("2".utf8), continues: true), delete("svc", "a")], 0),
    ("sealed-unicode-empty-secret", [put("café", "ünïcode", []), put("日本", "アカウント", [0, 255])], 0),
    ("sealed-torn-batch", [put("svc", "a", Array("1".utf8)), put("svc", "b", Array("2".utf8), continues: true)], 0),
    ("sealed-torn-cut", [put("svc", "a", Array("1".utf8)), put("svc", "b", Array("2".utf8))], 5),
    ("sealed-wrong-sequence-last", [put("svc", "a", Array("1".utf8)), put("svc", "b", Array("2".utf8))], 0x20),
    ("sealed-zero-fill", [put("svc", "a", Array("1".utf8))], 0x40),
    ("sealed-length-past-end", [put("svc", "a", Array("1".utf8)), put("svc", "b", Array("2".utf8))], 0x80),
]
for (name, plaintexts, control) in sealedSeeds {
    try write(VaultFileInput.sealedRecordsInput(plaintexts, control: control), "FuzzVaultFile", name)
}
// The frames of a sealed-records file, for the header-then-raw mode.
let frames = VaultFileInput.fileBytes(VaultFileInput.sealedRecordsInput(sealedSeeds[2].1)).dropFirst(VaultFileInput.header.count)
try write([VaultFileInput.Mode.headerThenRaw.rawValue] + frames, "FuzzVaultFile", "header-then-frames")

// MARK: FuzzMigrationDetector: the tutorials' defaults shapes

struct TokenModel: Codable {
    var access: String
    var refresh: String
}

let access = "ya29.fuzz-access"
let refresh = "1//fuzz-refresh"
let strings: [String: Any] = ["accessToken": access, "refreshToken": refresh]
let model: [String: Any] = ["token": try JSONEncoder().encode(TokenModel(access: access, refresh: refresh))]
let mixed: [String: Any] = strings.merging([
    "loadingOAuthToken": false, "username": "octocat", "launchCount": 42, "zoomLevel": 1.5,
    "lastSync": Date(timeIntervalSince1970: 1_700_000_000), "recentSearches": ["swift", "linux"],
    "appearance": ["theme": "dark", "fontSize": 13] as [String: Any], "avatarThumbnail": Data([0, 1, 2, 254, 255]),
]) { first, _ in first }
let dictionaryModel: [String: Any] = [
    "credential": ["access_token": access, "refresh_token": refresh, "token_type": "Bearer", "scope": ["repo", "user"],
                   "expires_at": 1_700_003_600] as [String: Any],
    "tokenExpirationDate": Date(timeIntervalSince1970: 1_700_003_600),
]
let jsonString: [String: Any] = [
    "oauth": #"{"accessToken":"ya29.fuzz-access","refreshToken":"1//fuzz-refresh","expiry":"2023-11-14T23:13:20Z"}"#,
    "isLoggedIn": true,
]
let stringsWithExpiry: [String: Any] = [
    "access_token": access, "id_token": "eyJhbGciOiJub25lIn0.e30.", "accessTokenExpiry": Date(timeIntervalSince1970: 1_700_003_600),
]
let shapes: [(String, [String: Any])] = [
    ("strings", strings), ("model", model), ("mixed", mixed), ("dictionary-model", dictionaryModel),
    ("json-string", jsonString), ("strings-with-expiry", stringsWithExpiry),
]
for (name, dictionary) in shapes {
    for (format, suffix) in [(PropertyListSerialization.PropertyListFormat.xml, "xml"), (.binary, "binary")] {
        let data = try PropertyListSerialization.data(fromPropertyList: dictionary, format: format, options: 0)
        try write([UInt8](data), "FuzzMigrationDetector", "\(name).\(suffix).plist")
    }
}
// MARK: FuzzAgentProtocol: one frame of every kind

for (name, bytes) in try AgentProtocolProperty.seeds() {
    try write(bytes, "FuzzAgentProtocol", name)
}

print("FuzzSeeds: wrote the seed corpora under Fuzz/")
