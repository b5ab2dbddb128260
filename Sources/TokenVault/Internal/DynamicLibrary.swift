// Owns: calling a C shim's dlopen loader (tv_curl_load, tv_libsecret_load) and reading back the
// message it writes when the library cannot be opened or lacks a function; and where a library
// is looked for: the system's library directories by absolute path, never the search path.

internal import TokenVaultSystem

enum DynamicLibrary {
    /// The signature every shim's loader has: `int load(const char *soname, char *message, size_t size)`,
    /// returning 1 when every function resolved, or 0 with the reason in `message`.
    typealias Loader = (UnsafePointer<CChar>?, UnsafeMutablePointer<CChar>?, Int) -> Int32

    /// The directories a library is taken from, in this order: the system's own, owned by root.
    ///
    /// A bare soname given to `dlopen` is looked up through the binary's `RUNPATH`, and a plain
    /// `swift build` puts `$ORIGIN` there: a `libcurl.so.4` placed beside `vault` would be loaded,
    /// and its constructors run, before anything could check it (issue 34). So the loader is given
    /// an absolute path in one of these directories, whatever the build, and `LD_LIBRARY_PATH`
    /// plays no part either. The libraries these depend on (GLib for libsecret, GnuTLS for curl)
    /// are found by the system loader from their own entries, never through `vault`'s `RUNPATH`.
    static let systemDirectories: [String] = {
        #if arch(x86_64)
        let multiarch: String? = "x86_64-linux-gnu"
        #elseif arch(arm64)
        let multiarch: String? = "aarch64-linux-gnu"
        #elseif arch(i386)
        let multiarch: String? = "i386-linux-gnu"
        #elseif arch(arm)
        let multiarch: String? = "arm-linux-gnueabihf"
        #else
        let multiarch: String? = nil
        #endif
        let debian = multiarch.map { ["/usr/lib/\($0)", "/lib/\($0)"] } ?? []
        return debian + ["/usr/lib64", "/lib64", "/usr/lib", "/lib"]
    }()

    /// The absolute path of `soname` in the first of ``systemDirectories`` that holds it, or `nil`.
    /// A name with a `/` is already a path and is returned as it is.
    static func systemPath(_ soname: String) -> String? {
        if soname.contains("/") { return soname }
        for directory in systemDirectories {
            let path = "\(directory)/\(soname)"
            if SystemCall.exists(path) { return path }
        }
        return nil
    }

    /// Runs `loader` on `soname` found in the system's library directories: `nil` when the library
    /// is loaded, otherwise the reason.
    static func load(_ soname: String, with loader: Loader) -> String? {
        guard let path = systemPath(soname) else {
            return "\(soname) is in none of the system library directories (\(systemDirectories.joined(separator: ", ")))"
        }
        var message = [CChar](repeating: 0, count: 512)
        let loaded = message.withUnsafeMutableBufferPointer { buffer in
            loader(path, buffer.baseAddress, buffer.count)
        }
        if loaded != 0 { return nil }
        return message.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }
}
