/* Tenants of `airlock serve`: what one bearer token owns (or, without
 * tokens, the one configured name): its workspace, its sessions, its runs'
 * files, its quotas. The tokens file (--tokens FILE) names them, a line
 * each:
 *
 *   TOKEN                          one tenant of its own, named from the
 *                                  token (tenant_name_of_token)
 *   TOKEN TENANT [KEY=VALUE ...]   the tenant TENANT, with its own quotas
 *
 * blank lines and lines starting with '#' skipped; fields separated by
 * blanks. Several tokens may name one tenant. KEY is one of max-sessions,
 * max-runs, max-queue (its quotas, below the server-wide caps), max-files
 * and max-bytes (its workspace's caps); a key given on two lines of one
 * tenant must have one value. docs/design.md ("Tenants") is the contract. */
#ifndef AIRLOCK_MCP_TENANTS_H
#define AIRLOCK_MCP_TENANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "airlock.h"

#define TENANT_NAME_MAX  64 /* [A-Za-z0-9][A-Za-z0-9._-]{0,63} */
#define TENANT_MAX_LINES 1024
#define TENANT_TOKEN_MAX 512
/* The shortest token the tokens file takes, and the start of the
 * placeholders of the examples (deploy/k8s/secret.yaml), which it refuses. */
#define TENANT_TOKEN_MIN         16
#define TENANT_TOKEN_PLACEHOLDER "REPLACE-WITH-"

/* The per-tenant overrides a line may give. */
enum tenant_key {
        TENANT_MAX_SESSIONS,
        TENANT_MAX_RUNS,
        TENANT_MAX_QUEUE,
        TENANT_MAX_FILES,
        TENANT_MAX_BYTES,
        TENANT_KEYS
};

/* The key's name in the file ("max-sessions"). */
const char *tenant_key_name(enum tenant_key k);

typedef struct tenant_def {
        char name[TENANT_NAME_MAX + 1];
        bool set[TENANT_KEYS];
        uint64_t value[TENANT_KEYS];
} tenant_def;

typedef struct token_def {
        char *token;
        size_t len;
        size_t tenant; /* index into tenant_table.tenants */
} token_def;

typedef struct tenant_table {
        token_def *tokens;
        size_t n_tokens;
        tenant_def *tenants;
        size_t n_tenants;
} tenant_table;

/* Whether name is a tenant name: [A-Za-z0-9][A-Za-z0-9._-]{0,63}. */
bool tenant_name_valid(const char *name, size_t n);

/* The name of the tenant of a token line without one: "t" and the first 16
 * hex digits of SHA-256("airlock tenant\0" TOKEN). The same in every run of
 * the server (it names the tenant's workspace folder), and it does not
 * reveal the token (a token is a secret with the entropy of a random
 * string; the digest cannot be turned back into it). */
void tenant_name_of_token(const char *tok, size_t n, char out[TENANT_NAME_MAX + 1]);

/* Whether name has the form tenant_name_of_token gives ("t" and 16
 * lowercase hex digits): a name the tokens file may not give a tenant. */
bool tenant_name_is_derived(const char *name);

/* Reads the tokens file at path into ret (which the caller frees with
 * tenants_free). Returns the number of tokens, or -errno with err filled
 * with one message naming the file and the line at fault ("--tokens F:3:
 * ..."); nothing is kept on failure. At most TENANT_MAX_LINES tokens of at
 * most TENANT_TOKEN_MAX bytes; a token repeated for the same tenant counts
 * once, for another tenant it is an error. */
int tenants_load(const char *path, tenant_table *ret, airlock_error *err);
void tenants_free(tenant_table *t);
/* The tenant called name, or NULL. */
const tenant_def *tenants_find(const tenant_table *t, const char *name);

#endif
