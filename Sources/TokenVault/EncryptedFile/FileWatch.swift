// Owns: telling, without a path lookup, that nobody has touched the vault file since the last
// check. An inotify instance watches the file's inode (writes through any name) and its directory
// (the name replaced, moved or removed). No event since a check that found the in-memory state
// current means the state is still current; any event, or any doubt, means "check with stat".
internal import Dispatch
internal import TokenVaultSystem

/// A cheap "has anything happened?" for ``VaultFile``'s read path.
///
/// A warm get used to `stat` the vault's path every time to notice another process's write or a
/// replaced file; the path walk was about a third of its cost. Now it reads this instance's queue,
/// one non-blocking `read` that finds nothing while the file is left alone. The kernel queues an
/// event inside the writer's `write` or `rename` call, before that call returns, so a change
/// another process has finished is always seen. Used only on local file systems (on NFS and the
/// like other hosts' changes raise no event); elsewhere, or if inotify is unavailable (the
/// per-user instance limit), or once the kernel drops the directory's watch, ``VaultFile`` keeps
/// `stat`ing the path. A store sets its watch up only after a few dozen reads (see
/// `VaultFile.State.checksBeforeWatching`), so a short-lived process never pays for one.
///
/// A child made by `fork` (without `exec`) would share the instance's queue with its parent, as
/// it shares the vault's descriptors and `flock`: a store is not for use across a `fork`, and
/// nothing here checks for one (a `getpid` on every get cost about 5 % of it).
final class FileWatch: @unchecked Sendable {  // used only under VaultFile's state lock
    private let fd: Int32
    private let directoryWatch: Int32
    /// The watch on the vault's inode; replaced when the file is.
    private var fileWatch: Int32

    enum Poll {
        /// No event since the last poll.
        case quiet
        /// Something happened (or events were lost): check with `stat`.
        case changed
        /// The watch no longer works (its directory is gone or unmounted): stop using it.
        case broken
    }

    /// Watches the vault by the inode behind `fileFD`, and `directory`, the one that holds its
    /// name; `nil` where that cannot be done, or would not be trustworthy.
    init?(directory: String, fd fileFD: Int32) {
        guard Self.isLocal(fileFD) else { return nil }
        guard let fd = try? SystemCall.inotifyInstance() else { return nil }
        let directoryEvents: SystemCall.InotifyEvents = [.create, .movedTo, .movedFrom, .delete, .deleteSelf, .moveSelf]
        let directoryWatch = (try? SystemCall.inotifyWatch(fd, directory, directoryEvents.union(.onlyDirectory))) ?? -1
        let fileWatch = Self.addFileWatch(fd, fileFD: fileFD)
        guard directoryWatch >= 0, fileWatch >= 0 else {
            SystemCall.closeAfterUse(fd)
            return nil
        }
        self.fd = fd
        self.directoryWatch = directoryWatch
        self.fileWatch = fileWatch
    }

    /// Closed on another thread: freeing an inotify instance waits for a kernel grace period
    /// (milliseconds), which the thread that dropped the store need not wait for.
    deinit {
        let fd = fd
        DispatchQueue.global(qos: .utility).async { SystemCall.closeAfterUse(fd) }
    }

    /// Watches the inode open at `fileFD` (after a reload, the new file), by its /proc/self/fd
    /// name: the inode this process reads, whatever happened to the path meanwhile.
    func watchFile(_ fileFD: Int32) -> Bool {
        let new = Self.addFileWatch(fd, fileFD: fileFD)
        guard new >= 0 else { return false }
        // The replaced file's watch, unless the kernel gave the same one back (same inode).
        if new != fileWatch { SystemCall.inotifyRemoveWatch(fd, fileWatch) }
        fileWatch = new
        return true
    }

    private static func addFileWatch(_ fd: Int32, fileFD: Int32) -> Int32 {
        (try? SystemCall.inotifyWatch(fd, "/proc/self/fd/\(fileFD)", [.modify, .attributes, .deleteSelf])) ?? -1
    }

    /// Drains the queue and says what it held.
    func poll() -> Poll {
        // On the stack: this runs on every warm get.
        withUnsafeTemporaryAllocation(byteCount: 4096, alignment: 8) { buffer in
            var result = Poll.quiet
            while true {
                let read: Int?
                do { read = try SystemCall.readIfReady(fd, into: buffer) } catch { return .broken }  // not to be trusted
                guard let count = read else { return result }  // EAGAIN: drained
                if count == 0 { return .broken }
                result = .changed
                var offset = 0
                // struct inotify_event: wd (Int32), mask (UInt32), cookie (UInt32), len (UInt32), name[len].
                while offset + 16 <= count {
                    let watch = buffer.loadUnaligned(fromByteOffset: offset, as: Int32.self)
                    let mask = buffer.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                    let length = buffer.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self)
                    // The directory's watch is gone: no event will come for a replaced file any more.
                    if watch == directoryWatch, mask & SystemCall.InotifyEvents.ignored.rawValue != 0 { return .broken }
                    offset += 16 + Int(length)
                }
            }
        }
    }

    /// Local file systems whose every change on this host raises an inotify event.
    private static func isLocal(_ fd: Int32) -> Bool {
        guard let type = SystemCall.fileSystemType(fd) else { return false }
        let local: Set<Int> = [
            0xEF53,  // ext2/3/4
            0x5846_5342,  // xfs
            0x9123_683E,  // btrfs
            0x0102_1994,  // tmpfs
            0xF2F5_2010,  // f2fs
        ]
        return local.contains(type)
    }
}
