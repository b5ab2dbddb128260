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

extension AgentWireTests {
    /// The token response's payload, which the client reads without JSONDecoder when it can:
    /// wherever that reader answers, it answers what JSONDecoder answers, and it answers every
    /// payload the agent writes.
    @Test func aTokenResponseReadsAsJSONDecoderReadsIt() throws {
        var random = SeededRandom(seed: 0x5EED_3003)
        let alphabet: [Character] =
            (0..<0x80).map { Character(Unicode.Scalar(UInt8($0))) } + ["é", "\u{2028}", "😀", "\u{FEFF}", "\u{10FFFF}"]
        func text() -> String {
            String((0..<Int.random(in: 0...16, using: &random)).map { _ in alphabet.randomElement(using: &random)! })
        }
        let expiries: [Double?] = [nil, 0, 1_700_000_000, 1_700_000_000.25, -1, 1e300, .leastNonzeroMagnitude, 0.1, 123456789.123456789]
        // Bytes a payload is bent with: JSON's punctuation, escapes, digits, literals' letters.
        let noise = Array(#"{}[]:,"\/ubfnrt0123456789-+.eE aflsxDC"#.utf8) + [0x00, 0x1F, 0x7F, 0xC3, 0xA9, 0xFF, 0xED, 0xA0, 0x80]
        var readByHand = 0
        for round in 0..<3_000 {
            let token = AgentToken(
                accessToken: text(), tokenType: round % 3 == 0 ? "DPoP" : text(), expiresAt: nil, scope: round % 4 == 0 ? nil : text(),
                fresh: round % 2 == 0)
            var written = token
            written.expiresAt = expiries[round % expiries.count]
            var payload = AgentProtocol.json(written)
            // What the agent writes is read by hand, to the same token (an expiry JSONEncoder
            // writes with an exponent goes to JSONDecoder).
            let exponent = written.expiresAt.map { $0 == 1e300 || $0 == .leastNonzeroMagnitude } ?? false
            #expect(AgentToken(flatJSON: payload) == (exponent ? nil : written), "round \(round)")
            // Bent payloads: the hand reader answers only what JSONDecoder answers.
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                let at = Int.random(in: 0...payload.count, using: &random)
                switch Int.random(in: 0..<3, using: &random) {
                case 0: payload.insert(noise.randomElement(using: &random)!, at: at)
                case 1 where at < payload.count: payload.remove(at: at)
                default: if at < payload.count { payload[at] = noise.randomElement(using: &random)! }
                }
            }
            let byHand = AgentToken(flatJSON: payload)
            let decoded = try? JSONDecoder().decode(AgentToken.self, from: Data(payload))
            if let byHand {
                readByHand += 1
                #expect(byHand == decoded, "round \(round): \(String(decoding: payload, as: UTF8.self).debugDescription)")
            }
        }
        // The bent payloads must exercise the comparison, not only the refusals.
        #expect(readByHand > 150)
        // Escapes JSONEncoder never writes, but another writer may.
        let escaped = Array(#"{ "access_token" : "a\/b\u00e9\ud83d\ude00\n" , "token_type":"Bearer","fresh":true,"expires_at":1500.5,"scope":null }"#.utf8)
        #expect(AgentToken(flatJSON: escaped) == (try JSONDecoder().decode(AgentToken.self, from: Data(escaped))))
        #expect(AgentToken(flatJSON: escaped)?.accessToken == "a/bé😀\n")
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
