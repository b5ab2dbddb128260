// Owns: what a long-lived process (`vault agent`) asks of glibc's malloc and of the kernel about
// its own memory: how many malloc arenas, giving freed heap back, and dropping its mappings of
// start-up code. Nothing here allocates for anyone or knows what the memory holds.
internal import Glibc

extension SystemCall {
    /// glibc's `mallopt` and `malloc_trim` (declared in `malloc.h`, which the Glibc module does
    /// not export): looked up once with `dlsym`; nil under another C library.
    private enum Malloc {
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        typealias Trim = @convention(c) (Int) -> Int32
        /// `M_ARENA_MAX`, from glibc's stable ABI.
        static let arenaMaximum: Int32 = -8
        static let mallopt: Mallopt? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt").map { unsafeBitCast($0, to: Mallopt.self) }
        static let trim: Trim? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim").map { unsafeBitCast($0, to: Trim.self) }
    }

    /// At most `count` malloc arenas. glibc makes up to eight per core, one more each time a
    /// thread finds the others busy, and each keeps the memory its threads freed: a process that
    /// serves many short-lived threads (the agent's connections) ends up holding a little of each.
    /// - Returns: whether glibc took the setting.
    @discardableResult
    package static func limitMallocArenas(to count: Int32) -> Bool {
        (Malloc.mallopt?(Malloc.arenaMaximum, count) ?? 0) == 1
    }

    /// Gives the free memory of every malloc arena back to the kernel (`malloc_trim(0)`), after
    /// work that allocated much and freed it again.
    package static func trimMalloc() {
        _ = Malloc.trim?(0)
    }

    /// Drops this process's mappings of its own executable's code (`madvise(MADV_DONTNEED)` on
    /// the program file's `r-xp` mappings; never its data): the pages stay in the page cache,
    /// shared with every other process of the same program, and the ones the process runs again
    /// are mapped again on their first use (a minor fault, no I/O). A private mapping that is
    /// read-only and executable holds no change of ours (the dynamic loader relocates the
    /// writable segment, not the code), so dropping it loses nothing.
    ///
    /// For a long-lived process once it has started: the code only the start ran (the
    /// command-line parser, the backend plan, opening the vault) stops counting in its resident
    /// set; the code it keeps running comes back.
    /// - Returns: the bytes of mappings dropped.
    @discardableResult
    package static func releaseExecutableCodeMappings() -> Int {
        guard let executable = try? linkTarget("/proc/self/exe"), let maps = try? readWhole("/proc/self/maps") else { return 0 }
        var released = 0
        for line in maps.split(separator: "\n") {
            // start-end perms offset device inode path
            let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
            guard fields.count == 6, fields[1] == "r-xp", fields[5].drop(while: { $0 == " " }) == executable else { continue }
            let bounds = fields[0].split(separator: "-")
            guard bounds.count == 2, let start = UInt(bounds[0], radix: 16), let end = UInt(bounds[1], radix: 16), end > start,
                let address = UnsafeMutableRawPointer(bitPattern: start)
            else { continue }
            if madvise(address, Int(end - start), MADV_DONTNEED) == 0 { released += Int(end - start) }
        }
        return released
    }

    /// The target of a symbolic link such as `/proc/self/exe`.
    package static func linkTarget(_ path: String) throws(Errno) -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = try retrying { readlink(path, &buffer, buffer.count - 1) }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A file of /proc, read whole (`stat` does not know its size).
    package static func readWhole(_ path: String) throws -> String {
        let fd = try SystemCall.open(path, .readOnly)
        defer { SystemCall.closeAfterUse(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16384)
        while true {
            let count = try chunk.withUnsafeMutableBytes { raw in try SystemCall.read(fd, into: raw) }
            if count == 0 { break }
            bytes += chunk[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension SystemCall {
    /// `count` bytes from malloc, or nil when there are none to give (a large read buffer fails
    /// with an error, where Swift's allocation would stop the process).
    package static func allocateBytes(_ count: Int) -> UnsafeMutableRawPointer? { malloc(count) }

    /// Gives back what ``allocateBytes(_:)`` gave; nil does nothing.
    package static func freeBytes(_ pointer: UnsafeMutableRawPointer?) { free(pointer) }
}
