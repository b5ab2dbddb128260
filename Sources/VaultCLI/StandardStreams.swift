#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import Glibc

/// Stdin, stdout and stderr as `vault` starts.
enum StandardStreams {
    /// Puts `/dev/null` on any of descriptors 0, 1 and 2 that is closed (`2>&-`), opened the other
    /// way round (stdin write-only, stdout and stderr read-only).
    ///
    /// Otherwise the next file `vault` opens (the vault file, a lock, a plist) would get that
    /// number, and a message meant for stderr would be written into it. Opened the other way
    /// round, a read or write there fails with `EBADF`, so a closed stderr or stdout is still an
    /// output error (exit 74), not silence. Runs first, before anything opens a file.
    static func occupyClosedDescriptors() {
        for descriptor in [STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO] where fcntl(descriptor, F_GETFD) == -1 && errno == EBADF {
            // open returns the lowest free number, which is this one: the lower ones are open.
            let opened = open("/dev/null", descriptor == STDIN_FILENO ? O_WRONLY : O_RDONLY)
            if opened >= 0, opened != descriptor {
                // Cannot happen (see above); never leave a stray descriptor behind.
                _ = close(opened)
            }
        }
    }
}
#endif
