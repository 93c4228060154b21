/* The HTTP gateway: performs a guest's request on the host with libcurl after
 * the allow-list and address checks. */
#ifndef AIRLOCK_GATEWAY_H
#define AIRLOCK_GATEWAY_H

#include <jansson.h>
#include <stdint.h>
#include <sys/socket.h>

#include "airlock.h"
#include "host/allowlist.h"
#include "host/secrets.h"

/* Performs request, a JSON object {"method", "url", "headers": {name: value},
 * "body_base64"} from the guest. Checks: method and URL against the list
 * (-EACCES, message names method, URL and the missing entry); header names
 * and values free of CR/LF/NUL; request body within lim->http_max_request;
 * the resolved addresses (a name resolving to loopback, private, link-local,
 * unique-local, multicast or metadata addresses is refused unless the entry
 * names that address or "localhost"), and the connection is pinned to the
 * checked address. Redirects are returned, not followed. The response body
 * is capped at lim->http_max_response and the whole request at
 * lim->http_timeout_s; exceeding either is an error. lim is required
 * (-EINVAL without it); only those three fields are read.
 * On success *ret_response is {"status": int, "headers": {lower-case name:
 * value}, "body_base64": "..."}. Thread-safe. */
int gateway_request(const net_allowlist *al, const airlock_limits *lim, const json_t *request,
                    json_t **ret_response, airlock_error *err);

/* gateway_request() bounded by the run it serves as well: deadline_ns is a
 * CLOCK_MONOTONIC time (al_now_ns()) or 0 for none, and the request ends in
 * -ETIMEDOUT when it passes first; cancel_fd, when >= 0, ends it in
 * -ECANCELED as soon as it becomes readable (an eventfd or a pipe). */
int gateway_request_ex(const net_allowlist *al, const airlock_limits *lim, const json_t *request,
                       uint64_t deadline_ns, int cancel_fd, json_t **ret_response,
                       airlock_error *err);

/* What one request did, for the run's usage record: the method, the URL
 * without its query (the query may carry anything), the status (0 when no
 * response came), the body bytes each way, and whether the allow-list let
 * it through. */
typedef struct gateway_record {
        char method[33];
        char url[256];
        int status;
        bool allowed;
        uint64_t bytes_sent;
        uint64_t bytes_received;
        uint64_t start_ns;
        uint64_t duration_ns;
} gateway_record;

/* gateway_request_ex() with the sandbox's secrets (NULL: none): a
 * secret's placeholder in a header value (and the query or body where its
 * rule says so) becomes its value on a request that the list allows and
 * that matches the secret's targets, checked anew for every request (so for
 * every hop of a redirect the guest follows); elsewhere it is sent
 * unchanged. The response's header names, values and body, and any error
 * message, have every value (raw, base64, base64url, percent-encoded,
 * JSON-escaped) replaced by its placeholder. Copies of a value that the
 * gateway makes are zeroed before they are freed. With rec, fills it in
 * whatever the outcome. */
int gateway_request_full(const net_allowlist *al, const secret_store *ss, const airlock_limits *lim,
                         const json_t *request, uint64_t deadline_ns, int cancel_fd,
                         gateway_record *rec, json_t **ret_response, airlock_error *err);

/* The name of the built-in exception the guest raises for r (a negative
 * errno from gateway_request()): the kind WIRE_ERRORS (core/wire_table.h,
 * the one table from an errno to a guest exception) gives it, and
 * WIRE_KIND_OS for any other value. */
const char *gateway_guest_exception(int r);

/* The kind of a special address ("loopback", "private", "link-local",
 * "metadata", ...), or NULL for an ordinary public address. IPv4-mapped,
 * IPv4-compatible, NAT64 and 6to4 IPv6 forms are judged by the IPv4 address
 * they carry. */
const char *gateway_address_kind(const struct sockaddr *sa);

/* Test hook: replaces the resolver (getaddrinfo) for every later request;
 * NULL restores it. fn fills up to max addresses (port unset) and returns
 * their number, or a negative errno. Not thread-safe; tests only. */
typedef int (*gateway_resolver_fn)(const char *host, struct sockaddr_storage *addrs, size_t max);
void gateway_set_resolver(gateway_resolver_fn fn);

#endif
