#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import TokenVault

/// The two command lines that scripts run most, `vault get SERVICE [ACCOUNT]` with plain long
/// options and `vault --version`, read without ArgumentParser's reflection.
///
/// Why: ArgumentParser builds every command's argument set by reflection and decodes the result
/// through generic property wrappers. In a cold `vault get` that took 2.1 ms or more of a process
/// that otherwise needs about 4 (measured around `parseAsRoot`, release build, issue 17), most of
/// it the Swift runtime instantiating generic types and scanning the binary's protocol
/// conformance records for each one.
///
/// The rule that keeps the two parsers from drifting apart: this one accepts only a strict
/// subset that it understands fully and answers `nil` for anything else, which ArgumentParser then
/// parses as before, with its help, its completion and its error messages. The subset is long
/// options from the lists below, each at most once, with a value that is neither empty nor
/// starts with `-` (as `--name value` or `--name=value`), global options before or after `get`,
/// one or two positional arguments after `get`, and nothing else: no `--`, no short option, no
/// `help`, no option ArgumentParser would report. A line it accepts is one ArgumentParser
/// parses to the same values, checked by `FastPathTests` over every placement of the options
/// (before or after `get`, joined or separate), with flags and names chosen by a seeded generator.
enum FastPath {
    /// What a command line asks for, when this parser can tell.
    enum Request {
        /// `vault --version`, alone.
        case version
        /// A `get` line, parsed and validated as ArgumentParser would.
        case get(GetLine)
    }

    /// A `get` line this parser read and validated, as plain values: no ArgumentParser value is
    /// made until ``command`` (their property wrappers' generic set-up is about 7 % of a cold
    /// `vault get` through the agent, `perf`, release build), so the agent is asked first.
    struct GetLine {
        let global: GlobalValues
        /// The positional arguments as given, and the key they name.
        let service: String
        let account: String
        let key: CredentialKey
        let json: Bool
        let allowExpired: Bool
        let fresh: Bool
        let header: Bool

        /// Asks the agent for the plain case (not --json, which goes direct), as the command's
        /// run would: true when it answered and the token was printed.
        func answerFromAgent() throws -> Bool {
            guard !json else { return false }
            return try VaultCommand.Get.answerFromAgent(
                key: key, configuration: try? global.configuration(), fresh: fresh, header: header, allowExpired: allowExpired)
        }

        /// The command ArgumentParser would have made of the line.
        var command: VaultCommand.Get {
            var options = GlobalOptions()
            options.values = global

            var entry = EntryArguments()
            entry.service = service
            entry.account = account

            var command = VaultCommand.Get()
            command.global = options
            command.entry = entry
            command.json = json
            command.allowExpired = allowExpired
            command.fresh = fresh
            var http = HTTPOptions()
            http.httpDeadline = nil  // --http-deadline goes to ArgumentParser; the environment still counts
            http.caBundle = nil  // so do --cacert, --client-cert and --client-key
            http.clientCertificate = nil
            http.clientKey = nil
            command.http = http
            command.header = header
            command.rejectedTokenFile = nil
            command.url = nil  // --url and --method (a DPoP proof's request) go to ArgumentParser
            command.method = nil
            return command
        }
    }

    /// The request `arguments` (the command line without the program name) makes, or `nil` when
    /// the line is not one this parser handles, or does not validate: ArgumentParser parses it.
    static func parse(_ arguments: [String]) -> Request? {
        if arguments == ["--version"] { return .version }
        return get(arguments).map(Request.get)
    }

    /// The options this parser reads, each at most once: the global ones with a value, and
    /// `get`'s flags (valid only after `get`). Plain stored values and a `switch` on the name, not
    /// a `Set` or `Dictionary` of `Substring`: their first use in a process instantiates the
    /// hashed collections' generic types through the runtime's lookups (about 2 % of a cold
    /// `vault get` through the agent, measured with `perf`).
    private struct Seen {
        /// `--backend` as given; it becomes ``GlobalValues/backend`` once it names one.
        var backend: String?
        /// The other global options, as the command takes them.
        var global = GlobalValues()
        var json = false
        var allowExpired = false
        var fresh = false
        var header = false

        /// Records a global option's value; nil when `name` is not one, false when it was given before.
        mutating func set(_ name: Substring, to value: String) -> Bool? {
            switch name {
            case "backend": return Self.once(&backend, value)
            case "file": return Self.once(&global.file, value)
            case "key-file": return Self.once(&global.keyFile, value)
            case "passphrase-file": return Self.once(&global.passphraseFile, value)
            default: return nil
            }
        }

        /// Records a flag; nil when `name` is not one (`get`'s only after `get`), false when it
        /// was given before.
        mutating func flag(_ name: Substring, afterGet: Bool) -> Bool? {
            switch name {
            case "allow-insecure-permissions": return Self.once(&global.allowInsecurePermissions)
            case "json" where afterGet: return Self.once(&json)
            case "allow-expired" where afterGet: return Self.once(&allowExpired)
            case "fresh" where afterGet: return Self.once(&fresh)
            case "header" where afterGet: return Self.once(&header)
            default: return nil
            }
        }

        static func takesValue(_ name: Substring) -> Bool {
            name == "backend" || name == "file" || name == "key-file" || name == "passphrase-file"
        }

        private static func once(_ slot: inout String?, _ value: String) -> Bool {
            guard slot == nil else { return false }
            slot = value
            return true
        }

        private static func once(_ flag: inout Bool) -> Bool {
            guard !flag else { return false }
            flag = true
            return true
        }
    }

    private static func get(_ arguments: [String]) -> GetLine? {
        var seen = Seen()
        var positionals: [String] = []
        var sawGet = false
        var index = arguments.startIndex
        while index < arguments.endIndex {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("-") else {
                guard !argument.isEmpty, argument != "help" else { return nil }
                if sawGet {
                    positionals.append(argument)
                } else {
                    // The first word names the subcommand; only `get` is read here.
                    guard argument == "get" else { return nil }
                    sawGet = true
                }
                continue
            }
            guard argument.hasPrefix("--") else { return nil }
            let body = argument.dropFirst(2)
            let name: Substring
            var value: String?
            if let equals = body.firstIndex(of: "=") {
                name = body[..<equals]
                value = String(body[body.index(after: equals)...])
            } else {
                name = body
            }
            guard !name.isEmpty else { return nil }
            if Seen.takesValue(name) {
                if value == nil {
                    guard index < arguments.endIndex else { return nil }
                    value = arguments[index]
                    index += 1
                }
                guard let value, !value.isEmpty, !value.hasPrefix("-"), value != "get" else { return nil }
                guard seen.set(name, to: value) == true else { return nil }
            } else {
                guard value == nil, seen.flag(name, afterGet: sawGet) == true else { return nil }
            }
        }
        guard sawGet, (1...2).contains(positionals.count) else { return nil }

        var global = seen.global
        if let backend = seen.backend {
            guard let argument = BackendArgument(argument: backend) else { return nil }
            global.backend = argument
        }
        // What ArgumentParser's validation of the command and its option groups refuses (a line
        // that fails goes to it, so that the error is reported in its words, exit 64): both kinds
        // of key (GlobalOptions), an entry no key can name (EntryArguments), --header with --json
        // (Get). An empty --file never gets here. FastPathTests checks that the command of every
        // line read here validates.
        let service = positionals[0]
        let account = positionals.count == 2 ? positionals[1] : CredentialKey.defaultAccount
        guard global.keyFile == nil || global.passphraseFile == nil, !(seen.header && seen.json),
            let key = try? CredentialKey(service: service, account: account)
        else { return nil }
        return GetLine(
            global: global, service: service, account: account, key: key, json: seen.json, allowExpired: seen.allowExpired,
            fresh: seen.fresh, header: seen.header)
    }
}
#endif
