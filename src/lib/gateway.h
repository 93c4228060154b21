/* The HTTP gateway: performs a guest's request on the host with libcurl after
 * the allow-list and address checks. */
#ifndef AIRLOCK_GATEWAY_H
#define AIRLOCK_GATEWAY_H

#include <jansson.h>

#include "airlock.h"
#include "netpolicy.h"

/* Performs request, a JSON object {"method", "url", "headers": {name: value},
 * "body_base64"} from the guest. Checks: method and URL against the list
 * (-EACCES, message names method, URL and the missing entry); header names
 * and values free of CR/LF/NUL; request body within lim->http_max_request;
 * the resolved addresses (a name resolving to loopback, private, link-local,
 * unique-local, multicast or metadata addresses is refused unless the entry
 * names that address or "localhost"), and the connection is pinned to the
 * checked address. Redirects are returned, not followed. The response body
 * is capped at lim->http_max_response and the whole request at
 * lim->http_timeout_s; exceeding either is an error.
 * On success *ret_response is {"status": int, "headers": {lower-case name:
 * value}, "body_base64": "..."}. Thread-safe. */
int gateway_request(const net_allowlist *al, const airlock_limits *lim, const json_t *request,
                    json_t **ret_response, airlock_error *err);

#endif
