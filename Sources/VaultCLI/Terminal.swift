#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import FoundationEssentials
import TokenVault
internal import TokenVaultSystem

/// Reading secrets typed at a terminal: echo off, straight into secure memory, never a `String`.
enum Terminal {
    /// The longest secret accepted from a terminal, in bytes. Longer input is refused, never cut
    /// short; a longer token can be piped into `vault set`, which reads up to 1 MiB from a pipe.
    static let maximumLength = 4096

    /// The controlling terminal opened for reading and writing, or `nil` if there is none.
    static func openControllingTerminal() -> Int32? {
        SystemCall.openControllingTerminal()
    }

    static func isTerminal(_ fd: Int32) -> Bool { SystemCall.isTerminal(fd) }

    /// Shows `prompt` on `output` and reads one line from the terminal `input` with echo off.
    ///
    /// The terminal is put in non-canonical mode without signals so that the bytes go straight
    /// into `sodium_malloc` memory: Backspace erases, Enter ends, Ctrl-C or Ctrl-D on an empty
    /// line cancels. The terminal's settings are restored before returning, whatever happens.
    /// The prompt appears only once echo is off, so nothing typed after it is echoed or flushed.
    ///
    /// - Throws: `tooLarge` for a line longer than ``maximumLength`` (read to its end and
    ///   discarded, so that no part of it reaches whatever reads the terminal next);
    ///   `cancelled`; `io` when the terminal cannot be set up.
    static func readSecret(prompt: String, input: Int32, output: Int32) throws -> SecretBytes {
        guard let original = try? SystemCall.terminalSettings(input) else {
            throw VaultError(.io, "Could not read the terminal settings.")
        }
        do {
            try SystemCall.silenceTerminal(input, from: original)
        } catch {
            throw VaultError(.io, "Could not turn off the terminal's echo; not asking for a secret with echo on.")
        }
        defer {
            // Best effort on the way out: the secret has been read (or refused) either way.
            _ = try? SystemCall.restoreTerminal(input, original)
            show(output, "\n")
        }
        show(output, prompt)

        var length = 0
        var cancelled = false
        var tooLong = false
        let scratch = try SecretBytes(count: maximumLength) { buffer in
            var byte: UInt8 = 0
            while true {
                let count = (try? withUnsafeMutableBytes(of: &byte) { raw in try SystemCall.read(input, into: raw) }) ?? -1
                guard count == 1 else {
                    cancelled = length == 0 && !tooLong
                    return
                }
                switch byte {
                case 0x0A, 0x0D:  // Enter
                    return
                case 0x03:  // Ctrl-C
                    cancelled = true
                    return
                case 0x04:  // Ctrl-D
                    if length == 0 && !tooLong {
                        cancelled = true
                    }
                    return
                case 0x7F, 0x08:  // Backspace: drop one UTF-8 character
                    while length > 0 {
                        length -= 1
                        let removed = buffer[length]
                        buffer[length] = 0
                        if removed & 0xC0 != 0x80 { break }
                    }
                case 0x15:  // Ctrl-U: erase the line, even one that was too long
                    for index in 0..<length { buffer[index] = 0 }
                    length = 0
                    tooLong = false
                default:
                    guard !tooLong else { break }
                    guard length < buffer.count else {
                        // Keep reading to the end of the line, but keep none of it.
                        tooLong = true
                        for index in 0..<length { buffer[index] = 0 }
                        length = 0
                        break
                    }
                    buffer[length] = byte
                    length += 1
                }
                byte = 0
            }
        }
        if cancelled {
            throw VaultError(.cancelled, "Cancelled.")
        }
        if tooLong {
            throw VaultError(
                .tooLarge,
                "The input typed is longer than \(maximumLength) bytes, the most read from a terminal; it was discarded, not cut short. Pipe a longer token into `vault set` instead."
            )
        }
        return try SecretBytes(count: length) { destination in
            scratch.withUnsafeBytes { source in
                destination.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[0..<length]))
            }
        }
    }

    /// Asks for the passphrase of an existing vault at the terminal `terminal`.
    /// - Throws: `invalidInput` for an empty passphrase, and what ``readSecret(prompt:input:output:)`` throws.
    static func readPassphrase(prompt: String, terminal: Int32) throws -> SecretBytes {
        let passphrase = try readSecret(prompt: prompt, input: terminal, output: terminal)
        guard passphrase.count > 0 else {
            throw VaultError(.invalidInput, "The passphrase must not be empty.")
        }
        return passphrase
    }

    /// Asks for a new passphrase twice, the one place that does: a typing mistake in a new
    /// passphrase would otherwise lock its owner out of the vault.
    /// - Parameter ifTheyDiffer: what was left undone when the two differ, for the message.
    static func readNewPassphrase(
        prompt: String, repeatPrompt: String, ifTheyDiffer: String, terminal: Int32
    ) throws -> SecretBytes {
        let passphrase = try readPassphrase(prompt: prompt, terminal: terminal)
        let again = try readSecret(prompt: repeatPrompt, input: terminal, output: terminal)
        guard again == passphrase else {
            throw VaultError(.invalidInput, "The two passphrases differ; \(ifTheyDiffer).")
        }
        return passphrase
    }

    private static func show(_ fd: Int32, _ text: String) {
        var text = text
        // A prompt that cannot be shown is not a reason to stop: the read that follows fails.
        text.withUTF8 { bytes in _ = try? SystemCall.writeAll(fd, UnsafeRawBufferPointer(bytes)) }
    }
}
#endif
