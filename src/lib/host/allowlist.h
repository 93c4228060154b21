/* The network allow-list: parsing and normalising entries, and matching a
 * request (method, URL) against them. Pure functions, no I/O. */
#ifndef AIRLOCK_ALLOWLIST_H
#define AIRLOCK_ALLOWLIST_H

#include <stdbool.h>
#include <stddef.h>

#include "airlock.h"

typedef struct allow_entry {
        char *target;   /* normalised text, e.g. "api.example.com" or "https://h:8443/api" */
        char *scheme;   /* NULL for a bare host entry (http and https) */
        char *host;     /* lower case; IPv6 literals without brackets */
        int port;       /* 0: the scheme's default */
        char *path;     /* "" or a prefix like "/api" (no trailing '/') */
        char **methods; /* upper case, sorted, unique; NULL-terminated; never empty.
                         * The single method "*" means every method but CONNECT
                         * and TRACE (what a NULL method list asks for). */
        size_t n_methods;
} allow_entry;

typedef struct net_allowlist net_allowlist;

int allowlist_new(net_allowlist **ret, airlock_error *err);
void allowlist_free(net_allowlist *al);
int allowlist_clone(const net_allowlist *al, net_allowlist **ret, airlock_error *err);

/* Adds target ("host", "host:port", or "scheme://host[:port][/path]") with
 * methods (comma-separated; NULL means every method but CONNECT and TRACE).
 * Normalisation as docs/design.md: trim, lower-case the host, drop a trailing '/';
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
        char *query;  /* the text after '?' (fragment excluded), or NULL */
        bool host_is_ip;
} url_parts;

/* Parses an absolute http(s) URL strictly: no userinfo, no spaces, control
 * or non-ASCII characters, no backslashes, a port in 1-65535, a non-empty
 * host; percent-escapes must be well formed. Host names that only look like
 * numbers ("2130706433", "0x7f.1", "0177.0.0.1") are refused: an address must
 * be a canonical dotted quad or a bracketed IPv6 literal, so that no other
 * parser can read the host as an address this one did not check. A path
 * that some server could resolve elsewhere than its text says is refused
 * with -EACCES (the guest's PermissionError), so that a path prefix rule
 * cannot be escaped: a '.' or '..' segment, also with ";" parameters
 * ("..;/"), a backslash, or an encoded '.', '/' or '\' (%2E, %2F, %5C) at
 * any depth of encoding ("%252e"). Other escapes ("%20") pass unchanged.
 * The fragment is dropped. */
int allowlist_parse_url(const char *url, url_parts *ret, airlock_error *err);
void allowlist_url_free(url_parts *u);
/* The URL again, normalised: scheme://host[:port]path[?query], the port only
 * when it is not the scheme's default (always with always_port), IPv6 in
 * brackets. Malloc'd, NULL when out of memory. */
char *allowlist_format_url(const url_parts *u, bool with_query, bool always_port);

/* Checks a request. Returns 0 and the matching entry, or -EACCES with a
 * message naming the method, the URL and the entry that would allow it. */
int allowlist_check(const net_allowlist *al, const char *method, const url_parts *url,
                    const allow_entry **ret_entry, airlock_error *err);

/* Canonical text of the list, for fingerprints. */
char *allowlist_fingerprint_text(const net_allowlist *al);

#endif
