/* Secrets at the egress: values that the host holds and the guest never
 * sees. The guest has a placeholder per secret; the gateway puts the value
 * in place of the placeholder only on requests to the secret's targets, and
 * puts the placeholder back wherever a response carries the value. */
#ifndef AIRLOCK_SECRETS_H
#define AIRLOCK_SECRETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "airlock.h"
#include "host/allowlist.h"

#define SECRETS_MAX        64
#define SECRET_NAME_MAX    64
#define SECRET_VALUE_MIN   8
#define SECRET_VALUE_MAX   8192
#define SECRET_TARGETS_MAX 16
/* A rewrite grows a text by at most this much (-E2BIG past it): a body
 * full of placeholders, or a response full of short values, would
 * otherwise multiply the host's memory. */
#define SECRETS_GROWTH_MAX      (1u << 20)
#define SECRET_PLACEHOLDER_SIZE (sizeof("airlock-secret-") + SECRET_NAME_MAX + 1 + 32)

typedef struct secret_store secret_store;

int secrets_new(secret_store **ret, airlock_error *err);
/* Zeroes every value and every encoded form of it before freeing. */
void secrets_free(secret_store *s);
int secrets_clone(const secret_store *s, secret_store **ret, airlock_error *err);

/* Adds the secret name (letters, digits and '_', not starting with a
 * digit) with value (SECRET_VALUE_MIN to SECRET_VALUE_MAX bytes, no control
 * characters: it goes into header values) and targets (NULL-terminated,
 * each "TARGET[=METHODS]" in the allow-list's syntax, at least one). A
 * secret of that name already there is replaced: that is rotation. flags:
 * AIRLOCK_SECRET_IN_*. Errors name the secret, never the value. */
int secrets_add(secret_store *s, const char *name, const void *value, size_t len, unsigned flags,
                const char *const *targets, airlock_error *err);

/* 0 when name is a valid secret name, else -EINVAL. */
int secrets_add_check_name(const char *name);

size_t secrets_count(const secret_store *s);
const char *secrets_name(const secret_store *s, size_t i);
/* The targets of the i-th secret (for the tool description). */
const net_allowlist *secrets_targets(const secret_store *s, size_t i);

/* Whether the i-th secret is the cluster secret (its target "peer"): it
 * has no placeholder, and the tool description does not list it. */
bool secrets_is_peer(const secret_store *s, size_t i);
/* Contract: the value of the one secret whose target is "peer", the only
 * value airlock serve signs peer requests with (0; it belongs to s and is
 * not NUL-terminated), or -ENOENT. No other secret is ever returned, and
 * this secret is returned to nothing else. */
int secrets_peer_value(const secret_store *s, const unsigned char **ret, size_t *ret_len);

/* The placeholder of the secret name, whether or not a store holds it:
 * "airlock-secret-NAME-" and 32 hex digits of a keyed hash (SipHash-2-4,
 * twice) of the name under a key drawn from getrandom once per process. So
 * it is stable for the life of the process, also across sandbox rebuilds,
 * distinct per name, and tells nothing about the value. buf holds at least
 * SECRET_PLACEHOLDER_SIZE bytes. */
void secrets_placeholder(const char *name, char *buf);

/* The placeholder if s holds name (0), else -ENOENT (also for the cluster
 * secret, which has none). */
int secrets_lookup(const secret_store *s, const char *name, char *buf);

/* Contract: the value of the secret name for the upstream MCP server
 * server, at url (NULL for a server started on the host), whose "env" or
 * "headers" name it (mcp/). Only the secret's own targets decide: 0 when
 * one is "mcp:SERVER" with this server's name or, for a server at a URL, an
 * HTTP target that allows a POST to that URL (a bare host target only over
 * https: see url_target); -EACCES otherwise, with err naming the secret and
 * its targets (never the value), so that a servers file, which may come
 * from a repository, cannot send a secret anywhere it was not scoped to;
 * -ENOENT when no secret has that name. The value belongs to s and is not
 * NUL-terminated. */
int secrets_value_for_server(const secret_store *s, const char *name, const char *server,
                             const char *url, const unsigned char **ret, size_t *ret_len,
                             airlock_error *err);

/* Text for the cache fingerprint: names, flags, targets and a keyed hash of
 * each value (never the value), so that a rotated value is a new
 * configuration. Malloc'd; NULL when out of memory. */
char *secrets_fingerprint_text(const secret_store *s);

/* Where a request carries placeholders. */
typedef enum {
        SECRET_IN_HEADER = 0,
        SECRET_IN_QUERY = AIRLOCK_SECRET_IN_QUERY,
        SECRET_IN_BODY = AIRLOCK_SECRET_IN_BODY,
} secret_place;

/* Replaces, in data, the placeholder of each secret whose targets allow
 * method and url and whose rule allows place (headers always) by its value.
 * Returns 0 when nothing changed (*ret untouched), 1 with *ret and *ret_len a
 * malloc'd copy (NUL-terminated; the caller zeroes it before freeing: it
 * holds a value), -ENOMEM, or -E2BIG when the copy would be more than
 * SECRETS_GROWTH_MAX longer than data. Placeholders of secrets that do not match stay as
 * they are: they are worthless outside the gateway. The caller has already
 * checked the request against the sandbox's allow-list. */
int secrets_substitute(const secret_store *s, const char *method, const url_parts *url,
                       secret_place place, const char *data, size_t len, char **ret,
                       size_t *ret_len);

/* Replaces in data every occurrence of a value by its placeholder: the
 * value as it is (ASCII case aside), escaped character by character in any
 * mix of the ways servers escape text (percent-encoding with any set of
 * characters kept, '+' for a space, percent-encoded again; JSON, JavaScript
 * and Python escapes, every character or some; HTML character references,
 * named, decimal or hex; Latin-1 read and written as UTF-8), in base64 of
 * either alphabet at any alignment, wrapped into lines or escaped, and in
 * hex and UTF-16. Same returns as secrets_substitute; the copy holds no
 * value. */
int secrets_scrub(const secret_store *s, const char *data, size_t len, char **ret, size_t *ret_len);

/* The text was cut from a longer one at its start (HEAD) or end (TAIL). */
#define SECRETS_CUT_HEAD 1u
#define SECRETS_CUT_TAIL 2u

/* secrets_scrub() on a text cut from a longer one (cut: SECRETS_CUT_*): at
 * a cut edge, what is left of a value (EDGE_MIN = 4 bytes of it or more, in
 * any of the forms above) is a match too, so that a cut which the guest
 * can place (by the length of what comes before) cannot pass on a value's
 * start in one text and its end in another. The rule is to scrub before
 * cutting; this is for a text that was cut before the host could see the
 * rest (a capped pipe, a library's fixed buffer). */
int secrets_scrub_cut(const secret_store *s, const char *data, size_t len, unsigned cut, char **ret,
                      size_t *ret_len);

/* secrets_scrub() on a NUL-terminated text in a buffer of size bytes, in
 * place (truncated if the placeholders make it longer). A text that fills
 * the buffer is taken as cut at its end (secrets_scrub_cut()). */
void secrets_scrub_text(const secret_store *s, char *text, size_t size);

/* secrets_scrub() on the JSON text of *v (so the JSON escapes of a value
 * are found too, in keys and strings at any depth): when a value was there,
 * *v is replaced by the scrubbed value. Returns 0 (unchanged), 1
 * (replaced) or -errno with *v left as it was, which the caller must then
 * not pass on (it may hold a value). For what reaches the guest from
 * elsewhere than a response: a host tool's result. */
typedef struct json_t json_t;
int secrets_scrub_json(const secret_store *s, json_t **v);

/* secrets_scrub() on a malloc'd NUL-terminated text: *text is replaced by
 * the scrubbed copy when a value was there. Returns as secrets_scrub_json. */
int secrets_scrub_string(const secret_store *s, char **text);

/* Zeroes and frees a buffer that held a value. */
void secrets_wipe_free(void *p, size_t len);

#endif
