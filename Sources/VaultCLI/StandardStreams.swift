#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import TokenVaultSystem

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
        for descriptor in [SystemCall.standardInput, SystemCall.standardOutput, SystemCall.standardError]
        where !SystemCall.isOpen(descriptor) {
            // open returns the lowest free number, which is this one: the lower ones are open.
            // Inheritable, as a standard stream is: a command `vault run` starts gets it too.
            let opened = try? SystemCall.openInheritable("/dev/null", descriptor == SystemCall.standardInput ? .writeOnly : .readOnly)
            if let opened, opened != descriptor {
                // Cannot happen (see above); never leave a stray descriptor behind.
                SystemCall.closeAfterUse(opened)
            }
        }
    }
}
#endif
