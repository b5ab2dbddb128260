#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
@_spi(AgentWire) import TokenVault

internal import TokenVaultSystem

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
            let listed: [ListedEntry]
            if let fromAgent = try listedByAgent() {
                listed = fromAgent
            } else {
                switch try await global.openExistingVault() {
                case .opened(let vault, _):
                    listed = try await vault.listing(service: service).entries
                case .noVaultYet(let path, _):
                    if json { try Output.json([Any]()) }
                    try Output.note("No vault yet at \(path); `vault set` or `vault migrate` creates it.")
                    return
                }
            }
            // Expired: past its expiry. Within the leeway: not yet, but `vault get` would refuse it.
            let now = Date()
            let rows = listed.map { entry in
                // As OAuthToken.isExpired(at:leeway:) tells.
                let left = entry.expiresAt?.timeIntervalSince(now)
                let expired = left.map { $0 <= 0 } ?? false
                let withinLeeway = !expired && (left.map { $0 <= VaultCommand.Get.leeway } ?? false)
                return (entry: entry, expired: expired, withinLeeway: withinLeeway)
            }
            if json {
                try Output.json(
                    rows.map {
                        [
                            "service": $0.entry.key.service, "account": $0.entry.key.account,
                            "expires_at": $0.entry.expiresAt.map(Output.timestamp) ?? JSONNull(), "expired": $0.expired,
                            "expires_within_leeway": $0.withinLeeway,
                            "kind": $0.entry.kind.rawValue, "refresh": $0.entry.refresh.map { $0.name as Any } ?? JSONNull(),
                        ] as [String: Any]
                    })
            } else if rows.isEmpty {
                try Output.note(service.map { "No entries for \($0)." } ?? "The vault is empty.")
            } else {
                let table =
                    [["SERVICE", "ACCOUNT", "EXPIRES", "STATE", "REFRESH"]]
                    + rows.map {
                        [
                            $0.entry.key.displayService, $0.entry.key.displayAccount, $0.entry.expiresAt.map(Output.timestamp) ?? "-",
                            $0.entry.kind == .token ? ($0.expired ? "expired" : $0.withinLeeway ? "expiring" : "valid") : $0.entry.kind.rawValue,
                            $0.entry.refresh.map(Self.refreshColumn) ?? "-",
                        ]
                    }
                try Output.line(Output.table(table))
            }
            // Entries that could not be read (a token in a format version this release does not
            // know, which any program of the user can put in the keyring) are listed, named, and
            // make the exit status that of their error, once everything else is listed.
            let unreadable = listed.filter { $0.kind == .unreadable }
            if let first = unreadable.first, let error = first.unreadable {
                let names = unreadable.map { "\($0.key)" }.joined(separator: ", ")
                throw VaultError(
                    error.code,
                    "\(unreadable.count == 1 ? "1 entry" : "\(unreadable.count) entries") could not be read: \(names). "
                        + "\(error.message) The other entries are listed above.")
            }
        }

        /// The entries from the agent, when only it can open the vault here: a file vault that
        /// exists, for which no key is given, and which this user's agent holds unlocked (as
        /// `vault status` does). Nil otherwise, and when the agent does not answer (one built
        /// before `list`): the vault is opened directly, which asks for the passphrase or says
        /// that it needs one.
        private func listedByAgent() throws -> [ListedEntry]? {
            guard let configuration = try? global.configuration(), configuration.keySource == nil,
                configuration.backend == .file || configuration.backend == .auto,
                SystemCall.exists(configuration.resolvedFilePath(environment: ProcessEnvironment.current)),
                let (client, vault) = AgentCLI.client(for: configuration), client.holdsOpen(vault: vault)
            else { return nil }
            switch client.listingOutcome(service: service, vault: vault) {
            case .success(let entries): return entries
            case .failure(let error as VaultError): throw error
            case .failure: return nil
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
