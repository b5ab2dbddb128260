#ifndef TOKENVAULT_CLIBSECRET_SHIM_H
#define TOKENVAULT_CLIBSECRET_SHIM_H

/*
 * The D-Bus-path functions of libsecret (secret-paths.h) are marked "unstable", but have not
 * changed since libsecret 0.18 (2014). They let TokenVault make exactly one D-Bus round trip per
 * step and decide itself when an unlock prompt may be shown.
 */
#define SECRET_API_SUBJECT_TO_CHANGE 1

/*
 * libsecret's headers by their Debian path, in the order <libsecret/secret.h> includes them.
 * Package.swift takes only GLib's include paths from pkg-config (glib-2.0.pc): libsecret-1.pc
 * would also bring gmodule's `-pthread`, which SwiftPM drops with a "prohibited flag" warning in
 * every build of every package that depends on TokenVault. libsecret's headers include each
 * other by quoted name, so they are found next to one another.
 */
#include <glib.h>
#define __SECRET_INSIDE_HEADER__
#include "/usr/include/libsecret-1/libsecret/secret-attributes.h"
#include "/usr/include/libsecret-1/libsecret/secret-collection.h"
#include "/usr/include/libsecret-1/libsecret/secret-enum-types.h"
#include "/usr/include/libsecret-1/libsecret/secret-item.h"
#include "/usr/include/libsecret-1/libsecret/secret-password.h"
#include "/usr/include/libsecret-1/libsecret/secret-prompt.h"
#include "/usr/include/libsecret-1/libsecret/secret-retrievable.h"
#include "/usr/include/libsecret-1/libsecret/secret-schema.h"
#include "/usr/include/libsecret-1/libsecret/secret-schemas.h"
#include "/usr/include/libsecret-1/libsecret/secret-service.h"
#include "/usr/include/libsecret-1/libsecret/secret-types.h"
#include "/usr/include/libsecret-1/libsecret/secret-value.h"
#include "/usr/include/libsecret-1/libsecret/secret-version.h"
#include "/usr/include/libsecret-1/libsecret/secret-paths.h"
#undef __SECRET_INSIDE_HEADER__

/*
 * A few static inline helpers, because Swift cannot call C variadic functions such as
 * g_variant_new or g_variant_builder_add, nor C macros such as SECRET_TYPE_SERVICE. Each one is a
 * thin wrapper: no policy, no error mapping (that happens in Swift, in one place).
 */

#define TV_SECRETS_BUS_NAME "org.freedesktop.secrets"
#define TV_SECRETS_PATH "/org/freedesktop/secrets"
#define TV_SCHEMA_NAME "dev.tokenvault.Credential"

/* The one schema. DONT_MATCH_NAME: lookups match on service and account only, so items that
 * `secret-tool store service S account A` made are found too. */
static inline const SecretSchema *tv_schema(void) {
    static const SecretSchema schema = {
        TV_SCHEMA_NAME,
        SECRET_SCHEMA_DONT_MATCH_NAME,
        {
            {"service", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"account", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {NULL, 0},
        },
    };
    return &schema;
}

/* A string-to-string attribute table that owns its keys and values. */
static inline GHashTable *tv_attributes_new(void) {
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
}

static inline void tv_attributes_set(GHashTable *attributes, const char *name, const char *value) {
    g_hash_table_replace(attributes, g_strdup(name), g_strdup(value));
}

/* The D-Bus properties of a new item: its label and its attributes. */
static inline GHashTable *tv_item_properties_new(const char *label, GHashTable *attributes) {
    GHashTable *properties =
        g_hash_table_new_full(g_str_hash, g_str_equal, NULL, (GDestroyNotify)g_variant_unref);
    GVariantBuilder builder;
    GHashTableIter iter;
    gpointer name, value;

    g_variant_builder_init(&builder, G_VARIANT_TYPE("a{ss}"));
    g_hash_table_iter_init(&iter, attributes);
    while (g_hash_table_iter_next(&iter, &name, &value)) {
        g_variant_builder_add(&builder, "{ss}", (const char *)name, (const char *)value);
    }
    g_hash_table_insert(properties, (gpointer) "org.freedesktop.Secret.Item.Label",
                        g_variant_ref_sink(g_variant_new_string(label)));
    g_hash_table_insert(properties, (gpointer) "org.freedesktop.Secret.Item.Attributes",
                        g_variant_ref_sink(g_variant_builder_end(&builder)));
    return properties;
}

/* A private connection to the bus at `address`. Unlike g_bus_get(), it never autolaunches a bus
 * and never exits the process when the bus goes away. */
static inline GDBusConnection *tv_bus_connect(const char *address, GCancellable *cancellable,
                                              GError **error) {
    return g_dbus_connection_new_for_address_sync(
        address,
        G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT |
            G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION,
        NULL, cancellable, error);
}

/* The process's session-bus connection, which GIO shares with everything else in the process,
 * made safe for a library: GIO sets exit-on-close on it, which would end the whole process
 * when the bus goes away. TokenVault turns that off and reports an error instead. Call it only
 * once an address is known to exist (GIO autolaunches a bus otherwise). */
static inline GDBusConnection *tv_session_bus(GCancellable *cancellable, GError **error) {
    GDBusConnection *connection = g_bus_get_sync(G_BUS_TYPE_SESSION, cancellable, error);
    if (connection != NULL) g_dbus_connection_set_exit_on_close(connection, FALSE);
    return connection;
}

/* A new SecretService proxy (not the process-wide singleton) on the session bus, with an open
 * transfer session: encrypted (dh-ietf1024-sha256-aes128-cbc-pkcs7) when the provider supports
 * it. libsecret only builds it on GIO's shared session-bus connection. */
static inline SecretService *tv_service_open(GCancellable *cancellable, GError **error) {
    return secret_service_open_sync(SECRET_TYPE_SERVICE, NULL, SECRET_SERVICE_OPEN_SESSION,
                                    cancellable, error);
}

static inline GDBusConnection *tv_service_connection(SecretService *service) {
    return g_dbus_proxy_get_connection(G_DBUS_PROXY(service));
}

/* Calls a method of the bus itself (org.freedesktop.DBus) that takes one string. */
static inline GVariant *tv_bus_call_string(GDBusConnection *connection, const char *method,
                                           const char *argument, const char *reply_type,
                                           int timeout_ms, GCancellable *cancellable,
                                           GError **error) {
    GVariant *parameters = NULL;
    if (argument != NULL) {
        parameters = g_variant_new("(s)", argument);
    }
    return g_dbus_connection_call_sync(connection, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                       "org.freedesktop.DBus", method, parameters,
                                       G_VARIANT_TYPE(reply_type), G_DBUS_CALL_FLAGS_NONE,
                                       timeout_ms, cancellable, error);
}

/* Whether `name` has an owner on the bus. */
static inline gboolean tv_name_has_owner(GDBusConnection *connection, const char *name,
                                         int timeout_ms, GCancellable *cancellable,
                                         gboolean *owned, GError **error) {
    GVariant *reply = tv_bus_call_string(connection, "NameHasOwner", name, "(b)", timeout_ms,
                                         cancellable, error);
    if (reply == NULL) return FALSE;
    g_variant_get(reply, "(b)", owned);
    g_variant_unref(reply);
    return TRUE;
}

/* Whether the bus can start a service for `name` (D-Bus activation). */
static inline gboolean tv_name_is_activatable(GDBusConnection *connection, const char *name,
                                              int timeout_ms, GCancellable *cancellable,
                                              gboolean *activatable, GError **error) {
    GVariant *reply = tv_bus_call_string(connection, "ListActivatableNames", NULL, "(as)",
                                         timeout_ms, cancellable, error);
    GVariantIter *iter = NULL;
    const char *each = NULL;
    if (reply == NULL) return FALSE;
    *activatable = FALSE;
    g_variant_get(reply, "(as)", &iter);
    while (g_variant_iter_loop(iter, "&s", &each)) {
        if (g_strcmp0(each, name) == 0) *activatable = TRUE;
    }
    g_variant_iter_free(iter);
    g_variant_unref(reply);
    return TRUE;
}

/* Asks the bus to start the service for `name`. */
static inline gboolean tv_start_service(GDBusConnection *connection, const char *name,
                                        int timeout_ms, GCancellable *cancellable, GError **error) {
    GVariant *reply = g_dbus_connection_call_sync(
        connection, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
        "StartServiceByName", g_variant_new("(su)", name, (guint32)0), G_VARIANT_TYPE("(u)"),
        G_DBUS_CALL_FLAGS_NONE, timeout_ms, cancellable, error);
    if (reply == NULL) return FALSE;
    g_variant_unref(reply);
    return TRUE;
}

/* The object path behind a collection alias such as "default"; "/" when there is none. */
static inline char *tv_read_alias(GDBusConnection *connection, const char *alias, int timeout_ms,
                                  GCancellable *cancellable, GError **error) {
    char *path = NULL;
    GVariant *reply = g_dbus_connection_call_sync(
        connection, TV_SECRETS_BUS_NAME, TV_SECRETS_PATH, "org.freedesktop.Secret.Service",
        "ReadAlias", g_variant_new("(s)", alias), G_VARIANT_TYPE("(o)"), G_DBUS_CALL_FLAGS_NONE,
        timeout_ms, cancellable, error);
    if (reply == NULL) return NULL;
    g_variant_get(reply, "(o)", &path);
    g_variant_unref(reply);
    return path;
}

/* Reads one property of an object of the Secret Service. The caller unrefs the value. */
static inline GVariant *tv_get_property(GDBusConnection *connection, const char *path,
                                        const char *interface, const char *property,
                                        int timeout_ms, GCancellable *cancellable,
                                        GError **error) {
    GVariant *value = NULL;
    GVariant *reply = g_dbus_connection_call_sync(
        connection, TV_SECRETS_BUS_NAME, path, "org.freedesktop.DBus.Properties", "Get",
        g_variant_new("(ss)", interface, property), G_VARIANT_TYPE("(v)"),
        G_DBUS_CALL_FLAGS_NONE, timeout_ms, cancellable, error);
    if (reply == NULL) return NULL;
    g_variant_get(reply, "(v)", &value);
    g_variant_unref(reply);
    return value;
}

/* Whether the collection at `path` is locked. */
static inline gboolean tv_collection_is_locked(GDBusConnection *connection, const char *path,
                                               int timeout_ms, GCancellable *cancellable,
                                               gboolean *locked, GError **error) {
    GVariant *value = tv_get_property(connection, path, "org.freedesktop.Secret.Collection",
                                      "Locked", timeout_ms, cancellable, error);
    if (value == NULL) return FALSE;
    if (!g_variant_is_of_type(value, G_VARIANT_TYPE_BOOLEAN)) {
        g_variant_unref(value);
        g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                            "the collection's Locked property is not a boolean");
        return FALSE;
    }
    *locked = g_variant_get_boolean(value);
    g_variant_unref(value);
    return TRUE;
}

/* Reads an item's attributes (never its secret). The caller unrefs the table. */
static inline GHashTable *tv_item_attributes(GDBusConnection *connection, const char *path,
                                             int timeout_ms, GCancellable *cancellable,
                                             GError **error) {
    GHashTable *attributes;
    GVariantIter iter;
    const char *name, *value;
    GVariant *dict = tv_get_property(connection, path, "org.freedesktop.Secret.Item",
                                     "Attributes", timeout_ms, cancellable, error);
    if (dict == NULL) return NULL;
    if (!g_variant_is_of_type(dict, G_VARIANT_TYPE("a{ss}"))) {
        g_variant_unref(dict);
        g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                            "the item's Attributes property is not a string dictionary");
        return NULL;
    }
    attributes = tv_attributes_new();
    g_variant_iter_init(&iter, dict);
    while (g_variant_iter_next(&iter, "{&s&s}", &name, &value)) {
        tv_attributes_set(attributes, name, value);
    }
    g_variant_unref(dict);
    return attributes;
}

#endif
