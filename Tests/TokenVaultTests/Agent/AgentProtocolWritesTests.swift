import Foundation
import Testing
@_spi(AgentWire) import TokenVault

import Glibc

/// The agent's write requests as bytes: what a client frames is what the agent decodes, the
/// frames never show their secrets, and an entry the direct path would not write is refused.
/// The agent carrying them out (real processes, a real vault) is AgentWriteTests'.
@Suite struct AgentProtocolWritesTests {
    private let key = try! CredentialKey(service: "api.example.com", account: "deploy")
    private let token = OAuthToken(
        accessToken: "write-access-token", refreshToken: "write-refresh-token", issuedAt: Date(timeIntervalSince1970: 1_700_000_000),
        expiresAt: Date(timeIntervalSince1970: 1_700_003_600))

    private func decoded(_ frame: [UInt8]) throws -> AgentRequest {
        try AgentRequest(body: frame.dropFirst(AgentProtocol.headerLength))
    }

    @Test func storeAndDeleteRequestsSurviveTheirFrames() throws {
        let registration = try ClientRegistration(
            tokenEndpoint: URL(string: "https://auth.example.com/token")!, clientID: "client",
            clientAuthentication: .clientSecretPost("write-client-secret"))
        let keep = try AgentStoreRequest(key: key, keepingRegistration: token, vault: "file /tmp/v")
        let replace = try AgentStoreRequest(key: key, token: token, registration: registration, vault: "file /tmp/v")
        let forget = try AgentStoreRequest(key: key, token: token, registration: nil, vault: "file /tmp/v")
        for request in [AgentRequest.store(keep), .store(replace), .store(forget), .delete(AgentDeleteRequest(key: key, vault: "file /tmp/v"))] {
            #expect(try decoded(request.encoded()) == request)
        }
        #expect(keep.registration == .keep && replace.registration == .replace && forget.registration == .replace)
        let written = AgentResponse.written(AgentWriteResult(backend: "file", existed: false))
        #expect(try AgentResponse(body: written.encoded().dropFirst(AgentProtocol.headerLength)) == written)
    }

    @Test func aStoreRequestNeverShowsItsSecrets() throws {
        let registration = try ClientRegistration(
            tokenEndpoint: URL(string: "https://auth.example.com/token")!, clientID: "client",
            clientAuthentication: .clientSecretBasic("write-client-secret"))
        let request = try AgentStoreRequest(key: key, token: token, registration: registration, vault: "file /tmp/v")
        var dumped = ""
        dump(request, to: &dumped)
        for text in [request.description, String(reflecting: request), "\(AgentRequest.store(request))", dumped] {
            for secret in ["write-access-token", "write-refresh-token", "write-client-secret"] {
                #expect(!text.contains(secret), "\(text)")
            }
            #expect(text.contains("api.example.com"))
        }
    }

    @Test func anEntryTheDirectPathWouldNotWriteIsRefused() throws {
        // A `keep` store carries the token alone: a registration in it would be silently dropped.
        let registration = try ClientRegistration(tokenEndpoint: URL(string: "https://auth.example.com/token")!, clientID: "client")
        var keep = try AgentStoreRequest(key: key, token: token, registration: registration, vault: "file /tmp/v")
        keep.registration = .keep
        #expect(throws: AgentProtocol.DecodingError.self) { try decoded(AgentRequest.store(keep).encoded()) }
        // Not an entry at all, and an invalid name: refused before any write.
        var frame = AgentRequest.delete(AgentDeleteRequest(key: key, vault: "v")).encoded()
        let json = String(decoding: frame.dropFirst(AgentProtocol.headerLength + 2), as: UTF8.self)
        let empty = Array(json.replacingOccurrences(of: "api.example.com", with: "").utf8)
        frame = Array(frame.prefix(AgentProtocol.headerLength + 2)) + empty
        #expect(throws: AgentProtocol.DecodingError.self) { try AgentRequest(body: frame.dropFirst(AgentProtocol.headerLength)) }
        let garbage: [UInt8] = [AgentProtocol.version, 0x06] + Array(#"{"service":"s","account":"a","vault":"v","registration":"keep","entry":"bm90IGpzb24="}"#.utf8)
        #expect(throws: AgentProtocol.DecodingError.self) { try AgentRequest(body: garbage) }
    }

    @Test func anUnknownKindIsToldApartFromAMalformedRequest() {
        let unknown: [UInt8] = [AgentProtocol.version, 0x42]
        let unknownError = #expect(throws: AgentProtocol.DecodingError.self) { try AgentRequest(body: unknown) }
        #expect(unknownError?.isUnknownKind == true)
        let malformed: [UInt8] = [AgentProtocol.version, 0x07] + Array("{".utf8)
        let malformedError = #expect(throws: AgentProtocol.DecodingError.self) { try AgentRequest(body: malformed) }
        #expect(malformedError?.isUnknownKind == false)
    }

    /// A store too large for one frame is not sent: the client goes direct (no agent listens at
    /// the path either; the size is checked first, so the reason names it).
    @Test func aStoreLargerThanAFrameGoesDirect() throws {
        let big = OAuthToken(accessToken: String(repeating: "a", count: AgentProtocol.maximumBodyLength))
        let request = try AgentStoreRequest(key: key, keepingRegistration: big, vault: "v")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tv-write-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // A listening socket, so that only the size can send the request direct.
        let path = directory.appendingPathComponent("agent.sock").path
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: Array(path.utf8))
            raw[path.utf8.count] = 0
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0 && listen(listener, 8) == 0)
        let error = #expect(throws: AgentClient.Unavailable.self) { try AgentClient(socketPath: path).store(request) }
        #expect(error?.reason.contains("larger than") == true, "\(String(describing: error))")
    }
}
