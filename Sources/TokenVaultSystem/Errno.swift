// Owns: the Swift name for a C `errno` value (swift-system's `Errno` style) that every call of
// ``SystemCall`` throws, and the system's text for it. It knows nothing about vaults, plists or locks.
internal import Glibc

/// A C `errno` value. The lowest layer throws it; callers that know what the file was turn it
/// into a ``VaultError``. It is also kept as the `underlying` error of that ``VaultError``.
package struct Errno: Error, Hashable, Sendable, CustomStringConvertible {
    package let rawValue: Int32

    package init(rawValue: Int32) { self.rawValue = rawValue }

    /// The value of `errno` now.
    package static var current: Errno { Errno(rawValue: errno) }

    package static let interrupted = Errno(rawValue: EINTR)
    package static let noSuchFileOrDirectory = Errno(rawValue: ENOENT)
    package static let notDirectory = Errno(rawValue: ENOTDIR)
    package static let fileExists = Errno(rawValue: EEXIST)
    package static let permissionDenied = Errno(rawValue: EACCES)
    package static let notPermitted = Errno(rawValue: EPERM)
    package static let readOnlyFileSystem = Errno(rawValue: EROFS)
    package static let ioError = Errno(rawValue: EIO)
    package static let noSpace = Errno(rawValue: ENOSPC)
    package static let diskQuotaExceeded = Errno(rawValue: EDQUOT)
    package static let fileTooLarge = Errno(rawValue: EFBIG)
    package static let tooManySymbolicLinks = Errno(rawValue: ELOOP)
    package static let wouldBlock = Errno(rawValue: EWOULDBLOCK)
    package static let deviceOrAddress = Errno(rawValue: ENXIO)
    package static let invalidArgument = Errno(rawValue: EINVAL)
    package static let notImplemented = Errno(rawValue: ENOSYS)
    package static let notSupported = Errno(rawValue: EOPNOTSUPP)
    package static let badDescriptor = Errno(rawValue: EBADF)
    package static let timedOut = Errno(rawValue: ETIMEDOUT)
    package static let connectionRefused = Errno(rawValue: ECONNREFUSED)
    package static let connectionReset = Errno(rawValue: ECONNRESET)
    package static let connectionAborted = Errno(rawValue: ECONNABORTED)
    package static let addressInUse = Errno(rawValue: EADDRINUSE)
    package static let nameTooLong = Errno(rawValue: ENAMETOOLONG)
    package static let tooManyOpenFiles = Errno(rawValue: EMFILE)
    package static let resultTooLarge = Errno(rawValue: ERANGE)

    /// The system's own text for the error, such as "No space left on device".
    package var message: String { Self.message(rawValue) }

    /// The system's own text for the C error code `code` (`strerror`).
    package static func message(_ code: Int32) -> String {
        guard let text = strerror(code) else { return "error \(code)" }
        return String(cString: text)
    }

    package var description: String { "errno \(rawValue) (\(message))" }

    /// Out of space or quota: the write did not happen for want of room.
    package var isDiskFull: Bool { self == .noSpace || self == .diskQuotaExceeded || self == .fileTooLarge }
    /// Refused by permissions or a read-only file system.
    package var isPermission: Bool { self == .permissionDenied || self == .notPermitted || self == .readOnlyFileSystem }
}
