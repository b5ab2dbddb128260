import FoundationEssentials
internal import CLibSecret

internal import TokenVaultSystem

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
            let socket = PathText.appending(runtime, "bus")
            if let status = try? SystemCall.lstat(socket), status.isSocket {
                return .address("unix:path=" + escapeAddressValue(socket))
            }
            return .none(reason: "DBUS_SESSION_BUS_ADDRESS is not set and there is no bus socket at \(socket)")
        }
        return .none(reason: "DBUS_SESSION_BUS_ADDRESS is not set and there is no XDG_RUNTIME_DIR")
    }

    /// Escapes a value of a D-Bus address as GLib 2.74's `g_dbus_address_escape_value` does
    /// (ASCII letters, digits and `-./\_` pass as they are, every other byte becomes `%XX`), in
    /// Swift, so that resolving the bus does not load GLib.
    static func escapeAddressValue(_ value: String) -> String {
        var escaped = ""
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "-"), UInt8(ascii: "_"),
                UInt8(ascii: "/"), UInt8(ascii: "."), UInt8(ascii: "\\"):
                escaped.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF".unicodeScalars)
                escaped += "%"
                escaped.unicodeScalars.append(hex[Int(byte >> 4)])
                escaped.unicodeScalars.append(hex[Int(byte & 0x0f)])
            }
        }
        return escaped
    }

    /// Whether an unlock prompt could be shown: a graphical display is present.
    static func displayPresent(environment: [String: String]) -> Bool {
        ["DISPLAY", "WAYLAND_DISPLAY"].contains { !(environment[$0] ?? "").isEmpty }
    }

    /// ``displayPresent(environment:)`` of this process's environment, read with getenv(3):
    /// every ``VaultConfiguration`` asks this, and building `ProcessInfo`'s environment
    /// dictionary for it was 0.4 M instructions a time, a tenth of a cold `vault get` through the agent.
    static var displayPresentInProcess: Bool {
        for name in ["DISPLAY", "WAYLAND_DISPLAY"] {
            if let value = SystemCall.environmentValue(name), !value.isEmpty { return true }
        }
        return false
    }
}
