#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
@_spi(AgentWire) import TokenVault

internal import TokenVaultSystem

extension VaultCommand {
    struct SetToken: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Store a token read from stdin.",
            discussion: """
                The token is read from stdin only, never from the command line, so that it does not \
                show up in `ps` or the shell history; the command takes no argument for it. At a \
                terminal it is read with echo off.

                Stdin holds one of:
                  - a JSON token response (RFC 6749), starting with {;
                  - a form-encoded response (access_token=...&token_type=bearer);
                  - the bare token: one line with no spaces, where = may only
                    end it (base64 padding).
                Input that starts with [, or holds & or an = before its end, is read \
                as a response too, never as a bare token. A response without an \
                access_token, and an OAuth error response such as GitHub's \
                error=bad_verification_code&..., exit with code 1 and store nothing.

                Without --token-url, an entry that already holds a client registration (from \
                vault login or an earlier vault set) keeps it, so the vault can still refresh the \
                new token; --forget-registration drops it.

                  curl -s -d ... "$TOKEN_URL" | vault set github octocat
                """
        )

        @OptionGroup var global: GlobalOptions
        @OptionGroup var entry: EntryArguments
        @OptionGroup var refresh: RefreshOptions
        @OptionGroup var http: HTTPOptions

        @Option(help: ArgumentHelp("For a bare token, or a response without expires_in: its lifetime.", valueName: "seconds"))
        var expiresIn: Int?

        @Flag(help: "Drop the client registration (token endpoint, client id and secret) the entry held. Without it, and without --token-url, the entry keeps it.")
        var forgetRegistration = false

        /// Anything more on the command line. Never used, and never repeated in a message: it
        /// may be a token someone tried to pass as an argument.
        @Argument(parsing: .allUnrecognized, help: .private)
        var unexpected: [String] = []

        func validate() throws {
            try global.validateConfiguration()
            guard unexpected.isEmpty else {
                throw ValidationError(
                    "vault set reads the token from stdin only, never from the command line, where ps and the shell history would show it. It takes SERVICE [ACCOUNT] and the options in --help; the \(unexpected.count) other argument(s) are not repeated here. Pipe the token in: ... | vault set SERVICE [ACCOUNT]"
                )
            }
            try refresh.validateComplete()
            if forgetRegistration && refresh.isGiven {
                throw ValidationError("--forget-registration drops the stored client registration; it cannot go with --token-url or the other client options.")
            }
            if let expiresIn, expiresIn <= 0 {
                throw ValidationError("--expires-in must be a positive number of seconds.")
            }
        }

        func run() async throws {
            let key = try entry.key()
            let input = try readInput()
            let token = try Self.token(from: input, expiresIn: expiresIn)
            let registration = try await refresh.registration(client: try http.client())
            let replaces = registration != nil || forgetRegistration
            let expiry = token.expiresAt.map { "expires \(Output.timestamp($0))" } ?? "no known expiry"
            // Through the agent when it answers (a passphrase vault it holds open needs no
            // Argon2id here), the same write it would be directly; else directly, as without it.
            if let written = try AgentCLI.write(global: global, { vault in
                if replaces { return .store(try AgentStoreRequest(key: key, token: token, registration: registration, vault: vault)) }
                return .store(try AgentStoreRequest(key: key, keepingRegistration: token, vault: vault))
            }) {
                try Output.note("Saved the token for \(key) (\(expiry)) in the \(written.backend) backend.")
                return
            }
            let vault = try await global.openVault()
            if replaces {
                try await vault.saveToken(token, for: key, registration: registration)
            } else {
                // No client named: the entry keeps the one it has, if any.
                try await vault.saveToken(token, for: key)
            }
            try Output.note("Saved the token for \(key) (\(expiry)) in the \(vault.selection.backend) backend.")
        }

        /// Stdin, or at a terminal a line typed with echo off.
        private func readInput() throws -> Data {
            if Terminal.isTerminal(SystemCall.standardInput) {
                let secret = try Terminal.readSecret(
                    prompt: "Token for \(try entry.key()) (input hidden): ", input: SystemCall.standardInput, output: SystemCall.standardError)
                return secret.withUnsafeBytes { Data($0) }
            }
            let limit = 1 << 20
            let data = try Self.readStandardInput(upTo: limit + 1)
            guard data.count <= limit else {
                throw VaultError(.invalidInput, "The input on stdin is larger than 1 MiB; it is not a token.")
            }
            return data
        }

        /// Reads stdin to its end or `limit` bytes. A failure (stdin is a directory, an I/O
        /// error) is an `io` error in words, with the system's reason.
        private static func readStandardInput(upTo limit: Int) throws -> Data {
            var data = Data()
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            while data.count < limit {
                let wanted = min(chunk.count, limit - data.count)
                let count: Int
                do {
                    count = try chunk.withUnsafeMutableBytes { try SystemCall.read(SystemCall.standardInput, into: .init(rebasing: $0[..<wanted])) }
                } catch let error as Errno {
                    throw VaultError(.io, "Could not read the secret from standard input: \(error.message).")
                }
                if count == 0 { break }
                data.append(contentsOf: chunk[0..<count])
            }
            return data
        }

        /// A token response (JSON or form-encoded) or a bare token line.
        static func token(from input: Data, expiresIn: Int?, now: Date = Date()) throws -> OAuthToken {
            guard let text = String(data: input, encoding: .utf8) else {
                throw VaultError(.invalidInput, "The input on stdin is not UTF-8 text.")
            }
            let trimmed = text.trimmingWhitespaceAndNewlines()
            guard !trimmed.isEmpty else {
                throw VaultError(.invalidInput, "Stdin was empty; pipe the token or the token response into `vault set`.")
            }
            var token: OAuthToken
            if looksLikeResponse(trimmed) {
                token = try response(trimmed, receivedAt: now)
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
                // A bare JWT expires when its `exp` claim says, as it does inside a response.
                token = try OAuthToken(bareToken: trimmed, receivedAt: now)
                if let expiresIn {
                    guard token.expiresAt == nil else {
                        throw ValidationError("The token is a JWT whose exp claim says when it expires; leave out --expires-in.")
                    }
                    token.expiresAt = now.addingTimeInterval(TimeInterval(expiresIn))
                }
            }
            return token
        }

        /// Whether stdin is a token response rather than a bare token.
        ///
        /// A bare token is an RFC 6750 `b64token`: letters, digits and `-._~+/`, then optional `=`
        /// padding. So `{` or `[` at the start, an `&` anywhere, or an `=` before the trailing
        /// padding means a response (GitHub's `error=bad_verification_code&…` included), and
        /// so do the field names that start one (`error=` alone). Erring this way is safe: a
        /// response is parsed strictly, and what is not a valid token response is refused,
        /// whereas a response taken for a bare token would be stored as the token.
        static func looksLikeResponse(_ text: String) -> Bool {
            if text.hasPrefix("{") || text.hasPrefix("[") || text.contains("&") { return true }
            if ["access_token=", "error="].contains(where: { text.hasPrefix($0) }) { return true }
            let unpadded = text.reversed().drop { $0 == "=" }
            return unpadded.contains("=")
        }

        /// Parses a token response; an error response or a malformed one stores nothing.
        private static func response(_ text: String, receivedAt now: Date) throws -> OAuthToken {
            do {
                return try OAuthToken(tokenResponse: Data(text.utf8), receivedAt: now)
            } catch let error as VaultError where error.code == .tokenEndpointError {
                let detail = error.oauthError.map { "\($0)" } ?? error.message
                throw VaultError(
                    error.code,
                    "Stdin holds an error response from the token endpoint, not a token; nothing was stored. The endpoint said: \(detail)",
                    underlying: error.underlying)
            } catch let error as VaultError {
                throw VaultError(
                    error.code,
                    "Stdin was read as a token response (it starts with { or [, or holds name=value pairs) and is not a valid one; nothing was stored. \(error.message)",
                    underlying: error)
            }
        }
    }
}
#endif
