import Testing
@testable import TokenVault

/// libsecret is opened at run time (issue 17). Without it, the Secret Service is a clear
/// `backendUnavailable`, never a crash; the bus address is escaped without GLib, as GLib would.
@Suite struct LibSecretLoadingTests {
    @Test func aMissingLibsecretIsBackendUnavailable() {
        let result = LibSecret.load(soname: "libsecret-tokenvault-missing.so.0")
        guard case .failure(let error) = result else {
            Issue.record("a library that does not exist was loaded")
            return
        }
        #expect(error.code == .backendUnavailable)
        #expect(error.message.contains("libsecret-tokenvault-missing.so.0"), "\(error.message)")
        #expect(error.message.contains("apt-get install libsecret-1-0"), "\(error.message)")
    }

    @Test func aLibraryWithoutLibsecretsFunctionsIsRefused() {
        // libsodium is there (TokenVault links it) but has none of libsecret's functions.
        guard case .failure(let error) = LibSecret.load(soname: "libsodium.so.23") else {
            Issue.record("libsodium was taken for libsecret")
            return
        }
        #expect(error.code == .backendUnavailable)
        #expect(error.message.contains("has no function g_"), "\(error.message)")
    }

    /// Outputs of GLib 2.74's g_dbus_address_escape_value for the same inputs.
    @Test func busAddressValuesAreEscapedAsGLibDoes() {
        #expect(SessionBus.escapeAddressValue("/run/user/1000/bus") == "/run/user/1000/bus")
        #expect(SessionBus.escapeAddressValue("/tmp/a b\u{e9}") == "/tmp/a%20b%C3%A9")
        #expect(SessionBus.escapeAddressValue("a-b_c.d\\e*f=g;h,i") == "a-b_c.d\\e%2Af%3Dg%3Bh%2Ci")
    }
}
