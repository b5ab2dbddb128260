#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials
import TokenVault

extension VaultCommand {
    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "get",
            abstract: "Print a stored access token.",
            discussion: """
                Prints the access token alone, for a program that reads it from stdin or a pipe. \
                With --header it prints an HTTP header line, which curl reads from stdin, so that the \
                token is in no command line (ps shows every process's arguments):

                  vault get github --fresh --header | curl -H @- https://api.github.com/user

                A DPoP-bound entry (vault login --dpop) needs a proof signed for each request: \
                --header with --url (and --method, default GET) prints both lines, \
                Authorization: DPoP TOKEN and DPoP: PROOF, for that one request; the key never \
                leaves the vault:

                  vault get api --fresh --header --url https://api.example.com/me | curl -H @- https://api.example.com/me

                To hand a token to a program in its environment, use vault run.

                A token that has expired, or expires within 60 seconds, exits with code 3 and prints \
                nothing, unless --allow-expired is given.

                A script whose request was refused (HTTP 401) asks for a new token with \
                --rejected-token-file, giving the refused token on stdin (-) or in a file: the vault \
                refreshes only if it still holds that token, so that many scripts refused at once \
                make one refresh, and the others get the new token.
                """
        )

        @OptionGroup var global: GlobalOptions
        @OptionGroup var entry: EntryArguments
        @OptionGroup var http: HTTPOptions

        @Flag(
            help:
                "Print the whole token as JSON, with RFC 6749 field names, expires_at, expired, expires_within_leeway, the ID token's claims with id_token_verified, and a DPoP-bound entry's key thumbprint (dpop_jkt) and algorithm (dpop_alg).")
        var json = false

        @Flag(help: "Print the token even if it has expired.")
        var allowExpired = false

        @Flag(help: "Refresh the token first if it expires within 60 s (needs a stored refresh description).")
        var fresh = false

        @Flag(help: "Print an HTTP header line, Authorization: Bearer TOKEN, for curl -H @- (not with --json).")
        var header = false

        @Option(
            help: ArgumentHelp(
                "With --header: the URL of the request, for the DPoP proof of a DPoP-bound entry (its query is not signed).",
                valueName: "url"))
        var url: String?

        @Option(help: ArgumentHelp("With --url: the request's method (default GET).", valueName: "method"))
        var method: String?

        @Option(
            help: ArgumentHelp(
                "A file (- for stdin) holding the access token a server refused: refresh unless the vault already holds a newer one (implies --fresh).",
                valueName: "path"), completion: .file())
        var rejectedTokenFile: String?

        /// A token this close to its expiry counts as expired: the library's default leeway,
        /// which absorbs clock skew and the time a request takes.
        static let leeway: TimeInterval = 60

        func validate() throws {
            try global.validateConfiguration()
            if header && json { throw ValidationError("Give --header or --json, not both.") }
            if url != nil || method != nil {
                guard header else { throw ValidationError("--url and --method go with --header.") }
                guard url.flatMap(URL.init(string:))?.host != nil else { throw ValidationError("--url must be an http(s) URL.") }
            }
        }

        /// Set by ``VaultCommand/start()`` once a line ``FastPath`` read has asked the agent on the
        /// main thread (``FastPath/GetLine/answerFromAgent()``), before the concurrency runtime
        /// starts: ``run()`` then goes direct without asking again (the agent did not answer, and
        /// a note said why).
        nonisolated(unsafe) static var agentAsked = false

        func run() async throws {
            let key = try entry.key()
            if !Self.agentAsked, try answerFromAgent() { return }
            let vault: Vault
            switch try await global.openExistingVault() {
            case .opened(let opened, _): vault = opened
            case .noVaultYet(let path, _):
                throw VaultError.nothingStored(for: key, noVaultAt: path)
            }
            let rejected = try rejectedToken()
            let stored: OAuthToken?
            var refreshed = false
            do {
                if let rejected {
                    (stored, refreshed) = try await RefreshCLI.tokenAfterRejection(
                        of: rejected, vault, key: key, leeway: Self.leeway, client: try http.client())
                } else if fresh {
                    (stored, refreshed) = try await RefreshCLI.freshToken(vault, key: key, leeway: Self.leeway, client: try http.client())
                } else {
                    stored = try await vault.token(for: key)
                }
            } catch let error as VaultError where error.code == .invalidInput {
                throw Self.notAToken(error, key: key)
            }
            guard let token = stored else {
                throw VaultError.nothingStored(for: key)
            }
            if let url = url.flatMap(URL.init(string:)), token.tokenType.equalsIgnoringCase("DPoP") {
                try checkExpiry(token, refreshed: refreshed, key: key)
                // The proof is signed here, for this request; the key stays in the vault.
                let proof = try await vault.dpopProof(for: key, method: requestMethod, url: url, accessToken: token.accessToken)
                try Output.line("Authorization: DPoP \(token.accessToken)\nDPoP: \(proof)")
                return
            }
            // --json names the entry's DPoP key by its public thumbprint and algorithm, never the key.
            let dpop = json ? try await vault.dpopKeyInfo(for: key) : nil
            try emit(token, refreshed: refreshed, key: key, dpop: dpop)
        }

        /// Asks the agent, when one serves this vault, and prints its answer: true when it did,
        /// false to go direct, exactly as without an agent. ``run()`` calls it for a line that
        /// ArgumentParser read; a line ``FastPath`` read has already asked, on the main thread,
        /// through the static form below.
        func answerFromAgent() throws -> Bool {
            let key = try entry.key()
            // The agent first (it hands out no refresh token, so --json, which prints one, and a
            // rejected token's refresh go direct); when it does not answer, exactly as without it.
            // With --url, the agent's `proof` answer: the token and, for a DPoP-bound entry, a
            // proof it signed for this one request (the key stays in the agent).
            if !json, rejectedTokenFile == nil, let url = url.flatMap(URL.init(string:)) {
                let answer: AgentAuthorization?
                do {
                    answer = try AgentCLI.authorization(for: key, method: requestMethod, url: url, fresh: fresh, global: global)
                } catch let error as VaultError where error.code == .invalidInput {
                    throw Self.notAToken(error, key: key)
                }
                if let answer {
                    try checkExpiry(answer.token.oauthToken, refreshed: answer.token.fresh, key: key)
                    guard let proof = answer.dpopProof else {
                        try emit(answer.token.oauthToken, refreshed: answer.token.fresh, key: key)
                        return true
                    }
                    try Output.line("Authorization: DPoP \(answer.token.accessToken)\nDPoP: \(proof)")
                    return true
                }
            } else if !json, rejectedTokenFile == nil, url == nil {
                return try Self.answerFromAgent(
                    key: key, configuration: try? global.configuration(), fresh: fresh, header: header, allowExpired: allowExpired)
            }
            return false
        }

        /// The plain case of ``answerFromAgent()`` (no --json, --url or --rejected-token-file),
        /// from plain values: ``FastPath`` asks with it before it makes any ArgumentParser value.
        static func answerFromAgent(
            key: CredentialKey, configuration: VaultConfiguration?, fresh: Bool, header: Bool, allowExpired: Bool
        ) throws -> Bool {
            let answer: (token: AgentToken, socket: String)?
            do {
                answer = try AgentCLI.token(for: key, fresh: fresh, configuration: configuration)
            } catch let error as VaultError where error.code == .invalidInput {
                throw notAToken(error, key: key)
            }
            guard let answer else { return false }
            let token = answer.token.oauthToken
            try checkExpiry(token, refreshed: answer.token.fresh, key: key, allowExpired: allowExpired)
            try Output.line(header ? try authorizationHeader(for: token, key: key) : token.accessToken)
            return true
        }

        /// `--method`, in capitals (GET by default): the proof's `htm`.
        private var requestMethod: String { (method ?? "GET").uppercased() }

        /// Throws `expired` for a token past (or within the leeway of) its expiry, unless allowed.
        private func checkExpiry(_ token: OAuthToken, refreshed: Bool, key: CredentialKey) throws {
            try Self.checkExpiry(token, refreshed: refreshed, key: key, allowExpired: allowExpired)
        }

        private static func checkExpiry(_ token: OAuthToken, refreshed: Bool, key: CredentialKey, allowExpired: Bool) throws {
            let now = Date()
            // A token --fresh just got from the server is as fresh as the server makes them.
            let expired = token.isExpired(at: now, leeway: refreshed ? 0 : Self.leeway)
            if expired && !allowExpired {
                throw VaultError.staleToken(
                    token, for: key, leeway: Self.leeway, now: now, advice: "; refresh it, or use --allow-expired to print it anyway.")
            }
        }

        static func notAToken(_ error: VaultError, key: CredentialKey) -> VaultError {
            VaultError(
                error.code,
                "\(error.message) `vault get` prints only tokens, so it is not shown; a program reads it with the TokenVault library (Vault.secret(for:)), and `vault delete \(key.service) \(key.account)` removes it.",
                underlying: error)
        }

        /// Prints `token` as asked, or throws `expired` (`refreshed`: it came through the refresh
        /// path, or the agent keeps it fresh, so it is as fresh as the server makes them).
        private func emit(
            _ token: OAuthToken, refreshed: Bool, key: CredentialKey, dpop: (thumbprint: String, algorithm: DPoPAlgorithm)? = nil
        ) throws {
            let now = Date()
            try checkExpiry(token, refreshed: refreshed, key: key)
            if header {
                try Output.line(try Self.authorizationHeader(for: token, key: key))
                return
            }
            guard json else {
                try Output.line(token.accessToken)
                return
            }
            // `expired` only once the expiry has passed; a token inside the 60 s leeway (which
            // exits 3 without --allow-expired, all the same) says expires_within_leeway instead.
            let pastExpiry = token.isExpired(at: now, leeway: 0)
            var fields: [String: Any] = [
                "access_token": token.accessToken,
                "token_type": token.tokenType,
                "refresh_token": token.refreshToken ?? JSONNull(),
                "scope": token.scope ?? JSONNull(),
                "id_token": token.idToken ?? JSONNull(),
                "expires_at": token.expiresAt.map(Output.timestamp) ?? JSONNull(),
                "expired": pastExpiry,
                "expires_within_leeway": !pastExpiry && token.isExpired(at: now, leeway: Self.leeway),
                // A DPoP-bound entry (RFC 9449): the RFC 7638 thumbprint of its key's public half (the
                // `cnf.jkt` the server bound the token to) and the proofs' algorithm; null otherwise.
                "dpop_jkt": dpop?.thumbprint ?? JSONNull(),
                "dpop_alg": dpop?.algorithm.name ?? JSONNull(),
            ]
            // The ID token's claims, and whether `vault login` verified them (a stored record; no
            // cryptography here). `id_token_verified` is false for claims that were not verified.
            fields.merge(LoginIDToken.jsonFields(token)) { _, new in new }
            try Output.json(fields)
        }
    }
}
#endif
