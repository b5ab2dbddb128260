#ifndef TOKENVAULT_CCURL_H
#define TOKENVAULT_CCURL_H

/*
 * libcurl, loaded with dlopen on first use (tv_curl_load), so that a process that never sends an
 * HTTP request (`vault --version`, a file-vault `vault get`) maps neither libcurl nor the ~28
 * libraries it depends on, and nothing TokenVault builds links -lcurl (issue 17: a dependent
 * package's `--static-swift-stdlib` build needed libcurl.so only because FoundationNetworking
 * named it).
 *
 * This header includes no curl header. shim.c declares the few curl types and constants it uses,
 * with curl's stable public ABI (the values were checked against curl 7.88.1's curl/curl.h), and
 * runs one POST on a thread of its own: curl_easy_perform blocks, so it never runs on a Swift
 * thread. Swift sees only the transfer below, whose fields are plain C.
 */

#include <stddef.h>
#include <stdint.h>

/* The soname tv_curl_load opens in production: Debian's libcurl4 (OpenSSL flavour). */
#define TV_CURL_SONAME "libcurl.so.4"

/* The curl result codes TokenVault tells apart (CURLcode, curl/curl.h). */
enum {
    TV_CURLE_OK = 0,
    TV_CURLE_UNSUPPORTED_PROTOCOL = 1,
    TV_CURLE_URL_MALFORMAT = 3,
    TV_CURLE_COULDNT_RESOLVE_PROXY = 5,
    TV_CURLE_COULDNT_RESOLVE_HOST = 6,
    TV_CURLE_COULDNT_CONNECT = 7,
    TV_CURLE_WEIRD_SERVER_REPLY = 8,
    TV_CURLE_PARTIAL_FILE = 18,
    TV_CURLE_HTTP_RETURNED_ERROR = 22,
    TV_CURLE_WRITE_ERROR = 23,
    TV_CURLE_OUT_OF_MEMORY = 27,
    TV_CURLE_OPERATION_TIMEDOUT = 28,
    TV_CURLE_SSL_CONNECT_ERROR = 35,
    TV_CURLE_ABORTED_BY_CALLBACK = 42,
    TV_CURLE_GOT_NOTHING = 52,
    TV_CURLE_SEND_ERROR = 55,
    TV_CURLE_RECV_ERROR = 56,
    TV_CURLE_SSL_CERTPROBLEM = 58,
    TV_CURLE_SSL_CIPHER = 59,
    TV_CURLE_PEER_FAILED_VERIFICATION = 60,
    TV_CURLE_SSL_CACERT_BADFILE = 77,
    TV_CURLE_HTTP2 = 16,
    TV_CURLE_HTTP2_STREAM = 92,
    TV_CURLE_SSL_ISSUER_ERROR = 83,
    TV_CURLE_SSL_CLIENTCERT = 98,
};

/*
 * Opens `soname` and resolves the curl functions TokenVault calls, then runs curl_global_init.
 * Returns 1 when curl is ready (at once if it already was); otherwise 0, with a message in
 * `message`. Thread-safe. The library is never closed.
 */
int tv_curl_load(const char *soname, char *message, size_t size);

/* One POST and, once it has run, its outcome. Opaque; read it through the functions below. */
typedef struct tv_curl_transfer tv_curl_transfer;

/*
 * A transfer of `body` to `url` with `headers` ("Name: value" lines), bounded by `timeout_ms` in
 * all, keeping at most `max_body` bytes of the answer. Everything is copied. NULL when memory ran
 * out. Call only after tv_curl_load returned 1. With `direct` set, no proxy is used whatever the
 * environment says (for loopback hosts).
 */
tv_curl_transfer *tv_curl_transfer_new(const char *url, const char *const *headers, size_t header_count,
                                       const void *body, size_t body_length, long timeout_ms, size_t max_body,
                                       const char *user_agent, int direct);

/* Makes a transfer that has not started a GET: its body is not sent. */
void tv_curl_transfer_use_get(tv_curl_transfer *transfer);

/*
 * TLS files for a transfer that has not started, each NULL to keep curl's default: `ca_file`, a
 * PEM bundle of the CAs to trust instead of the system's (CURLOPT_CAINFO); `cert_file` and
 * `key_file`, the PEM client certificate and its key for mutual TLS (RFC 8705;
 * CURLOPT_SSLCERT, CURLOPT_SSLKEY). Paths are copied; curl reads the files. 0, or -1 when
 * memory ran out.
 */
int tv_curl_transfer_use_tls(tv_curl_transfer *transfer, const char *ca_file, const char *cert_file, const char *key_file);

/*
 * Runs the transfer on a new detached thread, which calls `done(context)` when it has finished
 * (after which the outcome can be read). Returns 0, or the errno of pthread_create (then `done`
 * is never called).
 */
int tv_curl_transfer_start(tv_curl_transfer *transfer, void (*done)(void *context), void *context);

/* Asks a running transfer to stop: curl's progress callback returns non-zero at its next call,
 * and the transfer ends with TV_CURLE_ABORTED_BY_CALLBACK. Thread-safe, idempotent. */
void tv_curl_transfer_abort(tv_curl_transfer *transfer);

/* Frees a transfer that never started or has finished (its request body is wiped first). */
void tv_curl_transfer_free(tv_curl_transfer *transfer);

/* The outcome, valid once `done` was called. */
int tv_curl_transfer_code(const tv_curl_transfer *transfer);        /* a CURLcode */
long tv_curl_transfer_status(const tv_curl_transfer *transfer);     /* the HTTP status, 0 if none */
int tv_curl_transfer_os_errno(const tv_curl_transfer *transfer);    /* errno of a failed connect */
long tv_curl_transfer_request_bytes(const tv_curl_transfer *transfer); /* request bytes curl sent */
int tv_curl_transfer_body_overflowed(const tv_curl_transfer *transfer);
const uint8_t *tv_curl_transfer_body(const tv_curl_transfer *transfer, size_t *length);
/* The header lines of the last response (after any 1xx), as received, CRLF included. */
const uint8_t *tv_curl_transfer_headers(const tv_curl_transfer *transfer, size_t *length);
/* curl_easy_strerror of the code: a fixed text that names no URL, header or body. */
const char *tv_curl_transfer_reason(const tv_curl_transfer *transfer);

#endif
