#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
import TokenVault

extension VaultCommand {
    struct Logout: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "logout",
            abstract: "Revoke a stored token's grant at the server, then delete the entry.",
            discussion: """
                Revokes the refresh token, then the access token, at the revocation endpoint stored \
                with the entry (RFC 7009; vault login or vault set with --revocation-endpoint, or \
                --issuer when the server publishes one), authenticating as the stored client does. \
                Only then is the entry deleted. `vault delete` forgets the entry without telling the \
                server, so the grant stays alive there.

                If the server cannot be reached (exit 6) or answers an error (exit 1), or the entry \
                names no revocation endpoint (exit 1), the entry is kept and the message says why; \
                --forget-anyway deletes it all the same (exit 0, with a warning that the grant may \
                still be alive). No entry: exit 2.
                """
        )

        @OptionGroup var global: GlobalOptions
        @OptionGroup var entry: EntryArguments
        @OptionGroup var http: HTTPOptions

        @Flag(help: "Delete the entry even if its tokens could not be revoked at the server.")
        var forgetAnyway = false

        func validate() throws {
            try global.validateConfiguration()
        }

        func run() async throws {
            let key = try entry.key()
            let client = try http.client()
            let vault = try await RefreshCLI.existingVault(global, key: key)
            let result = try await vault.logout(key, forgetAnyway: forgetAnyway, client: client)
            if let failure = result.revocationFailure {
                try Output.note(
                    "Warning: \(failure.message) Deleted the entry \(key) anyway (--forget-anyway); the grant may still be alive at the server.")
                return
            }
            var revoked: [String] = []
            if result.revokedRefreshToken { revoked.append("the refresh token") }
            if result.revokedAccessToken { revoked.append("the access token") }
            let what = revoked.isEmpty ? "Nothing needed revoking" : "Revoked \(revoked.joined(separator: " and "))"
            try Output.note("\(what) for \(key) at the server, and deleted the entry.")
        }
    }
}
#endif
