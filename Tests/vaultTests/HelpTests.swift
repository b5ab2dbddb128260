#if CLI  // the vault command exists with the package trait CLI
import ArgumentParser
import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import VaultCLI

/// `vault --help` as a snapshot, as swift-argument-parser's MathExampleTests does: the exit-code
/// table and the subcommands are part of the interface. The snapshots are rendered in process
/// (`helpMessage(for:columns:)`, 80 columns as on a pipe), where a failure points at the text;
/// one test per page still runs the built binary, so that what users see is what is checked.
@Suite struct HelpTests {
    private static func help(_ command: any ParsableCommand.Type) -> String {
        VaultCommand.helpMessage(for: command, columns: 80) + "\n"
    }

    @Test func rootHelp() throws {
        #expect(Self.help(VaultCommand.self) == Self.rootHelp)
        let sandbox = try CLISandbox()
        let result = try sandbox.run("vault", ["--help"])
        #expect(result.status == 0)
        #expect(result.stdout == Self.rootHelp)
    }

    /// `vault git-credential` is part of the interface: listed in `vault --help` (and so in the
    /// man page, which is generated from the same help), with its own help page.
    @Test func rootHelpListsTheGitCredentialHelper() throws {
        let sandbox = try CLISandbox()
        let root = try sandbox.run("vault", ["--help"])
        #expect(root.status == 0)
        #expect(root.stdout.contains("\n  git-credential          A git credential helper"), "\(root.stdout)")
        let own = try sandbox.run("vault", ["help", "git-credential"])
        #expect(own.status == 0 && own.stdout.contains("USAGE: vault git-credential"), "\(own)")
        #expect(own.stdout.contains("Authentication failed"), "\(own.stdout)")
    }

    @Test func migrateHelp() {
        #expect(Self.help(VaultCommand.Migrate.self) == Self.migrateHelp)
    }

    @Test func setHelp() {
        #expect(Self.help(VaultCommand.SetToken.self) == Self.setHelp)
    }

    static let setHelp = """
        OVERVIEW: Store a token read from stdin.

        The token is read from stdin only, never from the command line, so that it does
        not show up in `ps` or the shell history; the command takes no argument for it.
        At a terminal it is read with echo off.

        Stdin holds one of:
          - a JSON token response (RFC 6749), starting with {;
          - a form-encoded response (access_token=...&token_type=bearer);
          - the bare token: one line with no spaces, where = may only
            end it (base64 padding).
        Input that starts with [, or holds & or an = before its end, is read as a
        response too, never as a bare token. A response without an access_token, and an
        OAuth error response such as GitHub's error=bad_verification_code&..., exit
        with code 1 and store nothing.

        Without --token-url, an entry that already holds a client registration (from
        vault login or an earlier vault set) keeps it, so the vault can still refresh
        the new token; --forget-registration drops it.

          curl -s -d ... "$TOKEN_URL" | vault set github octocat

        USAGE: vault set [<options>] <service> [<account>]

        ARGUMENTS:
          <service>               The service, such as github.
          <account>               The account within the service. (default: default)

        OPTIONS:
          --backend <backend>     Which backend (env TOKEN_VAULT_BACKEND; default
                                  auto). (values: auto, secret-service, file, postgres)
          --file <path>           The encrypted vault file (env TOKEN_VAULT_FILE;
                                  default $XDG_DATA_HOME/token-vault/tokens.vault).
          --key-file <path>       A file holding the file vault's 32-byte key (env
                                  TOKEN_VAULT_KEY_FILE).
          --passphrase-file <path>
                                  A file holding the file vault's passphrase (env
                                  TOKEN_VAULT_PASSPHRASE_FILE).
          --allow-insecure-permissions
                                  Accept a vault, key or passphrase file that group or
                                  others can read (env
                                  TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS=1).
          --token-url <url>       The token endpoint, for refreshing the token (https,
                                  or http on loopback).
          --issuer <url>          The authorization server's issuer URL: its endpoints
                                  are found by discovery (OpenID Connect Discovery, RFC
                                  8414), once, and stored with the entry.
          --revocation-endpoint <url>
                                  The revocation endpoint (RFC 7009), where vault
                                  logout revokes the tokens.
          --client-id <id>        The OAuth client id.
          --client-secret-file <path>
                                  A file holding the client secret (readable by you
                                  alone). It is sealed in the entry with the token.
          --client-auth <method>  How the client secret is sent: basic
                                  (client_secret_basic, the default) or post.
          --scope <scope>         The scope to ask for.
          --param <name=value>    An extra parameter for every token request, such as
                                  resource=https://api.example.com (repeatable).
          --http-deadline <seconds>
                                  The most a request to the token endpoint may take in
                                  all, retries included (env TOKEN_VAULT_HTTP_DEADLINE;
                                  default 20).
          --cacert <path>         A PEM file of the CAs to trust for the token
                                  endpoint, instead of the system's (env
                                  TOKEN_VAULT_CACERT).
          --client-cert <path>    A PEM client certificate for mutual TLS with the
                                  token endpoint (RFC 8705; env
                                  TOKEN_VAULT_CLIENT_CERT).
          --client-key <path>     The PEM key of --client-cert, a file readable by you
                                  alone (env TOKEN_VAULT_CLIENT_KEY).
          --expires-in <seconds>  For a bare token, or a response without expires_in:
                                  its lifetime.
          --forget-registration   Drop the client registration (token endpoint, client
                                  id and secret) the entry held. Without it, and
                                  without --token-url, the entry keeps it.
          --version               Show the version.
          -h, --help              Show help information.


        """

    static let rootHelp = """
        OVERVIEW: Keep OAuth tokens and other credentials in the Secret Service or an
        encrypted file.

        Every subcommand takes the global options --backend, --file, --key-file,
        --passphrase-file and --allow-insecure-permissions, before or after its name
        with the same meaning (vault --backend file get github is vault get github
        --backend file); each can also come from the environment (TOKEN_VAULT_BACKEND,
        TOKEN_VAULT_FILE, TOKEN_VAULT_KEY_FILE, TOKEN_VAULT_PASSPHRASE_FILE,
        TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS=1). With no key and a terminal present,
        a file vault asks for its passphrase. A vault, key or passphrase file that
        group or others can read is refused unless --allow-insecure-permissions is
        given.

        EXIT CODES:
          0   ok
          1   other error (bad input, permission denied, entry already exists, a
              bad TOKEN_VAULT_* setting)
          2   not found (no such entry, plist or vault file)
          3   the token has expired (vault get without --allow-expired)
          4   authentication failed (wrong key or passphrase)
          5   integrity failure (vault file tampered with, corrupt, truncated, empty
              or not a vault)
          6   backend unavailable or locked (no Secret Service, no key, key file
              missing, time-out, token endpoint unreachable after retries)
          7   reauthentication required (the refresh token was rejected or is
              missing: run vault login again)
          8   vault login: the port of the redirect URI is in use by another program
          64  usage error (the command line)
          74  output could not be written (stdout or stderr full or closed); what
              the command did before, such as saving a token, stays done
          126 vault run: the command cannot be run (nothing was started)
          127 vault run: the command is not found (nothing was started)
        Once its command has started, vault run exits with the command's status, or
        128 + the signal that ended it.

        USAGE: vault [--backend <backend>] [--file <path>] [--key-file <path>] [--passphrase-file <path>] [--allow-insecure-permissions] <subcommand>

        OPTIONS:
          --backend <backend>     Which backend (env TOKEN_VAULT_BACKEND; default
                                  auto). (values: auto, secret-service, file, postgres)
          --file <path>           The encrypted vault file (env TOKEN_VAULT_FILE;
                                  default $XDG_DATA_HOME/token-vault/tokens.vault).
          --key-file <path>       A file holding the file vault's 32-byte key (env
                                  TOKEN_VAULT_KEY_FILE).
          --passphrase-file <path>
                                  A file holding the file vault's passphrase (env
                                  TOKEN_VAULT_PASSPHRASE_FILE).
          --allow-insecure-permissions
                                  Accept a vault, key or passphrase file that group or
                                  others can read (env
                                  TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS=1).
          --version               Show the version.
          -h, --help              Show help information.

        SUBCOMMANDS:
          set                     Store a token read from stdin.
          get                     Print a stored access token.
          list                    List the stored entries: service, account and expiry,
                                  never a secret.
          delete                  Remove a stored entry.
          status                  Say which backend the vault uses and why, what the
                                  Secret Service probe found, and how many entries
                                  there are.
          migrate                 Move OAuth tokens out of a plain UserDefaults plist
                                  into the vault.
          rekey                   Change the key or passphrase of an encrypted file
                                  vault or a PostgreSQL vault.
          copy                    Copy every entry from one backend to another, all or
                                  nothing; the source is left untouched.
          login                   Log in with OAuth and store the token with how to
                                  refresh it.
          logout                  Revoke a stored token's grant at the server, then
                                  delete the entry.
          refresh                 Refresh a stored token now, with the refresh
                                  description stored with it.
          rotate-dpop-key         Give a DPoP-bound entry a new DPoP key; its grant
                                  must then be renewed with a new login.
          run                     Run a command with fresh access tokens in its
                                  environment, never on its command line.
          git-credential          A git credential helper backed by the vault (get,
                                  store, erase).
          agent                   Run the token agent in the foreground: unlock once,
                                  refresh ahead, hand out access tokens on a socket.
          unlock                  Give the running agent its file vault's passphrase.
          lock                    Make the running agent forget its vault's key.

          See 'vault help <subcommand>' for detailed help.

        """

    static let migrateHelp = """
        OVERVIEW: Move OAuth tokens out of a plain UserDefaults plist into the vault.

        Finds token values in the plist (string keys such as accessToken and
        refreshToken, or a JSON or plist token model stored as Data), writes them to
        the vault as one token, reads them back, and only then rewrites the plist
        without them: atomically, in the same format, with the same permissions and
        every other key unchanged. If any step fails, the vault is rolled back and the
        plist is left as it was. Running it again finds nothing and changes nothing.

        --domain NAME reads the plist UserDefaults keeps for NAME:
        $XDG_CONFIG_HOME/NAME.plist (default ~/.config) on Linux,
        ~/Library/Preferences/NAME.plist on macOS. Quit the app that owns the domain
        first.

        USAGE: vault migrate <options>

        OPTIONS:
          --backend <backend>     Which backend (env TOKEN_VAULT_BACKEND; default
                                  auto). (values: auto, secret-service, file, postgres)
          --file <path>           The encrypted vault file (env TOKEN_VAULT_FILE;
                                  default $XDG_DATA_HOME/token-vault/tokens.vault).
          --key-file <path>       A file holding the file vault's 32-byte key (env
                                  TOKEN_VAULT_KEY_FILE).
          --passphrase-file <path>
                                  A file holding the file vault's passphrase (env
                                  TOKEN_VAULT_PASSPHRASE_FILE).
          --allow-insecure-permissions
                                  Accept a vault, key or passphrase file that group or
                                  others can read (env
                                  TOKEN_VAULT_ALLOW_INSECURE_PERMISSIONS=1).
          --plist <path>          The plist file to migrate.
          --domain <name>         The defaults domain (suite name) whose plist to
                                  migrate.
          --service <service>     The vault service for the token (default: the domain,
                                  or the plist's name without .plist).
          --account <account>     The vault account for the token. (default: default)
          --key <name>            Take exactly this plist key (repeat for the keys of
                                  one token) instead of detecting them.
          --overwrite             Replace a different token already stored under the
                                  same service and account.
          --keep-source           Copy the tokens into the vault but leave the plist as
                                  it is.
          --dry-run               Show what would happen, with values redacted, and
                                  change nothing.
          --json                  Print the report as JSON.
          --version               Show the version.
          -h, --help              Show help information.


        """
}
#endif
