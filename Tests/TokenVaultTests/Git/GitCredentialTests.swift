import Foundation
import Testing
@testable import TokenVault
@testable import TokenVaultGit

/// git's credential protocol on strings, and the helper's mapping and rules over a memory vault.
/// Real git drives the same code in RefreshServerTests/GitCredentialServerTests.
@Suite struct GitCredentialTests {
    static let secret = "tv-git-password-DO-NOT-SHOW-5e1b"

    private func parse(_ text: String) throws -> GitCredentialRequest {
        try GitCredentialRequest(parsing: Data(text.utf8))
    }

    // MARK: Protocol

    @Test func parsesWhatGitSendsAndIgnoresUnknownKeys() throws {
        let request = try parse(
            "capability[]=authtype\nprotocol=https\nhost=git.example.com:8443\npath=org/repo.git\nusername=alice\n"
                + "password=\(Self.secret)\npassword_expiry_utc=1900000000\noauth_refresh_token=rt-1\nwwwauth[]=Basic realm=\"x\"\n"
                + "future_key=whatever\n\nhost=after-the-blank-line\n")
        #expect(request.scheme == "https")
        #expect(request.host == "git.example.com:8443")
        #expect(request.path == "org/repo.git")
        #expect(request.username == "alice")
        #expect(request.password == Self.secret)
        #expect(request.passwordExpiry == Date(timeIntervalSince1970: 1_900_000_000))
        #expect(request.oauthRefreshToken == "rt-1")
    }

    @Test func valuesKeepEqualsSignsAndCarriageReturnsAreDropped() throws {
        let request = try parse("protocol=https\r\nhost=h\r\npassword=a=b==\r\n")
        #expect(request.password == "a=b==")
        #expect(request.host == "h")
    }

    @Test func endOfInputEndsTheRequestAndEmptyInputIsEmpty() throws {
        #expect(try parse("host=h").host == "h")
        #expect(try parse("") == GitCredentialRequest())
    }

    @Test func anExpiryThatIsNotAPositiveNumberMeansNone() throws {
        for value in ["", "soon", "-5", "0", "99999999999999999999999"] {
            #expect(try parse("password_expiry_utc=\(value)\n").passwordExpiry == nil, "\(value)")
        }
    }

    @Test func urlIsSplitAndReplacesWhatCameBefore() throws {
        let request = try parse("username=old\npath=x\nurl=https://bob@Git.Example.com:8443/org/repo.git\n")
        #expect(request.scheme == "https")
        #expect(request.host == "Git.Example.com:8443")
        #expect(request.username == "bob")
        #expect(request.path == "org/repo.git")
        #expect(request.password == nil)
    }

    @Test func badInputIsRefusedWithoutQuotingIt() throws {
        for text in ["host=h\n\(Self.secret)\n", "password=\(Self.secret)\0\n", "url=\(Self.secret)\n"] {
            do {
                _ = try parse(text)
                Issue.record("accepted \(text.count) bytes of bad input")
            } catch let error as VaultError {
                #expect(error.code == .invalidInput)
                #expect(!error.message.contains(Self.secret))
                #expect(!"\(error)".contains(Self.secret))
            }
        }
        var tooLong = Data("password=".utf8)
        tooLong.append(Data(repeating: UInt8(ascii: "a"), count: GitCredentialRequest.maximumLength))
        #expect(throws: VaultError.self) { try GitCredentialRequest(parsing: tooLong) }
        #expect(throws: VaultError.self) { try GitCredentialRequest(parsing: Data([0x68, 0x3D, 0xFF, 0x0A])) }
    }

    @Test func descriptionsNeverShowSecrets() throws {
        let request = try parse("host=h\npassword=\(Self.secret)\noauth_refresh_token=\(Self.secret)\n")
        let response = GitCredentialResponse(username: "u", password: Self.secret)
        for text in [request.description, request.debugDescription, "\(request)", response.description, "\(response)"] {
            #expect(!text.contains(Self.secret))
        }
        var dumped = ""
        dump(request, to: &dumped)
        dump(response, to: &dumped)
        #expect(!dumped.contains(Self.secret))
    }

    @Test func answersAreKeyValueLines() throws {
        let expiry = Date(timeIntervalSince1970: 1_900_000_000.7)
        #expect(
            try GitCredentialResponse(username: "alice", password: "tok=en", passwordExpiry: expiry).formatted()
                == "username=alice\npassword=tok=en\npassword_expiry_utc=1900000000\n")
        #expect(try GitCredentialResponse(username: "a", password: "b").formatted() == "username=a\npassword=b\n")
        for bad in ["a\nhost=evil", "a\r", "a\r\nb", "a\0"] {
            #expect(throws: VaultError.self) { try GitCredentialResponse(username: "u", password: bad).formatted() }
            #expect(throws: VaultError.self) { try GitCredentialResponse(username: bad, password: "p").formatted() }
        }
    }

    // MARK: Mapping

    @Test func theDefaultEntryIsHostAndUsernameOrDefault() throws {
        let helper = GitCredentialHelper()
        #expect(try helper.key(for: parse("protocol=https\nhost=Git.Example.com:8443\nusername=alice\n"))
            == CredentialKey(service: "git.example.com:8443", account: "alice"))
        #expect(try helper.key(for: parse("protocol=https\nhost=github.com\n"))
            == CredentialKey(service: "github.com", account: "default"))
        #expect(try helper.key(for: parse("protocol=cert\npath=/etc/cert.p12\n")) == nil)
    }

    @Test func serviceAndAccountCanBePinned() throws {
        let request = try parse("protocol=https\nhost=github.com\nusername=alice\n")
        #expect(try GitCredentialHelper(service: "github").key(for: request) == CredentialKey(service: "github", account: "alice"))
        #expect(
            try GitCredentialHelper(service: "github", account: "bot").key(for: request)
                == CredentialKey(service: "github", account: "bot"))
        #expect(try GitCredentialHelper(service: "github").key(for: parse("protocol=cert\n")) == CredentialKey(service: "github"))
    }

    @Test func plainHTTPIsAnsweredOnlyOnLoopback() throws {
        let helper = GitCredentialHelper()
        #expect(helper.mayAnswer(try parse("protocol=https\nhost=example.com\n")))
        #expect(!helper.mayAnswer(try parse("protocol=http\nhost=example.com\n")))
        #expect(!helper.mayAnswer(try parse("protocol=HTTP\nhost=example.com:80\n")))
        #expect(helper.mayAnswer(try parse("protocol=http\nhost=127.0.0.1:8080\n")))
        #expect(helper.mayAnswer(try parse("protocol=http\nhost=localhost\n")))
        #expect(helper.mayAnswer(try parse("protocol=http\nhost=[::1]:8080\n")))
        #expect(!helper.mayAnswer(try parse("protocol=http\nhost=127.0.0.1.example.com\n")))
    }

    /// Issue 34, point 5: git hands a helper's password to `git imap-send` (`LOGIN user token` in
    /// clear) and to curl's `ftp://` (`PASS token`). Only https, and http on loopback, get one;
    /// store and erase ignore the rest, so an imap request can neither fill nor empty the entry
    /// of an https host of the same name.
    @Test func onlyHTTPSAndLoopbackHTTPAreAnswered() async throws {
        let helper = GitCredentialHelper()
        for scheme in ["imap", "imaps", "smtp", "ftp", "ftps", "ldap", "cert", "HTTPX"] {
            #expect(!helper.mayAnswer(try parse("protocol=\(scheme)\nhost=mail.example.com\n")), "\(scheme)")
            #expect(!helper.mayAnswer(try parse("protocol=\(scheme)\nhost=127.0.0.1\n")), "\(scheme) on loopback")
        }
        #expect(!helper.mayAnswer(try parse("host=git.example.com\n")), "no protocol at all")
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "mail.example.com", account: "alice")
        try await vault.saveToken(OAuthToken(accessToken: "ghp_mailtoken"), for: key)
        let imap = "protocol=imap\nhost=mail.example.com\nusername=alice\n"
        #expect(try await helper.get(try parse(imap), from: vault) == nil)
        #expect(try await helper.store(try parse(imap + "password=other\n"), in: vault) == .ignored)
        #expect(try await helper.erase(try parse(imap + "password=ghp_mailtoken\n"), from: vault) == false)
        #expect(try await vault.token(for: key)?.accessToken == "ghp_mailtoken")
        #expect(try await helper.get(try parse("protocol=https\nhost=mail.example.com\nusername=alice\n"), from: vault)?.password == "ghp_mailtoken")
    }

    // MARK: get, store, erase on a memory vault

    private func request(_ extra: String = "") throws -> GitCredentialRequest {
        try parse("protocol=https\nhost=git.example.com\nusername=alice\n" + extra)
    }

    @Test func getAnswersAFreshTokenAndNothingWithoutAnEntry() async throws {
        let vault = Vault(store: MemoryStore())
        let helper = GitCredentialHelper()
        #expect(try await helper.get(try request(), from: vault) == nil)
        let expiry = Date().addingTimeInterval(3600)
        try await vault.saveToken(
            OAuthToken(accessToken: Self.secret, expiresAt: expiry), for: CredentialKey(service: "git.example.com", account: "alice"))
        let answer = try #require(try await helper.get(try request(), from: vault))
        #expect(answer == GitCredentialResponse(username: "alice", password: Self.secret, passwordExpiry: OAuthToken.wholeSeconds(expiry)))
        // Another user on the same host has no entry.
        #expect(try await helper.get(try parse("protocol=https\nhost=git.example.com\nusername=bob\n"), from: vault) == nil)
        // Plain http to the same host gets nothing.
        #expect(try await helper.get(try parse("protocol=http\nhost=git.example.com\nusername=alice\n"), from: vault) == nil)
    }

    @Test func getWithoutAUsernameAnswersTheConfiguredOneOrTheAccount() async throws {
        let vault = Vault(store: MemoryStore())
        try await vault.saveToken(OAuthToken(accessToken: "t"), for: CredentialKey(service: "github"))
        let request = try parse("protocol=https\nhost=github.com\n")
        #expect(try await GitCredentialHelper(service: "github").get(request, from: vault)?.username == "default")
        #expect(try await GitCredentialHelper(service: "github", username: "oauth2").get(request, from: vault)?.username == "oauth2")
    }

    /// git sends no username for a URL without one, also after it prompted for one and stored the
    /// credential under what was typed: the host's only entry answers, as git's own storage helpers
    /// match a missing field against any value.
    @Test func withoutAUsernameTheHostsDefaultOrOnlyEntryIsUsed() async throws {
        let vault = Vault(store: MemoryStore())
        let helper = GitCredentialHelper()
        let bare = try parse("protocol=https\nhost=git.example.com\n")
        let alice = try CredentialKey(service: "git.example.com", account: "alice")
        #expect(try await helper.get(bare, from: vault) == nil)
        try await vault.saveToken(OAuthToken(accessToken: "alice-token"), for: alice)
        #expect(try await helper.entryKey(for: bare, in: vault) == alice)
        #expect(try await helper.get(bare, from: vault) == GitCredentialResponse(username: "alice", password: "alice-token"))
        // A user name git does send must match; a pinned account is never replaced.
        #expect(try await helper.get(try parse("protocol=https\nhost=git.example.com\nusername=bob\n"), from: vault) == nil)
        #expect(try await GitCredentialHelper(account: "bob").get(bare, from: vault) == nil)
        // Another host's entries do not count.
        try await vault.saveToken(OAuthToken(accessToken: "other"), for: CredentialKey(service: "git.example.org", account: "carol"))
        #expect(try await helper.entryKey(for: bare, in: vault) == alice)

        // Two accounts and no default: no answer, and both are named for the note.
        try await vault.saveToken(OAuthToken(accessToken: "bob-token"), for: CredentialKey(service: "git.example.com", account: "bob"))
        #expect(try await helper.get(bare, from: vault) == nil)
        #expect(try await helper.accounts(for: bare, in: vault) == ["alice", "bob"])
        #expect(try await helper.erase(try parse("protocol=https\nhost=git.example.com\npassword=alice-token\n"), from: vault) == false)
        #expect(try await vault.token(for: alice)?.accessToken == "alice-token")
        // With a default entry, that one.
        try await vault.saveToken(OAuthToken(accessToken: "default-token"), for: CredentialKey(service: "git.example.com"))
        #expect(try await helper.get(bare, from: vault)?.password == "default-token")

        // erase without a username removes the only entry when the password is its own.
        let single = Vault(store: MemoryStore())
        try await single.saveToken(OAuthToken(accessToken: "alice-token"), for: alice)
        #expect(try await helper.erase(try parse("protocol=https\nhost=git.example.com\npassword=stale\n"), from: single) == false)
        #expect(try await helper.erase(try parse("protocol=https\nhost=git.example.com\npassword=alice-token\n"), from: single))
        #expect(try await single.keys().isEmpty)
    }

    /// git sends back, with `store`, the user name the helper answered in place of none: that names
    /// the same entry, not a new one beside it.
    @Test func theConfiguredUsernameComingBackNamesTheSameEntry() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "github")
        try await vault.saveToken(OAuthToken(accessToken: "t"), for: key)
        let helper = GitCredentialHelper(service: "github", username: "oauth2")
        let answer = try #require(try await helper.get(try parse("protocol=https\nhost=github.com\n"), from: vault))
        #expect(answer.username == "oauth2")
        let approve = try parse("protocol=https\nhost=github.com\nusername=oauth2\npassword=t\npassword_expiry_utc=1900000000\n")
        #expect(try await helper.store(approve, in: vault) == .updated)
        #expect(try await vault.keys() == [key])
        #expect(try await vault.token(for: key)?.expiresAt == Date(timeIntervalSince1970: 1_900_000_000))
    }

    @Test func getOfAnExpiredTokenWithoutADescriptionThrowsExpired() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "git.example.com", account: "alice")
        try await vault.saveToken(OAuthToken(accessToken: Self.secret, expiresAt: Date().addingTimeInterval(-10)), for: key)
        do {
            _ = try await GitCredentialHelper().get(try request(), from: vault)
            Issue.record("answered an expired token")
        } catch let error as VaultError {
            #expect(error.code == .expired)
            #expect(!error.message.contains(Self.secret))
        }
    }

    @Test func storeKeepsExpiryAndRefreshTokenGitSends() async throws {
        let vault = Vault(store: MemoryStore())
        let helper = GitCredentialHelper()
        let key = try CredentialKey(service: "git.example.com", account: "alice")
        let outcome = try await helper.store(
            try request("password=\(Self.secret)\npassword_expiry_utc=1900000000\noauth_refresh_token=rt-1\n"), in: vault)
        #expect(outcome == .saved)
        let token = try #require(try await vault.token(for: key))
        #expect(token.accessToken == Self.secret)
        #expect(token.expiresAt == Date(timeIntervalSince1970: 1_900_000_000))
        #expect(token.refreshToken == "rt-1")
        // git 2.39 stores what worked without the expiry: nothing is lost.
        #expect(try await helper.store(try request("password=\(Self.secret)\n"), in: vault) == .unchanged)
        #expect(try await vault.token(for: key) == token)
        // A rotated refresh token for the same password is merged.
        #expect(try await helper.store(try request("password=\(Self.secret)\noauth_refresh_token=rt-2\n"), in: vault) == .updated)
        #expect(try await vault.token(for: key)?.refreshToken == "rt-2")
        #expect(try await vault.token(for: key)?.expiresAt == Date(timeIntervalSince1970: 1_900_000_000))
        // A new password on a plain entry replaces it.
        #expect(try await helper.store(try request("password=other\n"), in: vault) == .saved)
        #expect(try await vault.token(for: key)?.accessToken == "other")
        #expect(try await vault.token(for: key)?.refreshToken == nil)
        // Nothing to store without a password or a host.
        #expect(try await helper.store(try request(), in: vault) == .ignored)
        #expect(try await helper.store(try parse("protocol=cert\npassword=x\n"), in: vault) == .ignored)
    }

    @Test func storeNeverReplacesAnEntryTheVaultRefreshes() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "github")
        let description = try ClientRegistration(
            tokenEndpoint: try #require(URL(string: "https://auth.example.com/token")), clientID: "cli")
        let token = OAuthToken(accessToken: "fresh", refreshToken: "rt", expiresAt: Date().addingTimeInterval(3600))
        try await vault.saveToken(token, for: key, registration: description)
        let helper = GitCredentialHelper(service: "github", account: "default")
        // A stale copy of an older token, as git stores after using it.
        #expect(try await helper.store(try request("password=older\n"), in: vault) == .keptManagedEntry)
        #expect(try await vault.token(for: key) == token)
        #expect(try await vault.registration(for: key) == description)
        // Its own token with an expiry: merged, the description kept.
        #expect(try await helper.store(try request("password=fresh\npassword_expiry_utc=1900000000\n"), in: vault) == .updated)
        #expect(try await vault.registration(for: key) == description)
        #expect(try await vault.token(for: key)?.expiresAt == Date(timeIntervalSince1970: 1_900_000_000))
    }

    @Test func eraseRemovesOnlyTheTokenGitNames() async throws {
        let vault = Vault(store: MemoryStore())
        let helper = GitCredentialHelper()
        let key = try CredentialKey(service: "git.example.com", account: "alice")
        try await vault.saveToken(OAuthToken(accessToken: "fresh"), for: key)
        #expect(try await helper.erase(try request("password=stale\n"), from: vault) == false)
        #expect(try await helper.erase(try request(), from: vault) == false)
        #expect(try await helper.erase(try request("password=fres\n"), from: vault) == false)
        #expect(try await vault.token(for: key)?.accessToken == "fresh")
        #expect(try await helper.erase(try request("password=fresh\n"), from: vault) == true)
        #expect(try await vault.token(for: key) == nil)
        #expect(try await helper.erase(try request("password=fresh\n"), from: vault) == false)
    }

    /// Issue 34, point 6: git calls erase after any 401. An entry the vault refreshes itself keeps
    /// its refresh token and description; only its access token stops being answered (it is
    /// marked expired), so the next get refreshes instead of needing a new login.
    @Test func eraseOfAnEntryTheVaultRefreshesKeepsWhatRefreshesIt() async throws {
        let vault = Vault(store: MemoryStore())
        let helper = GitCredentialHelper()
        let key = try CredentialKey(service: "git.example.com", account: "alice")
        let description = try ClientRegistration(
            tokenEndpoint: try #require(URL(string: "https://auth.example.com/token")), clientID: "c",
            clientAuthentication: .clientSecretBasic("tv-client-secret"))
        let token = OAuthToken(accessToken: "refused", refreshToken: "rt-kept", expiresAt: Date().addingTimeInterval(3600))
        try await vault.saveToken(token, for: key, registration: description)
        #expect(try await helper.erase(try request("password=other\n"), from: vault) == false)
        #expect(try await vault.token(for: key)?.isExpired() == false)
        #expect(try await helper.erase(try request("password=refused\n"), from: vault) == true)
        let kept = try #require(try await vault.token(for: key), "erase removed the entry vault login made")
        #expect(kept.refreshToken == "rt-kept")
        #expect(kept.isExpired(leeway: 0), "the refused access token is still taken as valid")
        #expect(try await vault.registration(for: key) == description)
        #expect(try await vault.registration(for: key)?.clientAuthentication.secret == "tv-client-secret")
        // A second erase of the same token changes nothing more.
        #expect(try await helper.erase(try request("password=refused\n"), from: vault) == false)
        #expect(try await vault.token(for: key)?.refreshToken == "rt-kept")
    }

    /// git stores whatever password worked, and a password is not always a bearer token: one with
    /// `@` or `!` is kept (as a Basic token) and answered; one that no token can hold is refused
    /// in words that say git will ask again, without the password.
    @Test func aPasswordThatIsNoBearerTokenIsKeptOrRefusedClearly() async throws {
        let vault = Vault(store: MemoryStore())
        let helper = GitCredentialHelper()
        let key = try CredentialKey(service: "git.example.com", account: "alice")
        #expect(try await helper.store(try request("password=p@ssw0rd!\n"), in: vault) == .saved)
        #expect(try await vault.token(for: key)?.tokenType == "Basic")
        #expect(try await helper.get(try request(), from: vault)?.password == "p@ssw0rd!")
        #expect(try await helper.store(try request("password=gho_bearerLike123\n"), in: vault) == .saved)
        #expect(try await vault.token(for: key)?.tokenType == "Bearer")
        for bad in ["two words", "pässword"] {
            let error = await #expect(throws: VaultError.self) { try await helper.store(try request("password=\(bad)\n"), in: vault) }
            #expect(error?.code == .invalidInput)
            #expect(error?.message.contains("git will ask for it again") == true, "\(String(describing: error))")
            #expect(error.map { !$0.message.contains(bad) } == true)
        }
        #expect(try await vault.token(for: key)?.accessToken == "gho_bearerLike123")
    }

    @Test func anOpaqueSecretIsNeitherAnsweredNorOverwritten() async throws {
        let vault = Vault(store: MemoryStore())
        let key = try CredentialKey(service: "git.example.com", account: "alice")
        try await vault.saveSecret(Data("api-key".utf8), for: key)
        let helper = GitCredentialHelper()
        await #expect(throws: VaultError.self) { _ = try await helper.get(try request(), from: vault) }
        await #expect(throws: VaultError.self) { try await helper.store(try request("password=x\n"), in: vault) }
        await #expect(throws: VaultError.self) { try await helper.erase(try request("password=x\n"), from: vault) }
        #expect(try await vault.secret(for: key) == Data("api-key".utf8))
    }
}
