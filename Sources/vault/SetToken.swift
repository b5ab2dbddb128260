import ArgumentParser
import Foundation
import TokenVault

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension VaultCommand {
    struct SetToken: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Store a token read from stdin.",
            discussion: """
                The token is read from stdin only, never from the command line, so that it does not \
                show up in `ps` or the shell history. Stdin may hold a JSON token response \
                (RFC 6749), a form-encoded one (access_token=...&token_type=bearer) or the bare \
                token on one line. At a terminal it is read with echo off.

                  curl -s -d ... https://github.com/login/oauth/access_token | vault set github octocat
                """
        )

        @OptionGroup var global: GlobalOptions
        @OptionGroup var entry: EntryArguments

        @Option(help: ArgumentHelp("For a bare token, or a response without expires_in: its lifetime.", valueName: "seconds"))
        var expiresIn: Int?

        func validate() throws {
            if let expiresIn, expiresIn <= 0 {
                throw ValidationError("--expires-in must be a positive number of seconds.")
            }
        }

        func run() async throws {
            let key = try entry.key()
            let input = try readInput()
            let token = try Self.token(from: input, expiresIn: expiresIn)
            let vault = try await global.openVault()
            try await vault.saveToken(token, for: key)
            let expiry = token.expiresAt.map { "expires \(Output.timestamp($0))" } ?? "no known expiry"
            Output.note("Saved the token for \(key) (\(expiry)) in the \(vault.selection.backend) backend.")
        }

        /// Stdin, or at a terminal a line typed with echo off.
        private func readInput() throws -> Data {
            if Terminal.isTerminal(STDIN_FILENO) {
                let secret = try Terminal.readSecret(
                    prompt: "Token for \(try entry.key()) (input hidden): ", input: STDIN_FILENO, output: STDERR_FILENO)
                return secret.withUnsafeBytes { Data($0) }
            }
            let limit = 1 << 20
            let data = try FileHandle.standardInput.read(upToCount: limit + 1) ?? Data()
            guard data.count <= limit else {
                throw VaultError(.invalidInput, "The input on stdin is larger than 1 MiB; it is not a token.")
            }
            return data
        }

        /// A token response (JSON or form-encoded) or a bare token line.
        static func token(from input: Data, expiresIn: Int?, now: Date = Date()) throws -> OAuthToken {
            guard let text = String(data: input, encoding: .utf8) else {
                throw VaultError(.invalidInput, "The input on stdin is not UTF-8 text.")
            }
            let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !trimmed.isEmpty else {
                throw VaultError(.invalidInput, "Stdin was empty; pipe the token or the token response into `vault set`.")
            }
            let isResponse =
                trimmed.hasPrefix("{") || trimmed.hasPrefix("access_token=") || trimmed.contains("&access_token=")
            var token: OAuthToken
            if isResponse {
                token = try OAuthToken(tokenResponse: Data(trimmed.utf8), receivedAt: now)
                if let expiresIn {
                    guard token.expiresAt == nil else {
                        throw ValidationError("The response says when the token expires; leave out --expires-in.")
                    }
                    token.expiresAt = now.addingTimeInterval(TimeInterval(expiresIn))
                }
            } else {
                guard !trimmed.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.properties.generalCategory == .control })
                else {
                    throw VaultError(
                        .invalidInput,
                        "Stdin holds more than one word but is not a JSON or form-encoded token response; give the bare token on one line."
                    )
                }
                token = OAuthToken(
                    accessToken: trimmed, issuedAt: now,
                    expiresAt: expiresIn.map { now.addingTimeInterval(TimeInterval($0)) })
            }
            return token
        }
    }
}
