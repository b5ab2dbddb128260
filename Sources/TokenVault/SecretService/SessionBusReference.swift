import FoundationEssentials
internal import CLibSecret

extension SecretServiceStore {
    /// The session bus, connected: a reference to GIO's shared connection, with exit-on-close
    /// turned off.
    final class SessionBusReference: @unchecked Sendable {  // a GDBusConnection reference; GDBus connections are thread-safe
        let connection: OpaquePointer

        /// Connects. Blocking, bounded by `cancellable`; run it on ``GLibWorker/shared``, whose
        /// context then receives the connection's callbacks.
        init(cancellable: UnsafeMutablePointer<GCancellable>) throws {
            var error: UnsafeMutablePointer<GError>?
            guard let connection = tv_session_bus(cancellable, &error) else {
                throw GLibError.take(error, while: "connecting to the session bus")
            }
            self.connection = connection
        }

        deinit {
            g_object_unref(UnsafeMutableRawPointer(connection))
        }
    }
}
