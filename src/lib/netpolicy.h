/* The network allow-list: parsing and normalising entries, and matching a
 * request (method, URL) against them. Pure functions, no I/O. */
#ifndef AIRLOCK_NETPOLICY_H
#define AIRLOCK_NETPOLICY_H

#include <stdbool.h>
#include <stddef.h>

#include "airlock.h"

typedef struct allow_entry {
        char *target;   /* normalised text, e.g. "api.example.com" or "https://h:8443/api" */
        char *scheme;   /* NULL for a bare host entry (http and https) */
        char *host;     /* lower case; IPv6 literals without brackets */
        int port;       /* 0: the scheme's default */
        char *path;     /* "" or a prefix like "/api" (no trailing '/') */
        char **methods; /* upper case, sorted, unique; NULL-terminated; never empty */
        size_t n_methods;
} allow_entry;

typedef struct net_allowlist net_allowlist;

int allowlist_new(net_allowlist **ret, airlock_error *err);
void allowlist_free(net_allowlist *al);
int allowlist_clone(const net_allowlist *al, net_allowlist **ret, airlock_error *err);

/* Adds target ("host", "host:port", or "scheme://host[:port][/path]") with
 * methods (comma-separated; NULL means every method but CONNECT and TRACE).
 * Normalisation as DESIGN.md: trim, lower-case the host, drop a trailing '/';
 * empty entries, empty methods and an empty list are errors; methods are
 * upper-cased, de-duplicated and sorted; CONNECT and TRACE are refused; an
 * existing target gets its methods replaced. */
int allowlist_add(net_allowlist *al, const char *target, const char *methods, airlock_error *err);

size_t allowlist_count(const net_allowlist *al);
const allow_entry *allowlist_get(const net_allowlist *al, size_t i);

typedef struct url_parts {
        char *scheme; /* "http" or "https" */
        char *host;   /* lower case; IPv6 without brackets */
        int port;     /* explicit or the scheme's default */
        char *path;   /* starts with '/'; query and fragment excluded */
        bool host_is_ip;
} url_parts;

/* Parses an absolute http(s) URL strictly (no userinfo, no spaces or control
 * characters, valid port). */
int url_parse(const char *url, url_parts *ret, airlock_error *err);
void url_parts_free(url_parts *u);

/* Checks a request. Returns 0 and the matching entry, or -EACCES with a
 * message naming the method, the URL and the entry that would allow it. */
int allowlist_check(const net_allowlist *al, const char *method, const url_parts *url,
                    const allow_entry **ret_entry, airlock_error *err);

/* Canonical text of the list, for fingerprints. */
char *allowlist_fingerprint_text(const net_allowlist *al);

#endif
