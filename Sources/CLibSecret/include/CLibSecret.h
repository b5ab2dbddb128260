#ifndef TOKENVAULT_CLIBSECRET_H
#define TOKENVAULT_CLIBSECRET_H

/*
 * libsecret, GIO, GObject and GLib, loaded with dlopen on first use (tv_libsecret_load), so that
 * a process that never talks to the Secret Service (a file-vault `vault get`) maps none of them:
 * loading them cost about a third of a cold `vault get` (issue 17).
 *
 * This header therefore includes no GLib header and links nothing. It declares the few types
 * TokenVault uses, with GLib's and libsecret's stable public ABI (GLib 2.x never breaks it; the
 * values below were taken from GLib 2.74 and libsecret 0.20), and, for each function the Swift
 * side calls, a static inline function of the same name that calls through the table that
 * tv_libsecret_load filled. Calling any of them before tv_libsecret_load returned 1 is a bug.
 *
 * The D-Bus-path functions of libsecret (secret-paths.h) are marked "unstable", but have not
 * changed since libsecret 0.18 (2014). They let TokenVault make exactly one D-Bus round trip per
 * step and decide itself when an unlock prompt may be shown.
 */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* MARK: - GLib's basic types */

typedef char gchar;
typedef int gint;
typedef unsigned int guint;
typedef int gboolean;
typedef size_t gsize;
typedef ssize_t gssize;
typedef void *gpointer;
typedef const void *gconstpointer;
typedef uint32_t GQuark;
typedef gsize GType;

typedef struct _GError {
    GQuark domain;
    gint code;
    gchar *message;
} GError;

/* Instances are only ever handled by pointer; the one field stands in for GObject's layout. */
typedef struct _GCancellable { gpointer tv_instance; } GCancellable;
typedef struct _GDBusProxy { gpointer tv_instance; } GDBusProxy;
typedef struct _SecretService { gpointer tv_instance; } SecretService;
typedef struct _SecretItem { gpointer tv_instance; } SecretItem;
typedef struct _GHashTable GHashTable;
typedef struct _GDBusConnection GDBusConnection;
typedef struct _GMainContext GMainContext;
typedef struct _SecretValue SecretValue;

/* MARK: - Constants (GLib 2.74, libsecret 0.20) */

typedef enum {
    SECRET_ERROR_IS_LOCKED = 2,
    SECRET_ERROR_NO_SUCH_OBJECT = 3,
    SECRET_ERROR_ALREADY_EXISTS = 4,
} SecretError;

typedef enum {
    G_DBUS_ERROR_NO_MEMORY = 1,
    G_DBUS_ERROR_SERVICE_UNKNOWN = 2,
    G_DBUS_ERROR_NAME_HAS_NO_OWNER = 3,
    G_DBUS_ERROR_NO_REPLY = 4,
    G_DBUS_ERROR_BAD_ADDRESS = 6,
    G_DBUS_ERROR_LIMITS_EXCEEDED = 8,
    G_DBUS_ERROR_ACCESS_DENIED = 9,
    G_DBUS_ERROR_AUTH_FAILED = 10,
    G_DBUS_ERROR_NO_SERVER = 11,
    G_DBUS_ERROR_TIMEOUT = 12,
    G_DBUS_ERROR_DISCONNECTED = 15,
    G_DBUS_ERROR_FILE_NOT_FOUND = 17,
    G_DBUS_ERROR_UNKNOWN_METHOD = 19,
    G_DBUS_ERROR_TIMED_OUT = 20,
    G_DBUS_ERROR_SPAWN_EXEC_FAILED = 23,
    G_DBUS_ERROR_SPAWN_FORK_FAILED = 24,
    G_DBUS_ERROR_SPAWN_CHILD_EXITED = 25,
    G_DBUS_ERROR_SPAWN_CHILD_SIGNALED = 26,
    G_DBUS_ERROR_SPAWN_FAILED = 27,
    G_DBUS_ERROR_SPAWN_SERVICE_NOT_FOUND = 31,
    G_DBUS_ERROR_UNKNOWN_OBJECT = 41,
} GDBusError;

typedef enum {
    G_IO_ERROR_NOT_FOUND = 1,
    G_IO_ERROR_PERMISSION_DENIED = 14,
    G_IO_ERROR_CLOSED = 18,
    G_IO_ERROR_CANCELLED = 19,
    G_IO_ERROR_TIMED_OUT = 24,
    G_IO_ERROR_INVALID_DATA = 35,
    G_IO_ERROR_DBUS_ERROR = 36,
    G_IO_ERROR_CONNECTION_REFUSED = 39,
    G_IO_ERROR_BROKEN_PIPE = 44,
    G_IO_ERROR_CONNECTION_CLOSED = 44,
} GIOErrorEnum;

typedef enum { SECRET_ITEM_NONE = 0 } SecretItemFlags;
typedef enum { SECRET_ITEM_CREATE_NONE = 0, SECRET_ITEM_CREATE_REPLACE = 1 << 1 } SecretItemCreateFlags;

#define TV_SECRETS_BUS_NAME "org.freedesktop.secrets"
#define TV_SECRETS_PATH "/org/freedesktop/secrets"
#define TV_SCHEMA_NAME "dev.tokenvault.Credential"

/* The soname tv_libsecret_load opens in production. */
#define TV_LIBSECRET_SONAME "libsecret-1.so.0"

/* MARK: - Loading */

/*
 * Opens `soname` and resolves every function TokenVault calls. Returns 1 when the table is
 * ready (at once if it already was, for the same soname); otherwise 0, with a message in
 * `message`, and the table untouched. Thread-safe. The library is never closed.
 */
int tv_libsecret_load(const char *soname, char *message, size_t size);

/* MARK: - The functions Swift calls, through the table */

typedef void (*GAsyncReadyCallback)(gpointer source, gpointer result, gpointer user_data);

/* (return type, name, parameters, arguments): functions that return a value. */
#define TV_LIBSECRET_VALUE_FUNCTIONS(X)                                                            \
    X(gboolean, g_main_context_iteration, (GMainContext *context, gboolean may_block), (context, may_block)) \
    X(GMainContext *, g_main_context_new, (void), ())                                              \
    X(GMainContext *, g_main_context_get_thread_default, (void), ())                               \
    X(GCancellable *, g_cancellable_new, (void), ())                                               \
    X(gpointer, g_hash_table_lookup, (GHashTable *table, gconstpointer key), (table, key))         \
    X(GQuark, g_io_error_quark, (void), ())                                                        \
    X(GQuark, g_dbus_error_quark, (void), ())                                                      \
    X(GQuark, secret_error_get_quark, (void), ())                                                  \
    X(gboolean, g_dbus_error_is_remote_error, (const GError *error), (error))                      \
    X(gchar *, g_dbus_error_get_remote_error, (const GError *error), (error))                      \
    X(gboolean, g_dbus_error_strip_remote_error, (GError *error), (error))                         \
    X(gboolean, g_dbus_connection_is_closed, (GDBusConnection *connection), (connection))          \
    X(gchar *, g_dbus_proxy_get_name_owner, (GDBusProxy *proxy), (proxy))                          \
    X(SecretValue *, secret_value_new, (const gchar *secret, gssize length, const gchar *content_type), \
      (secret, length, content_type))                                                              \
    X(const gchar *, secret_value_get, (SecretValue *value, gsize *length), (value, length))       \
    X(GHashTable *, secret_item_get_attributes, (SecretItem *self), (self))                        \
    X(gchar *, secret_item_get_label, (SecretItem *self), (self))                                  \
    X(gboolean, secret_item_set_label_sync,                                                        \
      (SecretItem *self, const gchar *label, GCancellable *cancellable, GError **error),           \
      (self, label, cancellable, error))                                                           \
    X(gboolean, secret_item_set_secret_sync,                                                       \
      (SecretItem *self, SecretValue *value, GCancellable *cancellable, GError **error),           \
      (self, value, cancellable, error))                                                           \
    X(SecretItem *, secret_item_new_for_dbus_path_sync,                                            \
      (SecretService *service, const gchar *item_path, SecretItemFlags flags,                      \
       GCancellable *cancellable, GError **error),                                                 \
      (service, item_path, flags, cancellable, error))                                             \
    X(SecretValue *, secret_service_get_secret_for_dbus_path_sync,                                 \
      (SecretService *self, const gchar *item_path, GCancellable *cancellable, GError **error),    \
      (self, item_path, cancellable, error))                                                       \
    X(gboolean, secret_service_search_for_dbus_paths_sync,                                         \
      (SecretService *self, const struct _SecretSchema *schema, GHashTable *attributes,            \
       GCancellable *cancellable, gchar ***unlocked, gchar ***locked, GError **error),             \
      (self, schema, attributes, cancellable, unlocked, locked, error))                            \
    X(gint, secret_service_unlock_dbus_paths_sync,                                                 \
      (SecretService *self, const gchar **paths, GCancellable *cancellable, gchar ***unlocked,     \
       GError **error),                                                                            \
      (self, paths, cancellable, unlocked, error))                                                 \
    X(gboolean, secret_service_delete_item_dbus_path_sync,                                         \
      (SecretService *self, const gchar *object_path, GCancellable *cancellable, GError **error),  \
      (self, object_path, cancellable, error))                                                     \
    X(gchar *, secret_service_create_item_dbus_path_sync,                                          \
      (SecretService *self, const gchar *collection_path, GHashTable *properties,                  \
       SecretValue *value, SecretItemCreateFlags flags, GCancellable *cancellable, GError **error), \
      (self, collection_path, properties, value, flags, cancellable, error))

/* (name, parameters, arguments): functions that return nothing. */
#define TV_LIBSECRET_VOID_FUNCTIONS(X)                                                             \
    X(g_free, (gpointer mem), (mem))                                                               \
    X(g_strfreev, (gchar **array), (array))                                                        \
    X(g_object_unref, (gpointer object), (object))                                                 \
    X(g_error_free, (GError *error), (error))                                                      \
    X(g_hash_table_unref, (GHashTable *table), (table))                                            \
    X(g_main_context_push_thread_default, (GMainContext *context), (context))                      \
    X(g_cancellable_cancel, (GCancellable *cancellable), (cancellable))                            \
    X(g_dbus_connection_close,                                                                     \
      (GDBusConnection *connection, GCancellable *cancellable, GAsyncReadyCallback callback,       \
       gpointer user_data),                                                                        \
      (connection, cancellable, callback, user_data))                                              \
    X(secret_value_unref, (gpointer value), (value))

struct _SecretSchema;

typedef struct tv_libsecret_table {
#define TV_VALUE_FIELD(type, name, parameters, arguments) type (*name) parameters;
#define TV_VOID_FIELD(name, parameters, arguments) void (*name) parameters;
    TV_LIBSECRET_VALUE_FUNCTIONS(TV_VALUE_FIELD)
    TV_LIBSECRET_VOID_FUNCTIONS(TV_VOID_FIELD)
#undef TV_VALUE_FIELD
#undef TV_VOID_FIELD
} tv_libsecret_table;

/* Filled once by tv_libsecret_load; read-only afterwards. */
extern tv_libsecret_table tv_libsecret;

#define TV_VALUE_WRAPPER(type, name, parameters, arguments)                                        \
    static inline type name parameters { return tv_libsecret.name arguments; }
#define TV_VOID_WRAPPER(name, parameters, arguments)                                               \
    static inline void name parameters { tv_libsecret.name arguments; }
TV_LIBSECRET_VALUE_FUNCTIONS(TV_VALUE_WRAPPER)
TV_LIBSECRET_VOID_FUNCTIONS(TV_VOID_WRAPPER)
#undef TV_VALUE_WRAPPER
#undef TV_VOID_WRAPPER

/* MARK: - Helpers (shim.c)
 *
 * Swift cannot call C variadic functions such as g_variant_new or g_variant_builder_add, nor C
 * macros such as SECRET_TYPE_SERVICE, so these do it. Each one is a thin wrapper: no policy, no
 * error mapping (that happens in Swift, in one place).
 */

/* The one schema. DONT_MATCH_NAME: lookups match on service and account only, so items that
 * `secret-tool store service S account A` made are found too. */
const struct _SecretSchema *tv_schema(void);

/* A string-to-string attribute table that owns its keys and values. */
GHashTable *tv_attributes_new(void);
void tv_attributes_set(GHashTable *attributes, const char *name, const char *value);

/* The D-Bus properties of a new item: its label and its attributes. */
GHashTable *tv_item_properties_new(const char *label, GHashTable *attributes);

/* A private connection to the bus at `address`. Unlike g_bus_get(), it never autolaunches a bus
 * and never exits the process when the bus goes away. */
GDBusConnection *tv_bus_connect(const char *address, GCancellable *cancellable, GError **error);

/* The process's session-bus connection, which GIO shares with everything else in the process,
 * made safe for a library: GIO sets exit-on-close on it, which would end the whole process
 * when the bus goes away. TokenVault turns that off and reports an error instead. Call it only
 * once an address is known to exist (GIO autolaunches a bus otherwise). */
GDBusConnection *tv_session_bus(GCancellable *cancellable, GError **error);

/* A new SecretService proxy (not the process-wide singleton) on the session bus, with an open
 * transfer session: encrypted (dh-ietf1024-sha256-aes128-cbc-pkcs7) when the provider supports
 * it. libsecret only builds it on GIO's shared session-bus connection. */
SecretService *tv_service_open(GCancellable *cancellable, GError **error);

GDBusConnection *tv_service_connection(SecretService *service);

/* Whether `name` has an owner on the bus. */
gboolean tv_name_has_owner(GDBusConnection *connection, const char *name, int timeout_ms,
                           GCancellable *cancellable, gboolean *owned, GError **error);

/* The unique name that owns `name` on the bus; NULL with an error (NameHasNoOwner) when none does.
 * One round trip to the bus daemon, none to the provider. The caller g_frees it. */
char *tv_name_owner(GDBusConnection *connection, const char *name, int timeout_ms,
                    GCancellable *cancellable, GError **error);

/* Whether the bus can start a service for `name` (D-Bus activation). */
gboolean tv_name_is_activatable(GDBusConnection *connection, const char *name, int timeout_ms,
                                GCancellable *cancellable, gboolean *activatable, GError **error);

/* Asks the bus to start the service for `name`. */
gboolean tv_start_service(GDBusConnection *connection, const char *name, int timeout_ms,
                          GCancellable *cancellable, GError **error);

/* The object path behind a collection alias such as "default"; "/" when there is none. */
char *tv_read_alias(GDBusConnection *connection, const char *alias, int timeout_ms,
                    GCancellable *cancellable, GError **error);

/* Whether the collection at `path` is locked. */
gboolean tv_collection_is_locked(GDBusConnection *connection, const char *path, int timeout_ms,
                                 GCancellable *cancellable, gboolean *locked, GError **error);

/* Sets an item's attributes (tests: another client renaming an item). */
gboolean tv_item_set_attributes(GDBusConnection *connection, const char *path, GHashTable *attributes,
                                int timeout_ms, GCancellable *cancellable, GError **error);

/* What a collection's ItemCreated, ItemDeleted and ItemChanged signals say, and the service's
 * CollectionCreated, CollectionDeleted and CollectionChanged (a lock or an unlock among them). */
enum { TV_ITEM_CREATED = 1, TV_ITEM_DELETED = 2, TV_ITEM_CHANGED = 3, TV_COLLECTION_CHANGED = 4 };
typedef void (*tv_item_change_callback)(void *context, int change, const char *path);

/* Subscribes to those signals when `sender` (a unique bus name) emits them, on any object.
 * `callback` runs on the caller's thread-default main context, once per signal;
 * `release(context)` runs once GLib holds no more reference to `context` (after tv_unwatch_items,
 * possibly later). Fills `ids` with the two subscriptions' ids and returns 1; 0 if it could not. */
int tv_watch_items(GDBusConnection *connection, const char *sender, tv_item_change_callback callback,
                   void *context, void (*release)(void *context), guint ids[2]);
void tv_unwatch_items(GDBusConnection *connection, const guint ids[2]);

/* Reads an item's attributes (never its secret). The caller unrefs the table. */
GHashTable *tv_item_attributes(GDBusConnection *connection, const char *path, int timeout_ms,
                               GCancellable *cancellable, GError **error);

#endif
