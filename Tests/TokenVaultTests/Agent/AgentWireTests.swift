import Foundation
import Testing
@_spi(AgentWire) @testable import TokenVault

/// The `token` request's payload, which the client writes without JSONEncoder (a cold `vault get`
/// through the agent sends one): the same bytes as JSONEncoder's, so the agent decodes what it
/// always decoded and one message is always the same bytes.
@Suite struct AgentWireTests {
    /// Every ASCII character, the escapes, non-ASCII text and line separators, in random fields.
    @Test func aTokenRequestIsTheBytesJSONEncoderMakes() throws {
        let alphabet: [Character] =
            (0..<0x80).map { Character(Unicode.Scalar(UInt8($0))) } + ["é", "\u{2028}", "\u{2029}", "😀", "\u{FEFF}", "/", "\\", "\""]
        var random = SeededRandom(seed: 0x5EED_3002)
        func text() -> String {
            String((0..<Int.random(in: 0...24, using: &random)).map { _ in alphabet.randomElement(using: &random)! })
        }
        let leeways: [Double] = [0, 60, 1, 3600, 86_400 * 365, 0.5, 59.75, -1, -0.0, 1e15, 1e300]
        for round in 0..<2_000 {
            let request = AgentTokenRequest(
                service: text(), account: text(), fresh: round % 2 == 0, leeway: leeways[round % leeways.count], vault: text())
            let handWritten = request.json
            #expect(handWritten == AgentProtocol.json(request), "round \(round)")
            // And it decodes back to the request, as the agent reads it.
            #expect(try JSONDecoder().decode(AgentTokenRequest.self, from: Data(handWritten)) == request, "round \(round)")
        }
    }

    @Test func aTokenRequestFrameDecodesToTheRequest() throws {
        let key = try CredentialKey(service: "api \"quoted\" \\ /slash", account: "café é")
        let request = AgentRequest.token(AgentTokenRequest(key: key, fresh: true, leeway: 60, vault: "file /tmp/a \u{1} b"))
        #expect(try AgentRequest(body: request.encoded().dropFirst(AgentProtocol.headerLength)) == request)
    }
}

extension AgentTokenRequest {
    /// A request with any field values, even ones no CredentialKey accepts: the encoder's input.
    fileprivate init(service: String, account: String, fresh: Bool, leeway: Double, vault: String) {
        self.init(key: try! CredentialKey(service: "s", account: "a"), fresh: fresh, leeway: leeway, vault: vault)
        self.service = service
        self.account = account
    }
}
