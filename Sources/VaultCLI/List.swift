#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
import TokenVault

extension VaultCommand {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "List the stored entries: service, account and expiry, never a secret.",
            discussion: """
                The REFRESH column says whether the vault refreshes the token by itself (auto: it \
                was stored with --token-url and --client-id and holds a refresh token the server has \
                not rejected), and why not otherwise: rejected (log in again), no refresh token, or \
                manual (no refresh description: only the program that stored it can refresh it). \
                --json gives it as refresh: self, rejected, no-refresh-token, no-description or none.
                """
        )

        @OptionGroup var global: GlobalOptions

        @Argument(help: "Only the entries of this service.")
        var service: String?

        @Flag(help: "Print a JSON array of {service, account, expires_at, expired, expires_within_leeway, kind, refresh}.")
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
            // `refresh` is a Refreshability name: self, rejected, no-refresh-token, no-description, none.
            var rows: [(key: CredentialKey, expiresAt: Date?, expired: Bool, withinLeeway: Bool, kind: String, refresh: Refreshability?)] = []
            // Entries that could not be read (a token in a format version this release does not know,
            // which any program of the user can put in the keyring) are listed, named, and make the
            // exit status that of their error, once everything else is listed.
            var unreadable: [(key: CredentialKey, error: VaultError)] = []
            for key in try await vault.keys(service: service) {
                // An entry that is not a token (an opaque secret) is listed without an expiry.
                let entry: TokenEntry?
                do {
                    entry = try await vault.tokenEntry(for: key)
                } catch let error as VaultError where error.code == .invalidInput {
                    entry = nil
                } catch let error as VaultError where error.code == .unsupportedVersion {
                    unreadable.append((key, error))
                    rows.append((key, nil, false, false, "unreadable", nil))
                    continue
                }
                let token = entry?.token
                // Expired: past its expiry. Within the leeway: not yet, but `vault get` would refuse it.
                let now = Date()
                let expired = token?.isExpired(at: now, leeway: 0) ?? false
                let withinLeeway = !expired && (token?.isExpired(at: now, leeway: VaultCommand.Get.leeway) ?? false)
                rows.append((
                    key, token?.expiresAt, expired, withinLeeway, token != nil ? "token" : "secret",
                    entry?.refreshability()
                ))
            }
            if json {
                try Output.json(
                    rows.map {
                        [
                            "service": $0.key.service, "account": $0.key.account,
                            "expires_at": $0.expiresAt.map(Output.timestamp) ?? JSONNull(), "expired": $0.expired,
                            "expires_within_leeway": $0.withinLeeway,
                            "kind": $0.kind, "refresh": $0.refresh.map { $0.name as Any } ?? JSONNull(),
                        ] as [String: Any]
                    })
            } else if rows.isEmpty {
                try Output.note(service.map { "No entries for \($0)." } ?? "The vault is empty.")
            } else {
                let table =
                    [["SERVICE", "ACCOUNT", "EXPIRES", "STATE", "REFRESH"]]
                    + rows.map {
                        [
                            $0.key.displayService, $0.key.displayAccount, $0.expiresAt.map(Output.timestamp) ?? "-",
                            $0.kind == "token" ? ($0.expired ? "expired" : $0.withinLeeway ? "expiring" : "valid") : $0.kind,
                            $0.refresh.map(Self.refreshColumn) ?? "-",
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

        /// The REFRESH column: a word a script can match, and what to do when the vault cannot.
        static func refreshColumn(_ refreshability: Refreshability) -> String {
            switch refreshability {
            case .refreshesItself: "auto"
            case .rejected: "rejected: log in again"
            case .noRefreshToken: "no refresh token"
            case .noDescription: "manual: no --token-url"
            default: "-"
            }
        }
    }
}
#endif
