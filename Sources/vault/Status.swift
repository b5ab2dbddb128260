import ArgumentParser
import Foundation
import TokenVault

extension VaultCommand {
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Say which backend the vault uses and why, what the Secret Service probe found, and how many entries there are."
        )

        @OptionGroup var global: GlobalOptions

        @Flag(help: "Print the status as JSON.")
        var json = false

        func run() async throws {
            let configuration = try global.configuration()
            // One probe, shown here and used to choose the backend.
            let probe = if let needed = await GlobalOptions.probe(for: configuration) {
                needed
            } else {
                await SecretServiceStore.probe(timeout: configuration.probeTimeout)
            }
            let path = configuration.resolvedFilePath
            var vault: Vault?
            // The key that opened the vault, which may have been typed at the terminal.
            var keySource = configuration.keySource
            // The backend and reason when the file backend would be used but has no file yet.
            var notCreated: (backend: String, reason: String)?
            var failure: VaultError?
            var entries: Int?
            do {
                switch try await global.openExistingVault(probe: probe) {
                case .opened(let opened, let usedKey):
                    vault = opened
                    keySource = usedKey
                    entries = try await opened.keys().count
                case .noVaultYet(_, let reason):
                    notCreated = (VaultConfiguration.Backend.file.rawValue, reason)
                    entries = 0
                }
            } catch let error as VaultError {
                failure = error
            }
            let fileExists = GlobalOptions.exists(path)
            let usesFile =
                vault?.selection.backend == .file || notCreated != nil
                || (vault == nil && configuration.backend != .secretService)
            let backend = vault?.selection.backend.rawValue ?? notCreated?.backend
            let reason = vault?.selection.reason ?? notCreated?.reason

            if json {
                var object: [String: Any] = [
                    "requested_backend": configuration.backend.rawValue,
                    "backend": backend.map { $0 as Any } ?? NSNull(),
                    "reason": reason.map { $0 as Any } ?? NSNull(),
                    "secret_service": [
                        "outcome": probe.outcome.rawValue, "detail": probe.detail, "can_prompt": probe.canPrompt,
                        "elapsed_ms": Int(probe.elapsed.components.seconds * 1000 + probe.elapsed.components.attoseconds / 1_000_000_000_000_000),
                    ] as [String: Any],
                    "entries": entries.map { $0 as Any } ?? NSNull(),
                ]
                if usesFile {
                    object["file"] = ["path": path, "exists": fileExists, "key": keySource?.origin() ?? NSNull()] as [String: Any]
                }
                if let failure {
                    object["error"] = ["code": "\(failure.code)", "message": failure.message]
                }
                try Output.json(object)
            } else {
                var rows: [[String]] = [["requested backend:", configuration.backend.rawValue]]
                if let backend, let reason {
                    rows.append(["backend in use:", backend + (notCreated != nil ? " (no vault file yet)" : "")])
                    rows.append(["why:", reason])
                } else {
                    rows.append(["backend in use:", "none (the vault could not be opened)"])
                }
                rows.append(["Secret Service:", probe.summary])
                if usesFile {
                    rows.append([
                        "vault file:",
                        "\(path) (\(fileExists ? "exists" : "does not exist yet; `vault set` or `vault migrate` creates it"))",
                    ])
                    rows.append(["key:", keySource?.origin() ?? "none given"])
                }
                if let entries { rows.append(["entries:", "\(entries)"]) }
                Output.line(Output.table(rows))
            }
            if let failure { throw failure }
        }
    }
}
