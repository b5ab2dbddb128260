internal import CLibSecret

/// libsecret and GLib, opened on first use of the Secret Service (see `CLibSecret.h`).
///
/// Nothing links them: a file-vault command never maps them, which saves a third of a cold
/// `vault get` (issue 17). Every path into libsecret goes through ``GLibWorker/run(timeout:onTimeout:_:)``,
/// which calls ``require()`` first.
enum LibSecret {
    /// The process's one load of `libsecret-1.so.0`, tried once.
    private static let production: Result<Void, VaultError> = load(soname: TV_LIBSECRET_SONAME)

    /// Loads libsecret unless it is loaded; throws `backendUnavailable` when it cannot be.
    static func require() throws {
        try production.get()
    }

    /// Whether the process's load succeeded (loading it now if it was not tried yet).
    static var isLoaded: Bool {
        if case .success = production { return true }
        return false
    }

    /// Opens `soname` and resolves every function TokenVault calls. Tests pass a missing name.
    static func load(soname: String) -> Result<Void, VaultError> {
        guard let detail = DynamicLibrary.load(soname, with: tv_libsecret_load) else { return .success(()) }
        return .failure(
            VaultError(
                .backendUnavailable,
                "The Secret Service backend needs libsecret, which could not be loaded (\(detail)). "
                    + "Install it (Debian and Ubuntu: apt-get install libsecret-1-0), or use the encrypted file backend."))
    }
}
