/* SHA-256 (FIPS 180-4), for names derived from secrets: the tenant name of
 * a token line without one (tenants.c) must not reveal the token, and must
 * be the same in every run of the server (a tenant's workspace folder is
 * named by it), so neither the process-keyed hashes nor the library's tree
 * hash fit. Small and unoptimised: it hashes a token per tenant at load,
 * and a peer request's body and signature. */
#ifndef AIRLOCK_MCP_SHA256_H
#define AIRLOCK_MCP_SHA256_H

#include <stddef.h>
#include <stdint.h>

void mcp_sha256(const void *data, size_t len, uint8_t out[32]);
/* HMAC-SHA256 (RFC 2104) of msg under key: airlock serve's peers sign the
 * requests they forward to each other with it (http/serve_peer.c). */
void mcp_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t len, uint8_t out[32]);

#endif
