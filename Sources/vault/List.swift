import ArgumentParser
import Foundation
import TokenVault

extension VaultCommand {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the stored entries: service, account and expiry, never a secret."
        )

        @OptionGroup var global: GlobalOptions

        @Argument(help: "Only the entries of this service.")
        var service: String?

        @Flag(help: "Print a JSON array of {service, account, expires_at, expired}.")
        var json = false

        func validate() throws {
            try global.validateConfiguration()
        }

        func run() async throws {
            let vault: Vault
            switch try await global.openExistingVault() {
            case .opened(let opened, _): vault = opened
            case .noVaultYet(let path, _):
                if json { try Output.json([Any]()) }
                try Output.note("No vault yet at \(path); `vault set` or `vault migrate` creates it.")
                return
            }
            var rows: [(key: CredentialKey, expiresAt: Date?, expired: Bool, kind: String)] = []
            // Entries that could not be read (a token in a format version this release does not know,
            // which any program of the user can put in the keyring) are listed, named, and make the
            // exit status that of their error, once everything else is listed.
            var unreadable: [(key: CredentialKey, error: VaultError)] = []
            for key in try await vault.keys(service: service) {
                // An entry that is not a token (an opaque secret) is listed without an expiry.
                let token: OAuthToken?
                do {
                    token = try await vault.token(for: key)
                } catch let error as VaultError where error.code == .invalidInput {
                    token = nil
                } catch let error as VaultError where error.code == .unsupportedVersion {
                    unreadable.append((key, error))
                    rows.append((key, nil, false, "unreadable"))
                    continue
                }
                rows.append((key, token?.expiresAt, token?.isExpired() ?? false, token != nil ? "token" : "secret"))
            }
            if json {
                try Output.json(
                    rows.map {
                        [
                            "service": $0.key.service, "account": $0.key.account,
                            "expires_at": $0.expiresAt.map(Output.timestamp) ?? NSNull(), "expired": $0.expired,
                            "kind": $0.kind,
                        ] as [String: Any]
                    })
            } else if rows.isEmpty {
                try Output.note(service.map { "No entries for \($0)." } ?? "The vault is empty.")
            } else {
                let table =
                    [["SERVICE", "ACCOUNT", "EXPIRES", "STATE"]]
                    + rows.map {
                        [
                            $0.key.displayService, $0.key.displayAccount, $0.expiresAt.map(Output.timestamp) ?? "-",
                            $0.kind == "token" ? ($0.expired ? "expired" : "valid") : $0.kind,
                        ]
                    }
                try Output.line(Output.table(table))
            }
            if let first = unreadable.first {
                let names = unreadable.map { "\($0.key)" }.joined(separator: ", ")
                throw VaultError(
                    first.error.code,
                    "\(unreadable.count == 1 ? "1 entry" : "\(unreadable.count) entries") could not be read: \(names). "
                        + "\(first.error.message) The other entries are listed above.")
            }
        }
    }
}
