#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import FoundationEssentials

import Glibc

/// The command line as bytes. `CommandLine.arguments` repairs bytes that are not UTF-8 into
/// U+FFFD, so `caf\xE8` and `caf\xE9` would both arrive as `caf\u{FFFD}` and name the same entry:
/// the raw `argv` is checked before anything is parsed.
enum RawArguments {
    /// The position (1 for the first argument after the program name) of the first argument
    /// whose bytes are not UTF-8, or `nil` if every one is.
    static func firstNonUTF8(argc: Int32 = CommandLine.argc, argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?> = CommandLine.unsafeArgv) -> Int? {
        for index in 1..<max(1, Int(argc)) {
            guard let argument = argv[index] else { continue }
            let bytes = UnsafeRawBufferPointer(start: argument, count: strlen(argument))
            if String(validating: bytes, as: UTF8.self) == nil { return index }
        }
        return nil
    }

    /// Exits with the usage code and a message (which never repeats the argument: it may be a
    /// secret typed in the wrong place) if an argument is not UTF-8.
    static func refuseNonUTF8() {
        guard let position = firstNonUTF8() else { return }
        // If even stderr cannot take the message, the exit code still says what happened.
        try? Output.error(
            "Argument \(position) is not valid UTF-8 (it is not repeated here). Names, paths and options must be UTF-8: bytes that are not would be repaired into U+FFFD, and two different names could then name the same entry."
        )
        VaultCommand.exit(withError: ExitCode(ExitStatus.usage))
    }
}
#endif
