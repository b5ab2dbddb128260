// Owns: ending the process at once (`exit`), for the one message a command built without its
// command line prints (Sources/vault, Sources/vault-full).
internal import Glibc

extension SystemCall {
    /// Ends the process with `status`, running `atexit` handlers.
    package static func exit(_ status: Int32) -> Never {
        Glibc.exit(status)
    }
}
