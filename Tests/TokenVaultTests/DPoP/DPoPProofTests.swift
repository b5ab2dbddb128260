#if DPoP  // the signer (TokenVaultDPoP, swift-crypto) is built with the package trait DPoP
import Crypto
import Foundation
import Testing
@_spi(AgentWire) @testable import TokenVault
import TokenVaultDPoP

/// DPoP keys and proofs (RFC 9449) in process: the proof's structure, the thumbprint against
/// RFC 7638's own example, `ath` against RFC 9449's, and every signature checked by swift-crypto's
/// own verifier over the JWS signing input. The proofs against a real verifier (the test
/// authorization server, joserfc): Tests/Integration/RefreshServer/DPoPServerTests.
/// Serialized: two tests count on DPoPKeyCache, and one fills it past its capacity.
@Suite(.serialized) struct DPoPProofTests {
    init() { DPoP.install() }

    @Test func theThumbprintIsRFC7638sExample() {
        // RFC 7638 §3.1.
        let jwk = [
            "kty": "RSA", "e": "AQAB", "alg": "RS256", "kid": "2011-04-29",
            "n":
                "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw",
        ]
        #expect(DPoPKey.thumbprint(of: jwk) == "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs")
    }

    @Test func athIsRFC9449sExample() {
        // RFC 9449 §7.1.
        #expect(DPoPKey.accessTokenHash("Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU") == "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo")
    }

    @Test(arguments: [DPoPAlgorithm.es256, .edDSA])
    func aProofHasEveryClaimAndASignatureSwiftCryptoAccepts(algorithm: DPoPAlgorithm) throws {
        let key = try DPoPKey.generate(algorithm)
        let url = try #require(URL(string: "https://RS.example.com:8443/api/items?filter=secret#frag"))
        let at = Date(timeIntervalSince1970: 1_790_000_000)
        let proof = try key.proof(method: "GET", url: url, nonce: "eyJ7S_zG.eyJH0-Z.HX4w-7v", accessToken: "tvx.access-1", issuedAt: at)
        let parts = proof.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        #expect(parts.count == 3)
        let header = try Self.json(parts[0])
        #expect(header["typ"] as? String == "dpop+jwt")
        #expect(header["alg"] as? String == algorithm.name)
        let jwk = try #require(header["jwk"] as? [String: String])
        #expect(jwk["d"] == nil, "the header's JWK holds the public key only")
        #expect(DPoPKey.thumbprint(of: jwk) == key.thumbprint)
        let claims = try Self.json(parts[1])
        #expect(claims["htm"] as? String == "GET")
        #expect(claims["htu"] as? String == "https://rs.example.com:8443/api/items", "no query, no fragment")
        #expect((claims["iat"] as? NSNumber)?.int64Value == 1_790_000_000)
        #expect(claims["nonce"] as? String == "eyJ7S_zG.eyJH0-Z.HX4w-7v")
        #expect(claims["ath"] as? String == DPoPKey.accessTokenHash("tvx.access-1"))
        let jti = try #require(claims["jti"] as? String)
        #expect(jti.count >= 22)

        // Verified by swift-crypto over the JWS signing input.
        let input = Data((parts[0] + "." + parts[1]).utf8)
        let signature = try #require(Base64URL.decode(parts[2]))
        switch algorithm {
        case .es256:
            let x = try #require(Base64URL.decode(jwk["x"] ?? ""))
            let y = try #require(Base64URL.decode(jwk["y"] ?? ""))
            let publicKey = try P256.Signing.PublicKey(rawRepresentation: x + y)
            #expect(jwk["kty"] == "EC" && jwk["crv"] == "P-256")
            #expect(publicKey.isValidSignature(try P256.Signing.ECDSASignature(rawRepresentation: signature), for: input))
            var tampered = Array(input)
            tampered[tampered.count - 1] ^= 1
            #expect(!publicKey.isValidSignature(try P256.Signing.ECDSASignature(rawRepresentation: signature), for: tampered))
        default:
            let x = try #require(Base64URL.decode(jwk["x"] ?? ""))
            let publicKey = try Curve25519.Signing.PublicKey(rawRepresentation: x)
            #expect(jwk["kty"] == "OKP" && jwk["crv"] == "Ed25519")
            #expect(publicKey.isValidSignature(signature, for: input))
        }
    }

    @Test func everyProofHasItsOwnJTIAndATokenRequestHasNoATH() throws {
        let key = try DPoPKey.generate()
        let url = try #require(URL(string: "https://as.example.com/token"))
        var seen = Set<String>()
        for _ in 0..<200 {
            let claims = try Self.json(String(try key.proof(method: "POST", url: url).split(separator: ".")[1]))
            #expect(claims["ath"] == nil && claims["nonce"] == nil)
            seen.insert(try #require(claims["jti"] as? String))
        }
        #expect(seen.count == 200)
    }

    @Test func badMethodsURLsAndNoncesAreRefusedNotSigned() throws {
        let key = try DPoPKey.generate()
        let url = try #require(URL(string: "https://as.example.com/token"))
        #expect(throws: VaultError.self) { try key.proof(method: "GE T", url: url) }
        #expect(throws: VaultError.self) { try key.proof(method: "POST", url: try #require(URL(string: "ftp://as.example.com/x"))) }
        #expect(throws: VaultError.self) { try key.proof(method: "POST", url: url, nonce: "a\"b") }
        #expect(throws: VaultError.self) { try key.proof(method: "POST", url: url, nonce: "") }
    }

    @Test func theKeyIsSealedInItsEntryAndShownNowhere() async throws {
        let key = try DPoPKey.generate()
        let d = key.privateKey.withUnsafeBytes { Base64URL.encode($0) }
        for shown in ["\(key)", String(reflecting: key), Self.dumped(key)] {
            #expect(!shown.contains(d))
            #expect(shown.contains(key.thumbprint))
        }
        let vault = Vault(store: MemoryStore())
        let entryKey = try CredentialKey(service: "dpop", account: "sealed")
        let token = OAuthToken(accessToken: "tvx.bound", tokenType: "DPoP", refreshToken: "tvx.refresh", expiresAt: Date().addingTimeInterval(600))
        try await vault.saveToken(token, for: entryKey, registration: nil, dpopKey: key)
        let entry = try #require(try await vault.tokenEntry(for: entryKey))
        #expect(!"\(entry)".contains(d))
        #expect(try await vault.dpopKeyInfo(for: entryKey)?.thumbprint == key.thumbprint)
        // Read back, it signs as the same key.
        let stored = try #require(try await vault.storedEntry(for: entryKey)?.dpop)
        #expect(stored == key)
        // saveToken(_:for:) keeps the key (what the entry knows is not dropped).
        try await vault.saveToken(token, for: entryKey)
        #expect(try await vault.dpopKeyInfo(for: entryKey)?.thumbprint == key.thumbprint)
        // The resource headers: DPoP scheme, a proof with ath, never Bearer.
        let url = try #require(URL(string: "https://rs.example.com/api/me"))
        let headers = try await vault.authorizationHeaders(for: entryKey, method: "GET", url: url)
        #expect(headers.authorization == "DPoP tvx.bound")
        let proof = try #require(headers.dpopProof)
        #expect(try Self.json(String(proof.split(separator: ".")[1]))["ath"] as? String == DPoPKey.accessTokenHash("tvx.bound"))
        #expect(!"\(headers)".contains("tvx.bound") && !"\(headers)".contains(proof))
    }

    @Test func aRotatedKeyNeedsANewGrant() async throws {
        let vault = Vault(store: MemoryStore())
        let entryKey = try CredentialKey(service: "dpop", account: "rotated")
        let key = try DPoPKey.generate()
        let token = OAuthToken(accessToken: "tvx.bound", tokenType: "DPoP", refreshToken: "tvx.refresh", expiresAt: Date().addingTimeInterval(600))
        try await vault.saveToken(token, for: entryKey, registration: nil, dpopKey: key)
        let thumbprint = try await vault.rotateDPoPKey(for: entryKey)
        #expect(thumbprint != key.thumbprint)
        #expect(try await vault.dpopKeyInfo(for: entryKey)?.thumbprint == thumbprint)
        let error = await #expect(throws: VaultError.self) { try await vault.freshToken(for: entryKey) }
        #expect(error?.code == .reauthenticationRequired)
        #expect(error?.message.contains("rotated") == true)
    }

    /// Reads of one entry share the key loaded the first time (its secure memory and its signer's
    /// form: DPoPKeyCache); an entry whose private key is not the kept one's, even under the same
    /// public key and thumbprint, is loaded from its own bytes; a rotation and a logout forget the
    /// key; no more than the cache's capacity is kept.
    @Test func readsOfAnEntryShareItsLoadedKeyAndNoOtherEntryGetsIt() async throws {
        let vault = Vault(store: MemoryStore())
        let entryKey = try CredentialKey(service: "dpop", account: "kept")
        let key = try DPoPKey.generate()
        let token = OAuthToken(accessToken: "tvx.bound", tokenType: "DPoP", refreshToken: "tvx.refresh", expiresAt: Date().addingTimeInterval(600))
        try await vault.saveToken(token, for: entryKey, registration: nil, dpopKey: key)
        let first = try #require(try await vault.storedEntry(for: entryKey)?.dpop)
        let second = try #require(try await vault.storedEntry(for: entryKey)?.dpop)
        #expect(first.privateKey === second.privateKey, "the second read loaded the key again")
        #expect(first.privateKey == key.privateKey)
        #expect(DPoPKeyCache.holds(key.thumbprint))

        // The same public key and thumbprint with another private key (a hand-made entry): its own bytes.
        let other = try DPoPKey.generate()
        var forged = StoredDPoPKey(key)
        forged.d = other.privateKey.withUnsafeBytes { Base64URL.encode($0) }
        let loaded = try forged.key()
        #expect(loaded.privateKey !== first.privateKey)
        #expect(loaded.privateKey == other.privateKey)
        // ... and a stored thumbprint that is not its public key's is refused as before.
        var mismatched = StoredDPoPKey(key)
        mismatched.jkt = other.thumbprint
        #expect(throws: VaultError.self) { try mismatched.key() }
        // The entry itself still reads as its own key.
        #expect(try #require(try await vault.storedEntry(for: entryKey)?.dpop).privateKey == key.privateKey)

        try await vault.rotateDPoPKey(for: entryKey)
        #expect(!DPoPKeyCache.holds(key.thumbprint), "a rotated key stays in memory")
        let rotated = try #require(try await vault.storedEntry(for: entryKey)?.dpop)
        #expect(DPoPKeyCache.holds(rotated.thumbprint))
        _ = try await vault.logout(entryKey, forgetAnyway: true)
        #expect(!DPoPKeyCache.holds(rotated.thumbprint), "a logged-out key stays in memory")

        let many = try (0...DPoPKeyCache.capacity).map { _ in try StoredDPoPKey(DPoPKey.generate()) }
        for stored in many { _ = try stored.key() }
        #expect(!DPoPKeyCache.holds(many[0].jkt), "more keys kept than the cache's capacity")
        #expect(DPoPKeyCache.holds(many[DPoPKeyCache.capacity].jkt))
    }

    /// A Bearer entry has no key to rotate: refused, and the entry (a working token) is unchanged.
    @Test func rotatingABearerEntryChangesNothing() async throws {
        let vault = Vault(store: MemoryStore())
        let entryKey = try CredentialKey(service: "bearer", account: "kept")
        let token = OAuthToken(accessToken: "tvx.bearer", refreshToken: "tvx.refresh", expiresAt: Date().addingTimeInterval(600))
        try await vault.saveToken(token, for: entryKey)
        let error = await #expect(throws: VaultError.self) { try await vault.rotateDPoPKey(for: entryKey) }
        #expect(error?.code == .invalidInput)
        #expect(error?.message.contains("not DPoP-bound") == true)
        #expect(try await vault.dpopKeyInfo(for: entryKey) == nil)
        #expect(try await vault.freshToken(for: entryKey).accessToken == "tvx.bearer")
    }

    /// base64url is written over bytes (not through Foundation and `replacingOccurrences`): every
    /// length agrees with Foundation's base64 with the URL alphabet and no padding, and decoding
    /// takes back exactly what was encoded and nothing else.
    @Test func base64URLAgreesWithFoundationAndRefusesWhatIsNotBase64URL() {
        var generator = SystemRandomNumberGenerator()
        for length in 0...70 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let expected = Data(bytes).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            let encoded = Base64URL.encode(bytes)
            #expect(encoded == expected, "length \(length)")
            #expect(Base64URL.encode(Data(bytes)) == expected, "length \(length), from Data")
            #expect(Base64URL.decode(encoded) == bytes, "length \(length)")
        }
        #expect(Base64URL.encode([0xFB, 0xFF]) == "-_8")
        for refused in ["ab=", "a+b/", "abcde", "ab c", "AB", "ä"] {
            #expect(Base64URL.decode(refused) == nil, "\(refused)")
        }
        #expect(Base64URL.decode("AA") == [0])
    }

    /// The agent reads a DPoP-bound entry once for each proof it signs: the token and its key
    /// come from the same read (it read the entry twice, once for the token and once more for
    /// the key). Counted on the agent's own answer path by the reads that handed out the
    /// entry's key (DPoPKeyCache), for a `fresh` request (what clients send) and a plain one.
    @Test func theAgentReadsTheEntryOncePerProof() async throws {
        let vault = Vault(store: MemoryStore())
        let entryKey = try CredentialKey(service: "dpop", account: "agent-proofs")
        let key = try DPoPKey.generate()
        let token = OAuthToken(accessToken: "tvx.agent", tokenType: "DPoP", refreshToken: "tvx.refresh", expiresAt: Date().addingTimeInterval(3600))
        let registration = try ClientRegistration(tokenEndpoint: try #require(URL(string: "https://as.invalid/token")), clientID: "tokenvault-test")
        try await vault.saveToken(token, for: entryKey, registration: registration, dpopKey: key)
        let agent = AgentServer(
            options: .init(socketPath: "/nonexistent/agent.sock"), identity: "test-vault", opensItself: true, log: { _ in },
            opener: { _ in vault })
        let url = try #require(URL(string: "https://rs.invalid/api/data"))
        _ = try #require(try await vault.storedEntry(for: entryKey)?.dpop)  // the key kept from here on
        for fresh in [true, false] {
            let before = DPoPKeyCache.reads(of: key.thumbprint)
            for _ in 0..<5 {
                let request = AgentProofRequest(token: AgentTokenRequest(key: entryKey, fresh: fresh, vault: "test-vault"), method: "GET", url: url)
                guard case .authorization(let answer) = await agent.answer(.proof(request)) else {
                    Issue.record("the agent signed no proof (fresh: \(fresh))")
                    return
                }
                let proof = try #require(answer.dpopProof)
                #expect(answer.token.accessToken == "tvx.agent")
                #expect(try Self.json(String(proof.split(separator: ".")[1]))["ath"] as? String == DPoPKey.accessTokenHash("tvx.agent"))
            }
            #expect(DPoPKeyCache.reads(of: key.thumbprint) - before == 5, "5 proofs (fresh: \(fresh)) read the entry more than 5 times")
        }
    }

    static func json(_ part: String) throws -> [String: Any] {
        let bytes = try #require(Base64URL.decode(part))
        return try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }

    static func dumped(_ value: some Any) -> String {
        var text = ""
        dump(value, to: &text)
        return text
    }
}
#endif
