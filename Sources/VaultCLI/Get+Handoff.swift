#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import FoundationEssentials
import TokenVault

internal import TokenVaultSystem

// `vault get`'s ways of handing a token to another program without its command line: an HTTP
// header line for `curl -H @-`, and asking again after a server refused the token.
extension VaultCommand.Get {
    /// `Authorization: Bearer <token>` (the scheme as RFC 6750 spells it, whatever case the server
    /// used), or the token's own type for another scheme.
    /// - Throws: `invalidInput` for a DPoP token, which needs a proof for every request.
    static func authorizationHeader(for token: OAuthToken, key: CredentialKey) throws -> String {
        switch token.tokenType.lowercased() {
        case "bearer":
            return "Authorization: Bearer \(token.accessToken)"
        case "dpop":
            throw VaultError(
                .invalidInput,
                "The token for \(key) is a DPoP token: each request needs a DPoP proof signed for it. Give the request's URL (--header --url URL [--method M]) and vault prints both header lines for it.")
        default:
            return "Authorization: \(token.tokenType) \(token.accessToken)"
        }
    }

    /// The access token `--rejected-token-file` names (stdin for `-`): the last word of its first
    /// line that is not empty, so that the token alone, `Bearer <token>` and a whole
    /// `Authorization:` line (what `--header` printed) all work. `nil` without the option.
    /// - Throws: `notFound` for a file that cannot be read, `invalidInput` for one holding no token.
    func rejectedToken() throws -> String? {
        guard let path = rejectedTokenFile else { return nil }
        let data: Data
        if path == "-" {
            data = try Self.readAll(SystemCall.standardInput, name: "stdin")
        } else {
            let fd: Int32
            do {
                fd = try SystemCall.open(path, [.readOnly, .noControllingTerminal])
            } catch {
                throw VaultError(.notFound, "The rejected-token file \(path) cannot be read: \(error.message).")
            }
            defer { SystemCall.closeAfterUse(fd) }
            data = try Self.readAll(fd, name: path)
        }
        let text = String(decoding: data, as: UTF8.self)
        guard
            let line = text.split(whereSeparator: \.isNewline).first(where: { !$0.allSatisfy(\.isWhitespace) }),
            let word = line.split(whereSeparator: \.isWhitespace).last
        else {
            throw VaultError(
                .invalidInput, "\(path == "-" ? "stdin" : path) holds no token: give the access token the server refused.")
        }
        return String(word)
    }

    /// At most 64 KiB from `fd`, to its end.
    private static func readAll(_ fd: Int32, name: String) throws -> Data {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while data.count <= 64 * 1024 {
            let count: Int
            do {
                count = try buffer.withUnsafeMutableBytes { raw in try SystemCall.read(fd, into: raw) }
            } catch {
                throw VaultError(.invalidInput, "The rejected token could not be read from \(name): \(Errno.message((error as? Errno)?.rawValue ?? Errno.ioError.rawValue)).")
            }
            if count == 0 { return data }
            data.append(contentsOf: buffer[0..<count])
        }
        throw VaultError(.invalidInput, "\(name) holds more than 64 KiB; give the one access token the server refused.")
    }
}

extension RefreshCLI {
    /// `vault get --rejected-token-file`: the vault's token after a server refused `rejected`.
    /// Refreshes only if the entry still holds `rejected` (one refresh for every caller that
    /// reports the same token: ``Vault/refreshAfterRejection(of:for:timeout:client:)``);
    /// otherwise the newer token that is stored. The answer is the newest the server issued, so
    /// it counts as fresh (as a refreshed token does for `get --fresh`) unless it has expired
    /// outright; then it is refreshed as `get --fresh` would.
    static func tokenAfterRejection(
        of rejected: String, _ vault: Vault, key: CredentialKey, leeway: TimeInterval, client: TokenEndpointClient = TokenEndpointClient()
    ) async throws -> (OAuthToken?, Bool) {
        let token: OAuthToken
        do {
            token = try await vault.refreshAfterRejection(of: rejected, for: key, client: client)
        } catch let error as VaultError where error.code == .notFound {
            return (nil, false)
        }
        if !token.isExpired(at: Date(), leeway: 0) { return (token, true) }
        return try await freshToken(vault, key: key, leeway: leeway, client: client)
    }
}
#endif
