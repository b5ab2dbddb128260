import Foundation
internal import CLibSecret

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Darwin)
internal import Darwin
#endif

/// Finds the D-Bus session bus the way GIO does, except that it never autolaunches one.
///
/// GIO's `g_bus_get()` falls back to spawning `dbus-launch` when it finds no address, which on a
/// headless machine can hang or leave a stray bus behind. TokenVault only uses a bus that exists:
/// `DBUS_SESSION_BUS_ADDRESS`, or else the systemd-style socket `$XDG_RUNTIME_DIR/bus`.
enum SessionBus {
    enum Resolution: Sendable {
        case address(String)
        case none(reason: String)
    }

    static func resolve(environment: [String: String]) -> Resolution {
        if let address = environment["DBUS_SESSION_BUS_ADDRESS"], !address.isEmpty {
            return .address(address)
        }
        if let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") {
            let socket = (runtime as NSString).appendingPathComponent("bus")
            var status = stat()
            if lstat(socket, &status) == 0, (status.st_mode & S_IFMT) == S_IFSOCK {
                guard let escaped = g_dbus_address_escape_value(socket) else {
                    return .none(reason: "the path \(socket) cannot be written as a D-Bus address")
                }
                defer { g_free(escaped) }
                return .address("unix:path=" + String(cString: escaped))
            }
            return .none(reason: "DBUS_SESSION_BUS_ADDRESS is not set and there is no bus socket at \(socket)")
        }
        return .none(reason: "DBUS_SESSION_BUS_ADDRESS is not set and there is no XDG_RUNTIME_DIR")
    }

    /// Whether an unlock prompt could be shown: a graphical display is present.
    static func displayPresent(environment: [String: String]) -> Bool {
        ["DISPLAY", "WAYLAND_DISPLAY"].contains { !(environment[$0] ?? "").isEmpty }
    }
}
