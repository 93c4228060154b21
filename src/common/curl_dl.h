/* libcurl, opened at run time, once for the whole process: the gateway
 * (src/lib/host/gateway.c), the tracer's exporter (trace.c) and airlock
 * serve's forwarding to its peers (src/mcp/http/serve_forward.c) all call it
 * through this one table. It is not linked: a sandbox's template is a fresh
 * execution of the host program, so a linked libcurl would load its whole
 * protocol and TLS stack (some 30 libraries) into every template and copy,
 * where nothing uses it: measured here, 15 ms more to start each sandbox and
 * about 2 MiB more per idle sandbox. */
#ifndef AIRLOCK_CURL_DL_H
#define AIRLOCK_CURL_DL_H

#include <curl/curl.h>

/* libcurl's ABI name, unchanged since 2006. */
#define AL_CURL_SONAME "libcurl.so.4"

/* The libcurl functions the project calls, one row each in curl_dl.c. */
typedef struct al_curl {
        CURLcode (*global_init)(long flags);
        const char *(*easy_strerror)(CURLcode code);
        CURL *(*easy_init)(void);
        CURLcode (*easy_setopt)(CURL *h, CURLoption opt, ...);
        CURLcode (*easy_perform)(CURL *h);
        CURLcode (*easy_getinfo)(CURL *h, CURLINFO info, ...);
        void (*easy_reset)(CURL *h);
        void (*easy_cleanup)(CURL *h);
        struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
        void (*slist_free_all)(struct curl_slist *l);
        CURLM *(*multi_init)(void);
        CURLMcode (*multi_add_handle)(CURLM *m, CURL *h);
        CURLMcode (*multi_remove_handle)(CURLM *m, CURL *h);
        CURLMcode (*multi_perform)(CURLM *m, int *running);
        CURLMsg *(*multi_info_read)(CURLM *m, int *left);
        CURLMcode (*multi_poll)(CURLM *m, struct curl_waitfd fds[], unsigned int n, int ms,
                                int *ret);
        CURLMcode (*multi_cleanup)(CURLM *m);
} al_curl;

/* The table, filled by al_curl_load: call through it only after
 * al_curl_load returned it. */
extern const al_curl *const al_cu;

/* Opens libcurl and runs curl_global_init, the first time any thread asks
 * (later calls only read the outcome, so curl_global_init, which is not
 * thread-safe, runs exactly once). Returns the table, or NULL with
 * *problem (when problem is not NULL) set to a sentence saying why
 * libcurl is unavailable: it cannot be loaded, lacks a function, or did
 * not start. */
const al_curl *al_curl_load(const char **problem);

#endif
