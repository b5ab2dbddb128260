#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
@_spi(AgentWire) import TokenVault

extension VaultCommand {
    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "delete",
            abstract: "Remove a stored entry.")

        @OptionGroup var global: GlobalOptions
        @OptionGroup var entry: EntryArguments

        func validate() throws {
            try global.validateConfiguration()
        }

        func run() async throws {
            let key = try entry.key()
            // Through the agent when it answers (it waits for its refresh of the entry in flight,
            // so that nothing writes the entry back); else directly, as without it.
            if let deleted = try AgentCLI.write(global: global, { .delete(AgentDeleteRequest(key: key, vault: $0)) }) {
                guard deleted.existed == true else { throw VaultError.nothingStored("entry", for: key) }
                try Output.note("Deleted \(key).")
                return
            }
            let vault: Vault
            switch try await global.openExistingVault() {
            case .opened(let opened, _): vault = opened
            case .noVaultYet(let path, _):
                throw VaultError.nothingStored("entry", for: key, noVaultAt: path)
            }
            guard try await vault.delete(key) else {
                throw VaultError.nothingStored("entry", for: key)
            }
            try Output.note("Deleted \(key).")
        }
    }
}
#endif
