import Foundation
import Testing
import TokenVault

import Glibc

/// The system agent's policy file: what it grants, what it refuses to read. The peers themselves
/// (real users through a real agent) are SystemAgentTests'.
@Suite struct AgentPolicyTests {
    private func policy(_ text: String) throws -> AgentPolicy {
        try AgentPolicy(
            text: text, user: { ["www-data": 33, "app": 1001][$0] }, group: { ["webapps": 2000][$0] })
    }

    @Test func grantsNamedEntriesPrefixesAndAnyAccount() throws {
        let policy = try policy("""
            # comment, then a blank line

            user www-data   api.example.com   deploy
            \tgroup webapps github *\r
            uid 1002 reports.*  *
            gid 7 plain
            """)
        #expect(policy.grants.map(\.line) == [3, 4, 5, 6])
        let api = try CredentialKey(service: "api.example.com", account: "deploy")
        #expect(policy.grants(uid: 33, gid: 33, groups: []).allow(api))
        #expect(!policy.grants(uid: 33, gid: 33, groups: []).allow(try CredentialKey(service: "api.example.com", account: "other")))
        #expect(!policy.grants(uid: 34, gid: 34, groups: []).allow(api))
        // A group counts as primary or supplementary.
        let github = try CredentialKey(service: "github", account: "anyone")
        #expect(policy.grants(uid: 5, gid: 2000, groups: []).allow(github))
        #expect(policy.grants(uid: 5, gid: 5, groups: [9, 2000]).allow(github))
        #expect(!policy.grants(uid: 5, gid: 5, groups: [9]).allow(github))
        #expect(!policy.grants(uid: 5, gid: 2000, groups: []).allow(try CredentialKey(service: "github.enterprise", account: "a")))
        // A prefix, and an account left out meaning "default".
        #expect(policy.grants(uid: 1002, gid: 1, groups: []).allow(try CredentialKey(service: "reports.eu", account: "x")))
        #expect(!policy.grants(uid: 1002, gid: 1, groups: []).allow(try CredentialKey(service: "report", account: "x")))
        #expect(policy.grants(uid: 9, gid: 7, groups: []).allow(try CredentialKey(service: "plain")))
        #expect(!policy.grants(uid: 9, gid: 7, groups: []).allow(try CredentialKey(service: "plain", account: "other")))
        #expect(try self.policy("").grants.isEmpty)
    }

    @Test(arguments: [
        ("allow www-data svc", "line 1: unknown key \"allow\""),
        ("user nobody-here svc", "line 1: there is no user \"nobody-here\""),
        ("group nogroup-here svc", "line 1: there is no group"),
        ("uid x svc", "line 1: uid takes a number"),
        ("\nuser www-data", "line 2: a grant is WHO NAME SERVICE [ACCOUNT]"),
        ("user www-data svc acct more", "line 1: a grant has at most four fields"),
        ("user www-data s*c", "* may only end a service name"),
        ("user www-data **", "* may only end a service name"),
        ("user www-data svc a*", "an account is a name or *"),
    ])
    func refusesWhatItDoesNotKnow(text: String, words: String) {
        let error = #expect(throws: VaultError.self) { try policy(text) }
        #expect(error?.code == .configurationError)
        #expect(error?.message.contains(words) == true, "\(error?.message ?? "")")
    }

    @Test func refusesAFileOthersCanWriteOrALink() throws {
        let directory = NSTemporaryDirectory() + "tv-policy-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/policy"
        #expect(FileManager.default.createFile(atPath: path, contents: Data("uid 1 svc\n".utf8)))
        for mode in [0o600, 0o644, 0o444] {
            #expect(chmod(path, mode_t(mode)) == 0)
            #expect(try AgentPolicy.load(path: path).grants.count == 1)
        }
        for mode in [0o664, 0o646, 0o666] {
            #expect(chmod(path, mode_t(mode)) == 0)
            let error = #expect(throws: VaultError.self) { try AgentPolicy.load(path: path) }
            #expect(error?.code == .insecurePermissions && error?.message.contains("writable by its group or others") == true)
        }
        #expect(chmod(path, 0o644) == 0)
        #expect(symlink(path, directory + "/link") == 0)
        let link = #expect(throws: VaultError.self) { try AgentPolicy.load(path: directory + "/link") }
        #expect(link?.code == .insecurePermissions)
        let missing = #expect(throws: VaultError.self) { try AgentPolicy.load(path: directory + "/none") }
        #expect(missing?.code == .notFound)
        #expect(mkdir(directory + "/dir", 0o755) == 0)
        let notAFile = #expect(throws: VaultError.self) { try AgentPolicy.load(path: directory + "/dir") }
        #expect(notAFile?.code == .insecurePermissions)
    }
}
