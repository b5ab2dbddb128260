import FoundationEssentials
internal import CLibSecret

/// The one place where a GLib `GError` becomes a ``VaultError``.
///
/// GLib and libsecret messages name D-Bus methods, object paths and bus addresses, never the
/// secret being carried, so they are kept as the detail of the message.
enum GLibError {
    /// Converts and frees `error`. `action` says what was being done, in words ("reading github/octocat").
    static func take(_ error: UnsafeMutablePointer<GError>?, while action: String) -> VaultError {
        guard let error else {
            return VaultError(.io, "The Secret Service failed while \(action), without saying why.")
        }
        defer { g_error_free(error) }
        let domain = error.pointee.domain
        let code = error.pointee.code
        var remoteName: String?
        if g_dbus_error_is_remote_error(error) != 0, let name = g_dbus_error_get_remote_error(error) {
            remoteName = String(cString: name)
            g_free(name)
            _ = g_dbus_error_strip_remote_error(error)
        }
        let detail = error.pointee.message.map { String(cString: $0) } ?? "no detail"
        let vaultCode = self.code(domain: domain, code: code, remoteName: remoteName)
        return VaultError(vaultCode, message(for: vaultCode, action: action, detail: detail))
    }

    /// The ``VaultError`` code for a GLib error domain and code.
    static func code(domain: GQuark, code: Int32, remoteName: String?) -> VaultError.Code {
        if domain == secret_error_get_quark() {
            switch UInt32(bitPattern: code) {
            case SECRET_ERROR_IS_LOCKED.rawValue: return .locked
            case SECRET_ERROR_NO_SUCH_OBJECT.rawValue: return .notFound
            case SECRET_ERROR_ALREADY_EXISTS.rawValue: return .alreadyExists
            default: return .io
            }
        }
        if domain == g_dbus_error_quark() {
            switch UInt32(bitPattern: code) {
            case G_DBUS_ERROR_SERVICE_UNKNOWN.rawValue, G_DBUS_ERROR_NAME_HAS_NO_OWNER.rawValue,
                G_DBUS_ERROR_NO_SERVER.rawValue, G_DBUS_ERROR_DISCONNECTED.rawValue,
                G_DBUS_ERROR_BAD_ADDRESS.rawValue, G_DBUS_ERROR_FILE_NOT_FOUND.rawValue,
                G_DBUS_ERROR_SPAWN_EXEC_FAILED.rawValue, G_DBUS_ERROR_SPAWN_FORK_FAILED.rawValue,
                G_DBUS_ERROR_SPAWN_CHILD_EXITED.rawValue, G_DBUS_ERROR_SPAWN_CHILD_SIGNALED.rawValue,
                G_DBUS_ERROR_SPAWN_FAILED.rawValue, G_DBUS_ERROR_SPAWN_SERVICE_NOT_FOUND.rawValue:
                return .backendUnavailable
            case G_DBUS_ERROR_NO_REPLY.rawValue, G_DBUS_ERROR_TIMEOUT.rawValue, G_DBUS_ERROR_TIMED_OUT.rawValue:
                return .timeout
            case G_DBUS_ERROR_ACCESS_DENIED.rawValue, G_DBUS_ERROR_AUTH_FAILED.rawValue:
                return .permissionDenied
            case G_DBUS_ERROR_LIMITS_EXCEEDED.rawValue, G_DBUS_ERROR_NO_MEMORY.rawValue:
                return .tooLarge
            case G_DBUS_ERROR_UNKNOWN_OBJECT.rawValue, G_DBUS_ERROR_UNKNOWN_METHOD.rawValue:
                // GDBus services (gnome-keyring among them) answer UnknownMethod, "Object does
                // not exist at path", for an item deleted since it was found.
                return .notFound
            default:
                return .io
            }
        }
        if domain == g_io_error_quark() {
            switch UInt32(bitPattern: code) {
            case G_IO_ERROR_CANCELLED.rawValue: return .cancelled
            case G_IO_ERROR_TIMED_OUT.rawValue: return .timeout
            case G_IO_ERROR_PERMISSION_DENIED.rawValue: return .permissionDenied
            case G_IO_ERROR_NOT_FOUND.rawValue, G_IO_ERROR_CONNECTION_REFUSED.rawValue,
                G_IO_ERROR_CLOSED.rawValue, G_IO_ERROR_BROKEN_PIPE.rawValue,
                G_IO_ERROR_CONNECTION_CLOSED.rawValue:
                return .backendUnavailable
            case G_IO_ERROR_DBUS_ERROR.rawValue:
                // A remote error that no library registered a GError for.
                switch remoteName {
                case "org.freedesktop.Secret.Error.IsLocked": return .locked
                case "org.freedesktop.Secret.Error.NoSuchObject": return .notFound
                default: return .io
                }
            default:
                return .io
            }
        }
        return .io
    }

    private static func message(for code: VaultError.Code, action: String, detail: String) -> String {
        switch code {
        case .locked:
            return "The Secret Service collection is locked, so TokenVault could not finish \(action). "
                + "Unlock your keyring (for example by logging in to the desktop) and try again. (\(detail))"
        case .backendUnavailable:
            return "The Secret Service is not reachable while \(action): \(detail)."
        case .timeout:
            return "The Secret Service did not answer in time while \(action): \(detail)."
        case .permissionDenied:
            return "The Secret Service refused access while \(action): \(detail)."
        case .tooLarge:
            return "The secret is too large for the Secret Service (its D-Bus message limit) while \(action): \(detail)."
        case .cancelled:
            return "The Secret Service call was cancelled while \(action)."
        default:
            return "The Secret Service failed while \(action): \(detail)."
        }
    }
}
