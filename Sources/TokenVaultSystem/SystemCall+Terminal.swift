// Owns: the terminal calls of the `vault` command: opening the controlling terminal, and the
// termios settings for reading a secret with echo off (and putting the old ones back).
internal import Glibc

extension SystemCall {
    /// A terminal's settings as `tcgetattr` read them, to be put back with ``restoreTerminal(_:_:)``.
    package struct TerminalSettings: @unchecked Sendable {  // a plain C struct of integers
        fileprivate var raw: termios
    }

    /// The controlling terminal opened for reading and writing (never becoming the controlling
    /// terminal of a process that has none), or `nil` if there is none.
    package static func openControllingTerminal() -> Int32? {
        try? open("/dev/tty", [.readWrite, .noControllingTerminal])
    }

    /// Reads `fd`'s terminal settings.
    package static func terminalSettings(_ fd: Int32) throws(Errno) -> TerminalSettings {
        var raw = termios()
        try retrying { tcgetattr(fd, &raw) }
        return TerminalSettings(raw: raw)
    }

    /// Puts the terminal `fd` in the mode for typing a secret: no echo (not even of the newline),
    /// non-canonical (each byte as it is typed, one at a time), no signals from Ctrl-C or Ctrl-Z
    /// and no extended input processing; pending input is discarded (`TCSAFLUSH`).
    package static func silenceTerminal(_ fd: Int32, from original: TerminalSettings) throws(Errno) {
        var silent = original.raw
        silent.c_lflag &= ~tcflag_t(ECHO | ECHONL | ICANON | ISIG | IEXTEN)
        withUnsafeMutableBytes(of: &silent.c_cc) { cc in
            cc[Int(VMIN)] = 1
            cc[Int(VTIME)] = 0
        }
        try retrying { tcsetattr(fd, TCSAFLUSH, &silent) }
    }

    /// Puts `settings` back on the terminal `fd` (`TCSAFLUSH`).
    package static func restoreTerminal(_ fd: Int32, _ settings: TerminalSettings) throws(Errno) {
        var raw = settings.raw
        try retrying { tcsetattr(fd, TCSAFLUSH, &raw) }
    }
}
