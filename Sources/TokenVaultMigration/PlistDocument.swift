import TokenVault
import Foundation

internal import TokenVaultSystem

/// A defaults plist as read from disk: its exact bytes, format, top-level dictionary and file
/// attributes, so that it can be rewritten without some keys and otherwise exactly as it was.
struct PlistDocument {
    /// Defaults plists are small; anything past this is not one.
    static let maximumSize = 32 << 20

    /// The file, with symbolic links resolved (so a rewrite replaces the real file, not the link).
    let path: String
    let bytes: Data
    let format: PropertyListSerialization.PropertyListFormat
    let dictionary: [String: Any]
    let mode: mode_t
    let owner: uid_t
    let group: gid_t
    /// Which file was read (device and inode), so that a file put in its place is noticed.
    let identity: (device: UInt64, inode: UInt64)

    var formatName: String {
        switch format {
        case .xml: "xml"
        case .binary: "binary"
        case .openStep: "openstep"
        @unknown default: "unknown"
        }
    }

    /// Reads and parses the plist at `url`.
    /// - Throws: `notFound` if it does not exist, `permissionDenied` if it cannot be read,
    ///   `invalidInput` if it is not a plist or its top level is not a dictionary.
    static func read(_ url: URL) throws -> PlistDocument {
        let path = url.resolvingSymlinksInPath().path
        let (bytes, info) = try PlistSyscall.readFile(path, limit: maximumSize)
        var format = PropertyListSerialization.PropertyListFormat.xml
        let root: Any
        do {
            root = try propertyList(from: bytes, format: &format)
        } catch let refusal as PlistBudget.Refusal where refusal != .damaged {
            throw VaultError(
                .tooLarge, "\(path) was refused without being parsed: \(refusal.reason). It is not a defaults plist; nothing was changed.")
        } catch {
            // The parser's message may quote the file's contents, so it is not passed on.
            throw VaultError(.invalidInput, "\(path) is not a readable property list (it may be corrupt); nothing was changed.")
        }
        guard let dictionary = root as? [String: Any] else {
            throw VaultError(.invalidInput, "\(path) is a property list, but its top level is not a dictionary; nothing was changed.")
        }
        return PlistDocument(
            path: path, bytes: bytes, format: format, dictionary: dictionary,
            mode: mode_t(info.mode), owner: uid_t(info.owner), group: gid_t(info.group),
            identity: (info.device, info.inode)
        )
    }

    /// Parses a property list, as `PropertyListSerialization` does, but first refuses a binary
    /// plist that holds a set or whose object table cannot be checked, and any plist that would
    /// expand to more work than ``PlistBudget`` allows (thrown as a ``PlistBudget/Refusal``).
    ///
    /// Sets are not property-list types, but the binary format can encode them, and
    /// swift-corelibs-foundation crashes (a null pointer dereference while bridging the NSSet)
    /// on any binary plist that holds a non-empty one: a hostile plist would take the process
    /// down instead of being refused. Found by Fuzz/FuzzMigrationDetector.
    static func propertyList(from data: Data, format: inout PropertyListSerialization.PropertyListFormat) throws -> Any {
        guard binaryPlistIsFreeOfSets(data) else {
            throw VaultError(.invalidInput, "The data is a binary property list that holds a set or is damaged.")
        }
        try PlistBudget.check(data)
        return try PropertyListSerialization.propertyList(from: data, options: [], format: &format)
    }

    /// Whether `data` is not a binary plist (`bplist0…`, what CoreFoundation parses as one), or is
    /// one whose every object, as listed in its offset table, is something other than a set
    /// (marker `0xC_`). A trailer or offset table that does not fit counts as not free of sets.
    static func binaryPlistIsFreeOfSets(_ data: Data) -> Bool {
        let bytes = [UInt8](data.prefix(7))
        guard bytes == Array("bplist0".utf8) else { return true }
        return data.withUnsafeBytes { (all: UnsafeRawBufferPointer) -> Bool in
            // Trailer (32 bytes): 6 unused, offset size, ref size, object count, top object, table offset (u64 BE).
            let trailerLength = 32
            guard all.count >= 8 + 1 + trailerLength else { return false }
            let trailer = all.count - trailerLength
            func readBE(at offset: Int, size: Int) -> UInt64 {
                (0..<size).reduce(UInt64(0)) { $0 << 8 | UInt64(all[offset + $1]) }
            }
            let offsetSize = Int(all[trailer + 6])
            let objectCount = readBE(at: trailer + 8, size: 8)
            let tableOffset = readBE(at: trailer + 24, size: 8)
            guard (1...8).contains(offsetSize), tableOffset >= 8, tableOffset <= UInt64(trailer),
                objectCount <= UInt64(trailer - Int(tableOffset)) / UInt64(offsetSize)
            else { return false }
            for index in 0..<Int(objectCount) {
                let object = readBE(at: Int(tableOffset) + index * offsetSize, size: offsetSize)
                if object < UInt64(all.count), all[Int(object)] & 0xF0 == 0xC0 { return false }
            }
            return true
        }
    }

    /// The plist serialized in its own format without the values at `removed` (top-level keys,
    /// or keys of dictionaries nested in it), checked to parse back to exactly what remains.
    func serialized(removing removed: [PlistPath]) throws -> Data {
        guard format == .xml || format == .binary else {
            throw VaultError(.invalidInput, "\(path) is an old OpenStep-format plist, which cannot be rewritten in its own format.")
        }
        var remainingValue: Any = dictionary
        for path in removed {
            remainingValue = Self.removing(path.components[...], from: remainingValue)
        }
        guard let remaining = remainingValue as? [String: Any] else {
            throw VaultError(.io, "Could not work out the rewritten \(path); nothing was changed.")
        }
        let data: Data
        do {
            data = try PropertyListSerialization.data(fromPropertyList: remaining, format: format, options: 0)
        } catch {
            throw VaultError(.io, "Could not serialize the rewritten \(path); nothing was changed.")
        }
        var format = format
        guard
            let reparsed = try? PropertyListSerialization.propertyList(from: data, options: [], format: &format)
                as? [String: Any],
            format == self.format,
            NSDictionary(dictionary: reparsed).isEqual(to: remaining)
        else {
            throw VaultError(.io, "The rewritten \(path) did not read back as the original less the migrated keys; nothing was changed.")
        }
        return data
    }

    /// `value` without the dictionary key that `components` leads to.
    private static func removing(_ components: ArraySlice<PlistPath.Component>, from value: Any) -> Any {
        guard let first = components.first else { return value }
        let rest = components.dropFirst()
        switch first {
        case .key(let name):
            guard var dictionary = value as? [String: Any], let inner = dictionary[name] else { return value }
            if rest.isEmpty {
                dictionary.removeValue(forKey: name)
            } else {
                dictionary[name] = removing(rest, from: inner)
            }
            return dictionary
        case .index(let index):
            guard var array = value as? [Any], array.indices.contains(index), !rest.isEmpty else { return value }
            array[index] = removing(rest, from: array[index])
            return array
        }
    }

    /// Replaces the file with `data` atomically, keeping its permissions, owner and group.
    /// Refuses if the file changed on disk since it was read (an app may be writing it): before
    /// the replacement, and again after it, on the old file that the replacement swapped out
    /// (see ``PlistSyscall/replaceAtomically(_:with:mode:owner:group:beforeRename:checkReplaced:)``).
    /// A change found after the swap is undone by swapping the app's file back in.
    /// - Returns: A warning when the file was replaced but its directory could not be synced.
    func replace(with data: Data) throws -> String? {
        try PlistSyscall.replaceAtomically(
            path, with: data, mode: mode, owner: owner, group: group,
            beforeRename: {
                let current = try PlistSyscall.readFile(path, limit: Self.maximumSize).data
                guard current == bytes else { throw changedWhileMigrating }
            },
            checkReplaced: { fd, openForWriting in
                // The old file, swapped out: the very file that was read, with the bytes that
                // were read, and nobody left who could still write to it.
                let status = try SystemCall.fstat(fd)
                guard !openForWriting, status.device == identity.device, status.inode == identity.inode,
                    status.size == Int64(bytes.count),
                    try PlistSyscall.readAll(fd, path, limit: Self.maximumSize) == bytes
                else { throw changedWhileMigrating }
            })
    }

    private var changedWhileMigrating: VaultError {
        VaultError(
            .io,
            "\(path) changed while the migration ran (is the app that owns it running?); it was left as it is now."
        )
    }
}
