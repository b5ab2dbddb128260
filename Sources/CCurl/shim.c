#include "CCurl.h"
#include "curl_abi.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* See CCurl.h: libcurl is opened on first use, never linked. */

typedef struct {
#define TV_FIELD(type, name, parameters) type(*name) parameters;
    TV_CURL_FUNCTIONS(TV_FIELD)
#undef TV_FIELD
} tv_curl_table;

static tv_curl_table curl;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static char loaded_soname[256];

int tv_curl_load(const char *soname, char *message, size_t size) {
    tv_curl_table table;
    void *handle;
    int ok = 1;
    int code;

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
#define TV_RESOLVE(type, name, parameters)                                                         \
    if (ok) {                                                                                      \
        *(void **)&table.name = dlsym(handle, #name);                                              \
        if (table.name == NULL) {                                                                  \
            snprintf(message, size, "%s has no function %s", soname, #name);                      \
            ok = 0;                                                                                \
        }                                                                                          \
    }
    TV_CURL_FUNCTIONS(TV_RESOLVE)
#undef TV_RESOLVE
    /* A library that lacks a function stays open (unloading one is not safe), unused. */
    if (!ok) {
        pthread_mutex_unlock(&load_lock);
        return 0;
    }
    if (loaded_soname[0] != '\0') {
        /* One libcurl per process: the first that loaded is the one every transfer uses. */
        snprintf(message, size, "%s is a libcurl, but %s is already in use", soname, loaded_soname);
        pthread_mutex_unlock(&load_lock);
        return 0;
    }
    /* Not thread-safe in every libcurl, hence under the lock, once. */
    code = table.curl_global_init(TV_CURL_GLOBAL_DEFAULT);
    if (code != TV_CURLE_OK) {
        snprintf(message, size, "curl_global_init failed: %s", table.curl_easy_strerror(code));
        pthread_mutex_unlock(&load_lock);
        return 0;
    }
    curl = table;
    snprintf(loaded_soname, sizeof loaded_soname, "%s", soname);
    pthread_mutex_unlock(&load_lock);
    return 1;
}

/* MARK: - One transfer */

typedef struct {
    uint8_t *bytes;
    size_t length;
    size_t capacity;
    size_t limit;
    int overflowed;
} tv_buffer;

struct tv_curl_transfer {
    char *url;
    char *user_agent;
    char **headers;
    size_t header_count;
    uint8_t *body;
    size_t body_length;
    /* A GET (set by tv_curl_transfer_use_get) rather than a POST of `body`. */
    int get;
    long timeout_ms;
    int direct; /* never through a proxy: the host is loopback */
    /* TLS files (tv_curl_transfer_use_tls), NULL for curl's default. */
    char *ca_file;
    char *cert_file;
    char *key_file;
    int aborted; /* read and written with __atomic builtins only */

    void (*done)(void *context);
    void *context;

    int code;
    long status;
    long os_errno;
    long request_bytes;
    tv_buffer response;
    tv_buffer response_headers;
};

static char *copy_string(const char *text) {
    size_t length = strlen(text) + 1;
    char *copy = malloc(length);
    if (copy != NULL) memcpy(copy, text, length);
    return copy;
}

static void wipe_and_free(void *bytes, size_t length) {
    if (bytes == NULL) return;
    explicit_bzero(bytes, length);
    free(bytes);
}

tv_curl_transfer *tv_curl_transfer_new(const char *url, const char *const *headers, size_t header_count,
                                       const void *body, size_t body_length, long timeout_ms, size_t max_body,
                                       const char *user_agent, int direct) {
    tv_curl_transfer *transfer = calloc(1, sizeof *transfer);
    if (transfer == NULL) return NULL;
    transfer->url = copy_string(url);
    transfer->user_agent = copy_string(user_agent);
    transfer->headers = calloc(header_count + 1, sizeof(char *));
    transfer->body = malloc(body_length + 1);
    if (transfer->url == NULL || transfer->user_agent == NULL || transfer->headers == NULL || transfer->body == NULL) {
        tv_curl_transfer_free(transfer);
        return NULL;
    }
    for (size_t index = 0; index < header_count; index++) {
        transfer->headers[index] = copy_string(headers[index]);
        transfer->header_count = index + 1;
        if (transfer->headers[index] == NULL) {
            tv_curl_transfer_free(transfer);
            return NULL;
        }
    }
    if (body_length > 0) memcpy(transfer->body, body, body_length);
    transfer->body_length = body_length;
    transfer->timeout_ms = timeout_ms > 0 ? timeout_ms : 1;
    transfer->direct = direct != 0;
    transfer->response.limit = max_body;
    transfer->response_headers.limit = 64 * 1024;
    transfer->code = -1;
    return transfer;
}

void tv_curl_transfer_use_get(tv_curl_transfer *transfer) {
    transfer->get = 1;
}

int tv_curl_transfer_use_tls(tv_curl_transfer *transfer, const char *ca_file, const char *cert_file, const char *key_file) {
    if (ca_file != NULL && (transfer->ca_file = copy_string(ca_file)) == NULL) return -1;
    if (cert_file != NULL && (transfer->cert_file = copy_string(cert_file)) == NULL) return -1;
    if (key_file != NULL && (transfer->key_file = copy_string(key_file)) == NULL) return -1;
    return 0;
}

void tv_curl_transfer_free(tv_curl_transfer *transfer) {
    if (transfer == NULL) return;
    free(transfer->ca_file);
    free(transfer->cert_file);
    free(transfer->key_file);
    free(transfer->url);
    free(transfer->user_agent);
    if (transfer->headers != NULL) {
        /* An Authorization header holds the client secret. */
        for (size_t index = 0; index < transfer->header_count; index++) {
            if (transfer->headers[index] != NULL) wipe_and_free(transfer->headers[index], strlen(transfer->headers[index]));
        }
        free(transfer->headers);
    }
    wipe_and_free(transfer->body, transfer->body_length + 1);
    wipe_and_free(transfer->response.bytes, transfer->response.capacity);
    free(transfer->response_headers.bytes);
    free(transfer);
}

static int append(tv_buffer *buffer, const char *data, size_t length) {
    if (length > buffer->limit - buffer->length) {
        buffer->overflowed = 1;
        return 0;
    }
    if (buffer->length + length > buffer->capacity) {
        size_t capacity = buffer->capacity == 0 ? 4096 : buffer->capacity;
        while (capacity < buffer->length + length) capacity *= 2;
        uint8_t *bytes = malloc(capacity);
        if (bytes == NULL) return 0;
        if (buffer->length > 0) memcpy(bytes, buffer->bytes, buffer->length);
        /* The old block may hold part of a token response. */
        wipe_and_free(buffer->bytes, buffer->capacity);
        buffer->bytes = bytes;
        buffer->capacity = capacity;
    }
    memcpy(buffer->bytes + buffer->length, data, length);
    buffer->length += length;
    return 1;
}

static size_t on_body(char *data, size_t size, size_t count, void *context) {
    tv_curl_transfer *transfer = context;
    size_t length = size * count;
    /* Returning less than `length` makes curl stop with CURLE_WRITE_ERROR. */
    return append(&transfer->response, data, length) ? length : 0;
}

static size_t on_header(char *data, size_t size, size_t count, void *context) {
    tv_curl_transfer *transfer = context;
    size_t length = size * count;
    /* A status line starts a new response (after a 1xx, say): keep only the last one's headers. */
    if (length >= 5 && memcmp(data, "HTTP/", 5) == 0) transfer->response_headers.length = 0;
    return append(&transfer->response_headers, data, length) ? length : 0;
}

static int on_progress(void *context, tv_curl_off_t download_total, tv_curl_off_t download_now,
                       tv_curl_off_t upload_total, tv_curl_off_t upload_now) {
    tv_curl_transfer *transfer = context;
    (void)download_total, (void)download_now, (void)upload_total, (void)upload_now;
    return __atomic_load_n(&transfer->aborted, __ATOMIC_ACQUIRE);
}

void tv_curl_transfer_abort(tv_curl_transfer *transfer) {
    __atomic_store_n(&transfer->aborted, 1, __ATOMIC_RELEASE);
}

#define TV_SET(option, value)                                                                      \
    do {                                                                                           \
        if (code == TV_CURLE_OK) code = curl.curl_easy_setopt(handle, (option), (value));          \
    } while (0)

static void perform(tv_curl_transfer *transfer) {
    struct tv_curl_slist *list = NULL;
    TV_CURL *handle = curl.curl_easy_init();
    int code = TV_CURLE_OK;
    long value = 0;
    /* curl's detailed message (CURL_ERROR_SIZE is 256); read only to classify TLS alerts below,
       never passed on: it may name the host. */
    char detail[256] = {0};

    if (handle == NULL) {
        transfer->code = TV_CURLE_OUT_OF_MEMORY;
        return;
    }
    for (size_t index = 0; index < transfer->header_count; index++) {
        struct tv_curl_slist *longer = curl.curl_slist_append(list, transfer->headers[index]);
        if (longer == NULL) {
            code = TV_CURLE_OUT_OF_MEMORY;
            break;
        }
        list = longer;
    }
    /* Signals are no way to time out a thread among others; the threaded resolver needs none. */
    TV_SET(TV_CURLOPT_NOSIGNAL, 1L);
    TV_SET(TV_CURLOPT_URL, transfer->url);
    /* http and https only, and no redirect: a token request is never sent anywhere else. */
    if (code == TV_CURLE_OK) {
        code = curl.curl_easy_setopt(handle, TV_CURLOPT_PROTOCOLS_STR, "http,https");
        if (code == TV_CURLE_UNKNOWN_OPTION) {
            code = curl.curl_easy_setopt(handle, TV_CURLOPT_PROTOCOLS, (long)(TV_CURLPROTO_HTTP | TV_CURLPROTO_HTTPS));
        }
    }
    TV_SET(TV_CURLOPT_FOLLOWLOCATION, 0L);
    /* Loopback never goes through a proxy: plain http is allowed there only because nothing
       leaves the machine, and http_proxy would carry the secrets off it in clear. An empty
       CURLOPT_PROXY turns every proxy off, whatever the environment says. */
    if (transfer->direct) TV_SET(TV_CURLOPT_PROXY, "");
    /* curl's defaults, said out loud: the peer's certificate and name are always verified. */
    TV_SET(TV_CURLOPT_SSL_VERIFYPEER, 1L);
    TV_SET(TV_CURLOPT_SSL_VERIFYHOST, 2L);
    /* A CA bundle instead of the system store, and a client certificate (RFC 8705), if given. */
    if (transfer->ca_file != NULL) TV_SET(TV_CURLOPT_CAINFO, transfer->ca_file);
    if (transfer->cert_file != NULL) TV_SET(TV_CURLOPT_SSLCERT, transfer->cert_file);
    if (transfer->key_file != NULL) TV_SET(TV_CURLOPT_SSLKEY, transfer->key_file);
    TV_SET(TV_CURLOPT_USERAGENT, transfer->user_agent);
    TV_SET(TV_CURLOPT_HTTPHEADER, list);
    if (transfer->get) {
        TV_SET(TV_CURLOPT_HTTPGET, 1L);
    } else {
        TV_SET(TV_CURLOPT_POST, 1L);
        TV_SET(TV_CURLOPT_POSTFIELDSIZE, (long)transfer->body_length);
        TV_SET(TV_CURLOPT_COPYPOSTFIELDS, (const char *)transfer->body);
    }
    /* One bound for the whole request, connection and answer included. */
    TV_SET(TV_CURLOPT_TIMEOUT_MS, transfer->timeout_ms);
    TV_SET(TV_CURLOPT_CONNECTTIMEOUT_MS, transfer->timeout_ms);
    TV_SET(TV_CURLOPT_WRITEFUNCTION, (tv_curl_write_callback)on_body);
    TV_SET(TV_CURLOPT_WRITEDATA, (void *)transfer);
    TV_SET(TV_CURLOPT_HEADERFUNCTION, (tv_curl_write_callback)on_header);
    TV_SET(TV_CURLOPT_HEADERDATA, (void *)transfer);
    TV_SET(TV_CURLOPT_XFERINFOFUNCTION, (tv_curl_xferinfo_callback)on_progress);
    TV_SET(TV_CURLOPT_XFERINFODATA, (void *)transfer);
    TV_SET(TV_CURLOPT_NOPROGRESS, 0L);
    TV_SET(TV_CURLOPT_ERRORBUFFER, detail);

    if (code == TV_CURLE_OK) {
        code = __atomic_load_n(&transfer->aborted, __ATOMIC_ACQUIRE) ? TV_CURLE_ABORTED_BY_CALLBACK
                                                                    : curl.curl_easy_perform(handle);
        value = 0;
        if (curl.curl_easy_getinfo(handle, TV_CURLINFO_RESPONSE_CODE, &value) == TV_CURLE_OK) transfer->status = value;
        value = 0;
        if (curl.curl_easy_getinfo(handle, TV_CURLINFO_OS_ERRNO, &value) == TV_CURLE_OK) transfer->os_errno = value;
        value = 0;
        if (curl.curl_easy_getinfo(handle, TV_CURLINFO_REQUEST_SIZE, &value) == TV_CURLE_OK) {
            transfer->request_bytes = value;
        }
    }
    /* With TLS 1.3 the server checks the client certificate after the client's side of the
       handshake is done, so a refused or missing certificate arrives as an alert on the first
       write or read, which curl reports as a send or receive error: say what it is. */
    if ((code == TV_CURLE_SEND_ERROR || code == TV_CURLE_RECV_ERROR) &&
        (strstr(detail, "alert certificate required") != NULL || strstr(detail, "alert unknown ca") != NULL ||
         strstr(detail, "alert bad certificate") != NULL || strstr(detail, "alert certificate unknown") != NULL)) {
        code = TV_CURLE_SSL_CLIENTCERT;
    }
    transfer->code = code;
    /* curl's copy of the body (COPYPOSTFIELDS) is freed by cleanup; it was a copy of ours, and
     * curl gives no way to wipe it first. */
    curl.curl_easy_cleanup(handle);
    curl.curl_slist_free_all(list);
}

#undef TV_SET

static void *run(void *argument) {
    tv_curl_transfer *transfer = argument;
    perform(transfer);
    transfer->done(transfer->context);
    return NULL;
}

int tv_curl_transfer_start(tv_curl_transfer *transfer, void (*done)(void *context), void *context) {
    pthread_attr_t attributes;
    pthread_t thread;
    int error;

    transfer->done = done;
    transfer->context = context;
    error = pthread_attr_init(&attributes);
    if (error != 0) return error;
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    error = pthread_create(&thread, &attributes, run, transfer);
    pthread_attr_destroy(&attributes);
    return error;
}

/* MARK: - The outcome */

int tv_curl_transfer_code(const tv_curl_transfer *transfer) { return transfer->code; }
long tv_curl_transfer_status(const tv_curl_transfer *transfer) { return transfer->status; }
int tv_curl_transfer_os_errno(const tv_curl_transfer *transfer) { return (int)transfer->os_errno; }
long tv_curl_transfer_request_bytes(const tv_curl_transfer *transfer) { return transfer->request_bytes; }
int tv_curl_transfer_body_overflowed(const tv_curl_transfer *transfer) { return transfer->response.overflowed; }

const uint8_t *tv_curl_transfer_body(const tv_curl_transfer *transfer, size_t *length) {
    *length = transfer->response.length;
    return transfer->response.bytes;
}

const uint8_t *tv_curl_transfer_headers(const tv_curl_transfer *transfer, size_t *length) {
    *length = transfer->response_headers.length;
    return transfer->response_headers.bytes;
}

const char *tv_curl_transfer_reason(const tv_curl_transfer *transfer) {
    return transfer->code >= 0 ? curl.curl_easy_strerror(transfer->code) : "the transfer did not run";
}
