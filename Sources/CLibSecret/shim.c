#include "CLibSecret.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

/*
 * See CLibSecret.h: libsecret and GLib are opened on first use, never linked. The layouts below
 * are GLib's public ones (glib/gvariant.h, glib/ghash.h, libsecret/secret-schema.h); GLib keeps
 * them stable across 2.x.
 */

typedef struct _GVariant GVariant;
typedef struct _GVariantType GVariantType;
typedef struct { gsize x[16]; } GVariantBuilder;
typedef struct { gsize x[16]; } GVariantIter;
typedef struct {
    gpointer dummy1, dummy2, dummy3;
    int dummy4;
    gboolean dummy5;
    gpointer dummy6;
} GHashTableIter;
typedef guint (*GHashFunc)(gconstpointer key);
typedef gboolean (*GEqualFunc)(gconstpointer a, gconstpointer b);
typedef void (*GDestroyNotify)(gpointer data);
typedef void (*GDBusSignalCallback)(GDBusConnection *connection, const gchar *sender_name,
                                    const gchar *object_path, const gchar *interface_name,
                                    const gchar *signal_name, GVariant *parameters, gpointer user_data);

typedef struct _SecretSchema {
    const gchar *name;
    int flags;
    struct {
        const gchar *name;
        int type;
    } attributes[32];
    gint reserved;
    gpointer reserved1, reserved2, reserved3, reserved4, reserved5, reserved6, reserved7;
} SecretSchema;

#define TV_SCHEMA_DONT_MATCH_NAME (1 << 1)
#define TV_SCHEMA_ATTRIBUTE_STRING 0
#define TV_SERVICE_OPEN_SESSION (1 << 1)
#define TV_BUS_TYPE_SESSION 2
#define TV_CONNECTION_FLAGS_AUTHENTICATION_CLIENT (1 << 0)
#define TV_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION (1 << 3)
#define TV_CALL_FLAGS_NONE 0
#define TV_VARIANT_TYPE(string) ((const GVariantType *)(string))

/* The functions only the helpers below call: (return type, name, parameters). */
#define TV_INTERNAL_FUNCTIONS(X)                                                                   \
    X(GHashTable *, g_hash_table_new_full,                                                         \
      (GHashFunc hash, GEqualFunc equal, GDestroyNotify key_destroy, GDestroyNotify value_destroy)) \
    X(gboolean, g_hash_table_replace, (GHashTable * table, gpointer key, gpointer value))          \
    X(gboolean, g_hash_table_insert, (GHashTable * table, gpointer key, gpointer value))           \
    X(void, g_hash_table_iter_init, (GHashTableIter * iter, GHashTable *table))                    \
    X(gboolean, g_hash_table_iter_next, (GHashTableIter * iter, gpointer *key, gpointer *value))   \
    X(guint, g_str_hash, (gconstpointer v))                                                        \
    X(gboolean, g_str_equal, (gconstpointer a, gconstpointer b))                                   \
    X(gchar *, g_strdup, (const gchar *string))                                                    \
    X(int, g_strcmp0, (const char *a, const char *b))                                              \
    X(void, g_set_error_literal, (GError * *error, GQuark domain, gint code, const gchar *message)) \
    X(void, g_variant_unref, (GVariant * value))                                                   \
    X(GVariant *, g_variant_ref_sink, (GVariant * value))                                          \
    X(GVariant *, g_variant_new, (const gchar *format, ...))                                       \
    X(GVariant *, g_variant_new_string, (const gchar *string))                                     \
    X(void, g_variant_get, (GVariant * value, const gchar *format, ...))                           \
    X(gboolean, g_variant_get_boolean, (GVariant * value))                                         \
    X(gboolean, g_variant_is_of_type, (GVariant * value, const GVariantType *type))                \
    X(void, g_variant_builder_init, (GVariantBuilder * builder, const GVariantType *type))         \
    X(void, g_variant_builder_add, (GVariantBuilder * builder, const gchar *format, ...))          \
    X(GVariant *, g_variant_builder_end, (GVariantBuilder * builder))                              \
    X(gsize, g_variant_iter_init, (GVariantIter * iter, GVariant *value))                          \
    X(gboolean, g_variant_iter_next, (GVariantIter * iter, const gchar *format, ...))              \
    X(gboolean, g_variant_iter_loop, (GVariantIter * iter, const gchar *format, ...))              \
    X(void, g_variant_iter_free, (GVariantIter * iter))                                            \
    X(GDBusConnection *, g_dbus_connection_new_for_address_sync,                                   \
      (const gchar *address, int flags, gpointer observer, GCancellable *cancellable, GError **error)) \
    X(GDBusConnection *, g_bus_get_sync, (int bus_type, GCancellable *cancellable, GError **error)) \
    X(void, g_dbus_connection_set_exit_on_close, (GDBusConnection * connection, gboolean exit_on_close)) \
    X(GVariant *, g_dbus_connection_call_sync,                                                     \
      (GDBusConnection * connection, const gchar *bus_name, const gchar *object_path,              \
       const gchar *interface_name, const gchar *method_name, GVariant *parameters,                \
       const GVariantType *reply_type, int flags, gint timeout_msec, GCancellable *cancellable,     \
       GError **error))                                                                            \
    X(GDBusConnection *, g_dbus_proxy_get_connection, (GDBusProxy * proxy))                        \
    X(guint, g_dbus_connection_signal_subscribe,                                                   \
      (GDBusConnection * connection, const gchar *sender, const gchar *interface_name,             \
       const gchar *member, const gchar *object_path, const gchar *arg0, int flags,                \
       GDBusSignalCallback callback, gpointer user_data, GDestroyNotify user_data_free_func))       \
    X(void, g_dbus_connection_signal_unsubscribe, (GDBusConnection * connection, guint id))        \
    X(GType, secret_service_get_type, (void))                                                      \
    X(SecretService *, secret_service_open_sync,                                                   \
      (GType service_gtype, const gchar *service_bus_name, int flags, GCancellable *cancellable,   \
       GError **error))

typedef struct {
#define TV_INTERNAL_FIELD(type, name, parameters) type (*name) parameters;
    TV_INTERNAL_FUNCTIONS(TV_INTERNAL_FIELD)
#undef TV_INTERNAL_FIELD
} tv_internal_table;

tv_libsecret_table tv_libsecret;
static tv_internal_table internal;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static char loaded_soname[256];

static int resolve(void *handle, const char *soname, const char *name, void **slot,
                   char *message, size_t size) {
    *slot = dlsym(handle, name);
    if (*slot != NULL) return 1;
    snprintf(message, size, "%s has no function %s", soname, name);
    return 0;
}

int tv_libsecret_load(const char *soname, char *message, size_t size) {
    tv_libsecret_table table;
    tv_internal_table helpers;
    void *handle;
    int ok = 1;

    pthread_mutex_lock(&load_lock);
    if (loaded_soname[0] != '\0' && strcmp(loaded_soname, soname) == 0) {
        pthread_mutex_unlock(&load_lock);
        return 1;
    }
    handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *reason = dlerror();
        snprintf(message, size, "%s", reason != NULL ? reason : "dlopen failed");
        pthread_mutex_unlock(&load_lock);
        return 0;
    }
#define TV_RESOLVE_VALUE(type, name, parameters, arguments)                                        \
    ok = ok && resolve(handle, soname, #name, (void **)&table.name, message, size);
#define TV_RESOLVE_VOID(name, parameters, arguments)                                               \
    ok = ok && resolve(handle, soname, #name, (void **)&table.name, message, size);
#define TV_RESOLVE_INTERNAL(type, name, parameters)                                                \
    ok = ok && resolve(handle, soname, #name, (void **)&helpers.name, message, size);
    TV_LIBSECRET_VALUE_FUNCTIONS(TV_RESOLVE_VALUE)
    TV_LIBSECRET_VOID_FUNCTIONS(TV_RESOLVE_VOID)
    TV_INTERNAL_FUNCTIONS(TV_RESOLVE_INTERNAL)
#undef TV_RESOLVE_VALUE
#undef TV_RESOLVE_VOID
#undef TV_RESOLVE_INTERNAL
    if (ok && loaded_soname[0] == '\0') {
        /* The first library that loads completely is the one every call goes to, for good. */
        tv_libsecret = table;
        internal = helpers;
        snprintf(loaded_soname, sizeof loaded_soname, "%s", soname);
    }
    /* A library that lacks a function stays open (GLib must not be unloaded), unused. */
    pthread_mutex_unlock(&load_lock);
    return ok;
}

/* MARK: - Helpers */

const struct _SecretSchema *tv_schema(void) {
    static const SecretSchema schema = {
        TV_SCHEMA_NAME,
        TV_SCHEMA_DONT_MATCH_NAME,
        {
            {"service", TV_SCHEMA_ATTRIBUTE_STRING},
            {"account", TV_SCHEMA_ATTRIBUTE_STRING},
            {NULL, 0},
        },
        0, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    };
    return &schema;
}

GHashTable *tv_attributes_new(void) {
    return internal.g_hash_table_new_full(internal.g_str_hash, internal.g_str_equal,
                                          tv_libsecret.g_free, tv_libsecret.g_free);
}

void tv_attributes_set(GHashTable *attributes, const char *name, const char *value) {
    internal.g_hash_table_replace(attributes, internal.g_strdup(name), internal.g_strdup(value));
}

GHashTable *tv_item_properties_new(const char *label, GHashTable *attributes) {
    GHashTable *properties = internal.g_hash_table_new_full(
        internal.g_str_hash, internal.g_str_equal, NULL, (GDestroyNotify)internal.g_variant_unref);
    GVariantBuilder builder;
    GHashTableIter iter;
    gpointer name, value;

    internal.g_variant_builder_init(&builder, TV_VARIANT_TYPE("a{ss}"));
    internal.g_hash_table_iter_init(&iter, attributes);
    while (internal.g_hash_table_iter_next(&iter, &name, &value)) {
        internal.g_variant_builder_add(&builder, "{ss}", (const char *)name, (const char *)value);
    }
    internal.g_hash_table_insert(properties, (gpointer) "org.freedesktop.Secret.Item.Label",
                                 internal.g_variant_ref_sink(internal.g_variant_new_string(label)));
    internal.g_hash_table_insert(properties, (gpointer) "org.freedesktop.Secret.Item.Attributes",
                                 internal.g_variant_ref_sink(internal.g_variant_builder_end(&builder)));
    return properties;
}

GDBusConnection *tv_bus_connect(const char *address, GCancellable *cancellable, GError **error) {
    return internal.g_dbus_connection_new_for_address_sync(
        address,
        TV_CONNECTION_FLAGS_AUTHENTICATION_CLIENT | TV_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION,
        NULL, cancellable, error);
}

GDBusConnection *tv_session_bus(GCancellable *cancellable, GError **error) {
    GDBusConnection *connection = internal.g_bus_get_sync(TV_BUS_TYPE_SESSION, cancellable, error);
    if (connection != NULL) internal.g_dbus_connection_set_exit_on_close(connection, 0);
    return connection;
}

SecretService *tv_service_open(GCancellable *cancellable, GError **error) {
    return internal.secret_service_open_sync(internal.secret_service_get_type(), NULL,
                                             TV_SERVICE_OPEN_SESSION, cancellable, error);
}

GDBusConnection *tv_service_connection(SecretService *service) {
    return internal.g_dbus_proxy_get_connection((GDBusProxy *)service);
}

/* Calls a method of the bus itself (org.freedesktop.DBus) that takes one string. */
static GVariant *bus_call_string(GDBusConnection *connection, const char *method,
                                 const char *argument, const char *reply_type, int timeout_ms,
                                 GCancellable *cancellable, GError **error) {
    GVariant *parameters = NULL;
    if (argument != NULL) {
        parameters = internal.g_variant_new("(s)", argument);
    }
    return internal.g_dbus_connection_call_sync(
        connection, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", method,
        parameters, TV_VARIANT_TYPE(reply_type), TV_CALL_FLAGS_NONE, timeout_ms, cancellable, error);
}

gboolean tv_name_has_owner(GDBusConnection *connection, const char *name, int timeout_ms,
                           GCancellable *cancellable, gboolean *owned, GError **error) {
    GVariant *reply =
        bus_call_string(connection, "NameHasOwner", name, "(b)", timeout_ms, cancellable, error);
    if (reply == NULL) return 0;
    internal.g_variant_get(reply, "(b)", owned);
    internal.g_variant_unref(reply);
    return 1;
}

gboolean tv_name_is_activatable(GDBusConnection *connection, const char *name, int timeout_ms,
                                GCancellable *cancellable, gboolean *activatable, GError **error) {
    GVariant *reply = bus_call_string(connection, "ListActivatableNames", NULL, "(as)", timeout_ms,
                                      cancellable, error);
    GVariantIter *iter = NULL;
    const char *each = NULL;
    if (reply == NULL) return 0;
    *activatable = 0;
    internal.g_variant_get(reply, "(as)", &iter);
    while (internal.g_variant_iter_loop(iter, "&s", &each)) {
        if (internal.g_strcmp0(each, name) == 0) *activatable = 1;
    }
    internal.g_variant_iter_free(iter);
    internal.g_variant_unref(reply);
    return 1;
}

gboolean tv_start_service(GDBusConnection *connection, const char *name, int timeout_ms,
                          GCancellable *cancellable, GError **error) {
    GVariant *reply = internal.g_dbus_connection_call_sync(
        connection, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
        "StartServiceByName", internal.g_variant_new("(su)", name, (unsigned int)0),
        TV_VARIANT_TYPE("(u)"), TV_CALL_FLAGS_NONE, timeout_ms, cancellable, error);
    if (reply == NULL) return 0;
    internal.g_variant_unref(reply);
    return 1;
}

char *tv_name_owner(GDBusConnection *connection, const char *name, int timeout_ms,
                    GCancellable *cancellable, GError **error) {
    char *owner = NULL;
    GVariant *reply =
        bus_call_string(connection, "GetNameOwner", name, "(s)", timeout_ms, cancellable, error);
    if (reply == NULL) return NULL;
    internal.g_variant_get(reply, "(s)", &owner);
    internal.g_variant_unref(reply);
    return owner;
}

char *tv_read_alias(GDBusConnection *connection, const char *alias, int timeout_ms,
                    GCancellable *cancellable, GError **error) {
    char *path = NULL;
    GVariant *reply = internal.g_dbus_connection_call_sync(
        connection, TV_SECRETS_BUS_NAME, TV_SECRETS_PATH, "org.freedesktop.Secret.Service",
        "ReadAlias", internal.g_variant_new("(s)", alias), TV_VARIANT_TYPE("(o)"),
        TV_CALL_FLAGS_NONE, timeout_ms, cancellable, error);
    if (reply == NULL) return NULL;
    internal.g_variant_get(reply, "(o)", &path);
    internal.g_variant_unref(reply);
    return path;
}

/* Reads one property of an object of the Secret Service. The caller unrefs the value. */
static GVariant *get_property(GDBusConnection *connection, const char *path, const char *interface,
                              const char *property, int timeout_ms, GCancellable *cancellable,
                              GError **error) {
    GVariant *value = NULL;
    GVariant *reply = internal.g_dbus_connection_call_sync(
        connection, TV_SECRETS_BUS_NAME, path, "org.freedesktop.DBus.Properties", "Get",
        internal.g_variant_new("(ss)", interface, property), TV_VARIANT_TYPE("(v)"),
        TV_CALL_FLAGS_NONE, timeout_ms, cancellable, error);
    if (reply == NULL) return NULL;
    internal.g_variant_get(reply, "(v)", &value);
    internal.g_variant_unref(reply);
    return value;
}

gboolean tv_collection_is_locked(GDBusConnection *connection, const char *path, int timeout_ms,
                                 GCancellable *cancellable, gboolean *locked, GError **error) {
    GVariant *value = get_property(connection, path, "org.freedesktop.Secret.Collection", "Locked",
                                   timeout_ms, cancellable, error);
    if (value == NULL) return 0;
    if (!internal.g_variant_is_of_type(value, TV_VARIANT_TYPE("b"))) {
        internal.g_variant_unref(value);
        internal.g_set_error_literal(error, tv_libsecret.g_io_error_quark(), G_IO_ERROR_INVALID_DATA,
                                     "the collection's Locked property is not a boolean");
        return 0;
    }
    *locked = internal.g_variant_get_boolean(value);
    internal.g_variant_unref(value);
    return 1;
}

GHashTable *tv_item_attributes(GDBusConnection *connection, const char *path, int timeout_ms,
                               GCancellable *cancellable, GError **error) {
    GHashTable *attributes;
    GVariantIter iter;
    const char *name, *value;
    GVariant *dict = get_property(connection, path, "org.freedesktop.Secret.Item", "Attributes",
                                  timeout_ms, cancellable, error);
    if (dict == NULL) return NULL;
    if (!internal.g_variant_is_of_type(dict, TV_VARIANT_TYPE("a{ss}"))) {
        internal.g_variant_unref(dict);
        internal.g_set_error_literal(error, tv_libsecret.g_io_error_quark(), G_IO_ERROR_INVALID_DATA,
                                     "the item's Attributes property is not a string dictionary");
        return NULL;
    }
    attributes = tv_attributes_new();
    internal.g_variant_iter_init(&iter, dict);
    while (internal.g_variant_iter_next(&iter, "{&s&s}", &name, &value)) {
        tv_attributes_set(attributes, name, value);
    }
    internal.g_variant_unref(dict);
    return attributes;
}

gboolean tv_item_set_attributes(GDBusConnection *connection, const char *path, GHashTable *attributes,
                                int timeout_ms, GCancellable *cancellable, GError **error) {
    GVariantBuilder builder;
    GHashTableIter iter;
    gpointer name, value;
    GVariant *reply;
    internal.g_variant_builder_init(&builder, TV_VARIANT_TYPE("a{ss}"));
    internal.g_hash_table_iter_init(&iter, attributes);
    while (internal.g_hash_table_iter_next(&iter, &name, &value)) {
        internal.g_variant_builder_add(&builder, "{ss}", (const char *)name, (const char *)value);
    }
    reply = internal.g_dbus_connection_call_sync(
        connection, TV_SECRETS_BUS_NAME, path, "org.freedesktop.DBus.Properties", "Set",
        internal.g_variant_new("(ssv)", "org.freedesktop.Secret.Item", "Attributes",
                               internal.g_variant_builder_end(&builder)),
        NULL, TV_CALL_FLAGS_NONE, timeout_ms, cancellable, error);
    if (reply == NULL) return 0;
    internal.g_variant_unref(reply);
    return 1;
}

typedef struct {
    tv_item_change_callback callback;
    void *context;
    void (*release)(void *context);
    int subscriptions;
} tv_item_watch;

static void item_signal(GDBusConnection *connection, const gchar *sender_name, const gchar *object_path,
                        const gchar *interface_name, const gchar *signal_name, GVariant *parameters,
                        gpointer user_data) {
    tv_item_watch *watch = user_data;
    const char *path = NULL;
    int change;
    (void)connection, (void)sender_name, (void)object_path;
    if (internal.g_strcmp0(signal_name, "ItemCreated") == 0) change = TV_ITEM_CREATED;
    else if (internal.g_strcmp0(signal_name, "ItemDeleted") == 0) change = TV_ITEM_DELETED;
    else if (internal.g_strcmp0(signal_name, "ItemChanged") == 0) change = TV_ITEM_CHANGED;
    else if (internal.g_strcmp0(interface_name, "org.freedesktop.Secret.Service") == 0 &&
             (internal.g_strcmp0(signal_name, "CollectionCreated") == 0 ||
              internal.g_strcmp0(signal_name, "CollectionDeleted") == 0 ||
              internal.g_strcmp0(signal_name, "CollectionChanged") == 0)) change = TV_COLLECTION_CHANGED;
    else return;
    /* A signal that does not carry one object path still reports a change, of no known item. */
    if (internal.g_variant_is_of_type(parameters, TV_VARIANT_TYPE("(o)"))) {
        internal.g_variant_get(parameters, "(&o)", &path);
    }
    watch->callback(watch->context, change, path != NULL ? path : "");
}

/* Called once per subscription; the last one frees the watch. */
static void item_watch_free(gpointer data) {
    tv_item_watch *watch = data;
    if (__atomic_sub_fetch(&watch->subscriptions, 1, __ATOMIC_ACQ_REL) != 0) return;
    watch->release(watch->context);
    free(watch);
}

int tv_watch_items(GDBusConnection *connection, const char *sender, tv_item_change_callback callback,
                   void *context, void (*release)(void *context), guint ids[2]) {
    tv_item_watch *watch = malloc(sizeof *watch);
    if (watch == NULL) return 0;
    watch->callback = callback;
    watch->context = context;
    watch->release = release;
    watch->subscriptions = 2;
    /* Two match rules, one per interface, rather than one for every signal of the provider:
     * gnome-keyring also emits PropertiesChanged with a collection's whole item list after each
     * change, which the bus would then copy to this process each time (about 50 KB with 1,000
     * items, and it made W1's writes measurably slower). */
    ids[0] = internal.g_dbus_connection_signal_subscribe(connection, sender, "org.freedesktop.Secret.Collection",
                                                         NULL, NULL, NULL, 0, item_signal, watch, item_watch_free);
    ids[1] = internal.g_dbus_connection_signal_subscribe(connection, sender, "org.freedesktop.Secret.Service",
                                                         NULL, NULL, NULL, 0, item_signal, watch, item_watch_free);
    return 1;
}

void tv_unwatch_items(GDBusConnection *connection, const guint ids[2]) {
    if (ids[0] != 0) internal.g_dbus_connection_signal_unsubscribe(connection, ids[0]);
    if (ids[1] != 0) internal.g_dbus_connection_signal_unsubscribe(connection, ids[1]);
}
