// Owns: the inotify calls (an instance, its watches, draining its queue) and `fstatfs`, for the
// encrypted file's change watch (TokenVault's FileWatch), which decides what the events mean.
internal import Glibc

extension SystemCall {
    /// Events of `inotify(7)`: what a watch asks for and what an event reports.
    package struct InotifyEvents: OptionSet, Sendable {
        package let rawValue: UInt32
        package init(rawValue: UInt32) { self.rawValue = rawValue }

        package static let modify = InotifyEvents(rawValue: UInt32(IN_MODIFY))
        package static let attributes = InotifyEvents(rawValue: UInt32(IN_ATTRIB))
        package static let create = InotifyEvents(rawValue: UInt32(IN_CREATE))
        package static let delete = InotifyEvents(rawValue: UInt32(IN_DELETE))
        package static let deleteSelf = InotifyEvents(rawValue: UInt32(IN_DELETE_SELF))
        package static let movedFrom = InotifyEvents(rawValue: UInt32(IN_MOVED_FROM))
        package static let movedTo = InotifyEvents(rawValue: UInt32(IN_MOVED_TO))
        package static let moveSelf = InotifyEvents(rawValue: UInt32(IN_MOVE_SELF))
        /// Only when the path is a directory (a watch flag).
        package static let onlyDirectory = InotifyEvents(rawValue: UInt32(IN_ONLYDIR))
        /// The watch was removed (explicitly, or its file or file system is gone).
        package static let ignored = InotifyEvents(rawValue: UInt32(IN_IGNORED))
    }

    /// A new inotify instance, non-blocking and close-on-exec.
    package static func inotifyInstance() throws(Errno) -> Int32 {
        try retrying { inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC)) }
    }

    /// Adds (or, for an inode already watched, replaces) a watch on `path`; returns its number.
    package static func inotifyWatch(_ fd: Int32, _ path: String, _ events: InotifyEvents) throws(Errno) -> Int32 {
        try retrying { inotify_add_watch(fd, path, events.rawValue) }
    }

    /// Removes a watch. Its `IN_IGNORED` event follows in the queue.
    package static func inotifyRemoveWatch(_ fd: Int32, _ watch: Int32) {
        _ = inotify_rm_watch(fd, watch)
    }

    /// One non-blocking read of the queue of `fd` into `buffer`: how many bytes, nil when it is
    /// empty (`EAGAIN`).
    package static func readIfReady(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int? {
        do {
            return try read(fd, into: buffer)
        } catch .wouldBlock {
            return nil
        }
    }

    /// `fstatfs(2)`. Swift's Glibc module leaves out `<sys/statfs.h>`, so it is looked up once
    /// with `dlsym`, as TokenVault's ProcessHardening looks up `prctl`.
    private typealias FStatFS = @convention(c) (Int32, UnsafeMutableRawPointer) -> Int32
    private static let fstatfs: FStatFS? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "fstatfs") else { return nil }
        return unsafeBitCast(symbol, to: FStatFS.self)
    }()

    /// The `f_type` magic number of the file system that holds `fd`'s file, or nil if unknown.
    package static func fileSystemType(_ fd: Int32) -> Int? {
        guard let fstatfs else { return nil }
        // struct statfs is 120 bytes on 64-bit Linux and begins with f_type, a long (the kernel's
        // __statfs_word); the buffer leaves room to spare.
        return withUnsafeTemporaryAllocation(byteCount: 512, alignment: 16) { buffer in
            guard fstatfs(fd, buffer.baseAddress!) == 0 else { return nil }
            return buffer.load(as: Int.self)
        }
    }
}
