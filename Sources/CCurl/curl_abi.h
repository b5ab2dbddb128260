#ifndef TOKENVAULT_CCURL_ABI_H
#define TOKENVAULT_CCURL_ABI_H

/*
 * The part of libcurl's public ABI that shim.c uses, declared here so that building TokenVault
 * needs no curl header. curl keeps option numbers, info numbers and these signatures stable for
 * good (an option is deprecated, never renumbered). Every value was checked against curl 7.88.1's
 * curl/curl.h (Debian 12) with _Static_asserts; the option names are curl's, with a TV_ prefix.
 */

#include <stddef.h>
#include <stdint.h>

typedef void TV_CURL;
typedef int64_t tv_curl_off_t; /* curl_off_t: 64 bits on every Linux build of curl */
struct tv_curl_slist;

/* CURLoption: CURLOPTTYPE_LONG 0, OBJECTPOINT/STRINGPOINT 10000, FUNCTIONPOINT 20000. */
#define TV_CURLOPT_WRITEDATA 10001
#define TV_CURLOPT_URL 10002
#define TV_CURLOPT_ERRORBUFFER 10010
#define TV_CURLOPT_SSLCERT 10025
#define TV_CURLOPT_CAINFO 10065
#define TV_CURLOPT_SSLKEY 10087
#define TV_CURLOPT_PROXY 10004
#define TV_CURLOPT_USERAGENT 10018
#define TV_CURLOPT_HTTPHEADER 10023
#define TV_CURLOPT_HEADERDATA 10029
#define TV_CURLOPT_XFERINFODATA 10057
#define TV_CURLOPT_COPYPOSTFIELDS 10165
#define TV_CURLOPT_PROTOCOLS_STR 10318
#define TV_CURLOPT_REDIR_PROTOCOLS_STR 10319
#define TV_CURLOPT_WRITEFUNCTION 20011
#define TV_CURLOPT_HEADERFUNCTION 20079
#define TV_CURLOPT_XFERINFOFUNCTION 20219
#define TV_CURLOPT_NOPROGRESS 43
#define TV_CURLOPT_POST 47
#define TV_CURLOPT_FOLLOWLOCATION 52
#define TV_CURLOPT_POSTFIELDSIZE 60
#define TV_CURLOPT_SSL_VERIFYPEER 64
#define TV_CURLOPT_HTTPGET 80
#define TV_CURLOPT_SSL_VERIFYHOST 81
#define TV_CURLOPT_NOSIGNAL 99
#define TV_CURLOPT_TIMEOUT_MS 155
#define TV_CURLOPT_CONNECTTIMEOUT_MS 156
#define TV_CURLOPT_PROTOCOLS 181 /* the bitmask form, for a curl older than 7.85 */

/* CURLPROTO_* for TV_CURLOPT_PROTOCOLS. */
#define TV_CURLPROTO_HTTP (1 << 0)
#define TV_CURLPROTO_HTTPS (1 << 1)

/* CURLINFO: CURLINFO_LONG 0x200000. */
#define TV_CURLINFO_RESPONSE_CODE (0x200000 + 2)
#define TV_CURLINFO_REQUEST_SIZE (0x200000 + 12)
#define TV_CURLINFO_OS_ERRNO (0x200000 + 25)

/* curl_global_init flags: CURL_GLOBAL_DEFAULT = CURL_GLOBAL_SSL | CURL_GLOBAL_WIN32. */
#define TV_CURL_GLOBAL_DEFAULT 3

/* A CURLcode that curl_easy_setopt returns for an option this libcurl does not know. */
#define TV_CURLE_UNKNOWN_OPTION 48

typedef size_t (*tv_curl_write_callback)(char *data, size_t size, size_t count, void *context);
typedef int (*tv_curl_xferinfo_callback)(void *context, tv_curl_off_t download_total, tv_curl_off_t download_now,
                                         tv_curl_off_t upload_total, tv_curl_off_t upload_now);

/* (return type, name, parameters): the functions tv_curl_load resolves. */
#define TV_CURL_FUNCTIONS(X)                                                                       \
    X(int, curl_global_init, (long flags))                                                         \
    X(TV_CURL *, curl_easy_init, (void))                                                           \
    X(int, curl_easy_setopt, (TV_CURL * handle, int option, ...))                                  \
    X(int, curl_easy_perform, (TV_CURL * handle))                                                  \
    X(int, curl_easy_getinfo, (TV_CURL * handle, int info, ...))                                   \
    X(void, curl_easy_cleanup, (TV_CURL * handle))                                                 \
    X(const char *, curl_easy_strerror, (int code))                                                \
    X(struct tv_curl_slist *, curl_slist_append, (struct tv_curl_slist * list, const char *line))  \
    X(void, curl_slist_free_all, (struct tv_curl_slist * list))

#endif
