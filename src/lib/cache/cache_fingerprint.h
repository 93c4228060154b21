/* The fingerprint of a configuration: the canonical text of everything that
 * makes a sandbox what it is, which keys the cache (cache.c). Its first part
 * is what the configuration says, made once per version of it; the rest
 * are the signatures of its trees (cache_trees.h) and of the Python
 * installation, read at every call. */
#ifndef AIRLOCK_CACHE_FINGERPRINT_H
#define AIRLOCK_CACHE_FINGERPRINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "airlock.h"
#include "cache/cache_trees.h"
#include "core/util.h"

#define CACHE_FINGERPRINT_CAP (64u << 20)

/* Appends "name:length:value\n": no value can be mistaken for the boundary
 * of another, whatever bytes it holds. */
int cache_fp_field(dynbuf *b, const char *name, const char *value);

/* The fingerprint text of cfg, in parts: *ret_text and *ret_static_len,
 * the length of its part without tree signatures (two keys that share it
 * are two versions of one configuration, and the older one is stale).
 * With a late input (cache_late_input) and ret_input, the trees' key and
 * signatures go to *ret_input (NULL without trees) instead: the input's
 * version, apart from the sandbox's key. trees (may be NULL) signs the
 * trees through their watchers; takes_late false (a cache of fakes) keys
 * each version of the trees to a sandbox of its own. Errors name the path
 * at fault, or are -ENOMEM or -E2BIG. */
int cache_fingerprint_parts(cache_trees *trees, bool takes_late, const airlock_config *cfg,
                            char **ret_text, size_t *ret_static_len, char **ret_input,
                            airlock_error *err);

/* FNV-1a of s, to skip most string compares between keys. */
uint64_t cache_fnv1a(const char *s);

#endif
