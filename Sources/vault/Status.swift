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
            let probe = await SecretServiceStore.probe(timeout: configuration.probeTimeout)
            let path = configuration.resolvedFilePath
            let fileExists = FileManager.default.fileExists(atPath: path)
            var vault: Vault?
            var failure: VaultError?
            var entries: Int?
            do {
                let opened = try await global.openVault()
                vault = opened
                entries = try await opened.keys().count
            } catch let error as VaultError {
                failure = error
            }
            let usesFile = vault?.selection.backend == .file || (vault == nil && configuration.backend != .secretService)

            if json {
                var object: [String: Any] = [
                    "requested_backend": configuration.backend.rawValue,
                    "backend": vault.map { $0.selection.backend.rawValue as Any } ?? NSNull(),
                    "reason": vault.map { $0.selection.reason as Any } ?? NSNull(),
                    "secret_service": [
                        "outcome": probe.outcome.rawValue, "detail": probe.detail, "can_prompt": probe.canPrompt,
                        "elapsed_ms": Int(probe.elapsed.components.seconds * 1000 + probe.elapsed.components.attoseconds / 1_000_000_000_000_000),
                    ] as [String: Any],
                    "entries": entries.map { $0 as Any } ?? NSNull(),
                ]
                if usesFile {
                    object["file"] = ["path": path, "exists": fileExists, "key": configuration.keySource?.description ?? NSNull()] as [String: Any]
                }
                if let failure {
                    object["error"] = ["code": "\(failure.code)", "message": failure.message]
                }
                try Output.json(object)
            } else {
                var rows: [[String]] = [["requested backend:", configuration.backend.rawValue]]
                if let vault {
                    rows.append(["backend in use:", vault.selection.backend.rawValue])
                    rows.append(["why:", vault.selection.reason])
                } else {
                    rows.append(["backend in use:", "none (the vault could not be opened)"])
                }
                rows.append(["Secret Service:", probe.summary])
                if usesFile {
                    rows.append(["vault file:", "\(path) (\(fileExists ? "exists" : "not created yet"))"])
                    rows.append(["key:", configuration.keySource?.description ?? "none given"])
                }
                if let entries { rows.append(["entries:", "\(entries)"]) }
                Output.line(Output.table(rows))
            }
            if let failure { throw failure }
        }
    }
}
