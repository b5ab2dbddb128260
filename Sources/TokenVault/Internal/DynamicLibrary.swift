// Owns: calling a C shim's dlopen loader (tv_curl_load, tv_libsecret_load) and reading back the
// message it writes when the library cannot be opened or lacks a function.

enum DynamicLibrary {
    /// The signature every shim's loader has: `int load(const char *soname, char *message, size_t size)`,
    /// returning 1 when every function resolved, or 0 with the reason in `message`.
    typealias Loader = (UnsafePointer<CChar>?, UnsafeMutablePointer<CChar>?, Int) -> Int32

    /// Runs `loader` on `soname`: `nil` when the library is loaded, otherwise the loader's reason.
    static func load(_ soname: String, with loader: Loader) -> String? {
        var message = [CChar](repeating: 0, count: 512)
        let loaded = message.withUnsafeMutableBufferPointer { buffer in
            loader(soname, buffer.baseAddress, buffer.count)
        }
        if loaded != 0 { return nil }
        return message.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }
}
