// Owns: the default translation of an ``Errno`` into a ``VaultError`` whose message names the
// operation and the path and gives the system's own reason, never file contents. Callers that
// know more (a missing key file, a missing plist, a symbolic link where a lock must be) check
// those cases first.
package import TokenVaultSystem
extension VaultError {
    /// What a failed file write leaves behind, for the `diskFull` message.
    package static let vaultKeepsLastState = "The vault keeps its last complete state"

    /// The ``VaultError`` for `errno` after `operation` on `path` failed.
    package static func system(
        _ errno: Errno, _ operation: String, _ path: String, diskFull consequence: String = vaultKeepsLastState
    ) -> VaultError {
        if errno.isPermission {
            return VaultError(.permissionDenied, "Cannot \(operation) \(path): \(errno.message).", underlying: errno)
        }
        if errno.isDiskFull {
            return VaultError(
                .diskFull,
                "Cannot \(operation) \(path): \(errno.message). \(consequence); free some space and try again.",
                underlying: errno)
        }
        return VaultError(.io, "Cannot \(operation) \(path): \(errno.message).", underlying: errno)
    }
}

/// Runs `body`; an ``Errno`` it throws becomes ``VaultError/system(_:_:_:diskFull:)``.
@discardableResult
func withErrnoMapped<Result>(
    _ operation: @autoclosure () -> String, _ path: @autoclosure () -> String,
    diskFull consequence: String = VaultError.vaultKeepsLastState, _ body: () throws -> Result
) throws -> Result {
    do {
        return try body()
    } catch let errno as Errno {
        throw VaultError.system(errno, operation(), path(), diskFull: consequence)
    }
}
