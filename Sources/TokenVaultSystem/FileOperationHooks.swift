// Owns: the test seam of ``SystemCall``. A hook installed for a directory sees every call that
// changes a file below it (create, write, truncate, sync, rename, unlink, mkdir) before and
// after it runs, and may fail it with an injected ``Errno``. With no hook installed the cost
// is one atomic load per call.
internal import Synchronization

/// A change to the file system, as the crash-state tests replay it.
package enum FileOperation: Sendable, Equatable {
    case create(path: String)
    case write(path: String, offset: Int64, bytes: [UInt8])
    case truncate(path: String, size: Int64)
    /// `fsync` or `fdatasync` of a file.
    case sync(path: String)
    case syncDirectory(path: String)
    case rename(from: String, to: String)
    /// `renameat2` with `RENAME_EXCHANGE`: each name then holds what the other held.
    case exchange(first: String, second: String)
    case unlink(path: String)
    case makeDirectory(path: String)

    /// The paths the operation touches.
    package var paths: [String] {
        switch self {
        case .create(let path), .write(let path, _, _), .truncate(let path, _), .sync(let path),
            .syncDirectory(let path), .unlink(let path), .makeDirectory(let path):
            [path]
        case .rename(let from, let to): [from, to]
        case .exchange(let first, let second): [first, second]
        }
    }
}

/// Observes, and may fail, the file changes below one directory.
package protocol FileOperationHook: AnyObject, Sendable {
    /// Called before `operation` runs; a returned error fails the call without running it.
    func willPerform(_ operation: FileOperation) -> Errno?
    /// Called after `operation` succeeded.
    func didPerform(_ operation: FileOperation)
}

package enum FileOperationHooks {
    private static let active = Atomic<Int>(0)
    private static let installed = Mutex<[(directory: String, hook: any FileOperationHook)]>([])

    package static var isActive: Bool { active.load(ordering: .relaxed) > 0 }

    /// Installs `hook` for `directory` itself (its `fsync`) and every path below it (an absolute
    /// path without a trailing `/`).
    package static func install(_ hook: any FileOperationHook, below directory: String) {
        installed.withLock { $0.append((directory, hook)) }
        active.add(1, ordering: .relaxed)
    }

    package static func remove(_ hook: any FileOperationHook) {
        let removed = installed.withLock { list in
            let before = list.count
            list.removeAll { $0.hook === hook }
            return before - list.count
        }
        active.subtract(removed, ordering: .relaxed)
    }

    private static func hook(for operation: FileOperation) -> (any FileOperationHook)? {
        guard isActive else { return nil }
        return installed.withLock { list in
            list.first { entry in
                operation.paths.contains { $0 == entry.directory || $0.hasPrefix(entry.directory + "/") }
            }?.hook
        }
    }

    package static func before(_ operation: @autoclosure () -> FileOperation) throws(Errno) {
        guard isActive else { return }
        let operation = operation()
        if let hook = hook(for: operation), let injected = hook.willPerform(operation) { throw injected }
    }

    package static func after(_ operation: @autoclosure () -> FileOperation) {
        guard isActive else { return }
        let operation = operation()
        hook(for: operation)?.didPerform(operation)
    }
}
