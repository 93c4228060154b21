/* The fingerprint of a configuration (cache_fingerprint.h): what it says,
 * as text made once per version of it, then the signatures of its trees and
 * of the Python installation, read at every call. */
#include "cache/cache_fingerprint.h"

#include <errno.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "cache/cache_trees.h"
#include "config/config.h"
#include "config/limits.h"
#include "config/pypath.h"
#include "fsx/fsx.h"
#include "host/allowlist.h"
#include "host/tools.h"
#include "sandbox/input.h"
#include "sandbox/sandbox.h"

/* Every field is written as "name:length:value\n", so no value can be
 * mistaken for the boundary of another whatever bytes it holds. */
int cache_fp_field(dynbuf *b, const char *name, const char *value)
{
        size_t n = value ? strlen(value) : 0;
        int r = dynbuf_appendf(b, "%s:%zu:", name, n);
        if (r >= 0 && n)
                r = dynbuf_append(b, value, n);
        if (r >= 0)
                r = dynbuf_append(b, "\n", 1);
        return r;
}

/* Every field of airlock_limits is in the text, generated from the limits
 * table, which limits.c checks against the struct: a field added to the
 * struct alone fails the build, so two configurations that differ only in
 * it can never share a sandbox. */
static int fp_limits(dynbuf *b, const airlock_limits *l)
{
        _cleanup_free_ char *text = limits_fingerprint_text(l);
        return text ? cache_fp_field(b, "limits", text) : -ENOMEM;
}

/* The same for the configuration itself: a new member changes what a sandbox
 * is, so it belongs in the fingerprint (all but fp_memo, the fingerprint's
 * own memo), and its setter must call config_changed(). */
_Static_assert(sizeof(struct airlock_config) == 288,
               "update config_text for the new airlock_config member");

/* What the configuration says, as text (the first part described below):
 * 0 and *ret, or -ENOMEM or -E2BIG (over CACHE_FINGERPRINT_CAP). */
static int config_text(const airlock_config *cfg, char **ret)
{
        bool late = cache_late_input(cfg);
        dynbuf b;
        dynbuf_init(&b, CACHE_FINGERPRINT_CAP);
        _cleanup_free_ char *tools = tools_fingerprint_text(cfg->tools);
        _cleanup_free_ char *allow = allowlist_fingerprint_text(cfg->allow);
        /* Names, targets and a keyed digest of each value, never a value:
         * a rotated value is a new configuration. */
        _cleanup_free_ char *secrets = secrets_fingerprint_text(cfg->secrets);
        int r = (tools && allow && secrets) ? 0 : -ENOMEM;
        if (r >= 0 && *secrets)
                r = cache_fp_field(&b, "secrets", secrets);
        if (r >= 0)
                r = cache_fp_field(&b, "tools", tools);
        if (r >= 0)
                r = dynbuf_appendf(&b, "approval:%d\n", (int)cfg->approval);
        if (r >= 0)
                r = dynbuf_appendf(&b, "auto_figures:%d\n", !cfg->no_auto_figures);
        if (r >= 0)
                r = dynbuf_appendf(&b, "input_writable:%d\n", cfg->input_writable);
        if (r >= 0)
                r = cache_fp_field(&b, "allow", allow);
        if (r >= 0)
                r = fp_limits(&b, &cfg->limits);
        for (size_t i = 0; r >= 0 && i < cfg->n_preloads; i++)
                r = cache_fp_field(&b, "preload", cfg->preloads[i]);
        for (size_t i = 0; r >= 0 && i < cfg->n_python_paths; i++)
                r = cache_fp_field(&b, "python_path", cfg->python_paths[i]);
        /* With a late input, the workspace and mounts are the input's key
         * (cache_input), not the sandbox's. */
        if (r >= 0 && cfg->workspace && !late)
                r = cache_fp_field(&b, "workspace", cfg->workspace);
        /* Upstream MCP servers: each one's object and where its relative
         * paths resolve, and the approver by its addresses. Two
         * configurations that differ here never share a sandbox, and so
         * never share a server process. */
        for (size_t i = 0; r >= 0 && i < cfg->servers.n; i++) {
                const mcp_spec *sp = &cfg->servers.v[i];
                _cleanup_free_ char *j = json_dumps(sp->json, JSON_COMPACT | JSON_SORT_KEYS);
                r = j ? dynbuf_appendf(&b, "server:%zu:%s:%zu:%s:%zu:%s\n", strlen(sp->name),
                                       sp->name, strlen(sp->dir), sp->dir, strlen(j), j)
                      : -ENOMEM;
        }
        if (r >= 0 && cfg->approver) {
                union {
                        airlock_tool_approver_fn fn;
                        void *p;
                } u = {.fn = cfg->approver};
                r = dynbuf_appendf(&b, "approver:%p:%p\n", u.p, cfg->approver_data);
        }
        for (size_t i = 0; r >= 0 && !late && i < cfg->n_mounts; i++) {
                r = cache_fp_field(&b, "mount_dest", cfg->mounts[i].dest);
                if (r >= 0)
                        r = cache_fp_field(&b, "mount_host", cfg->mounts[i].host);
        }
        if (r >= 0)
                r = dynbuf_appendf(&b, "late_input:%d\n", late);
        if (r < 0) {
                dynbuf_free(&b);
                return r;
        }
        *ret = dynbuf_take(&b, NULL);
        return *ret ? 0 : -ENOMEM;
}

/* The signature fields of cfg's trees, in the order of the walk (the
 * workspace, then each mount). */
static int fp_trees(cache_trees *trees, const airlock_config *cfg, dynbuf *b, const fsx_limits *lim,
                    airlock_error *err)
{
        size_t n = (cfg->workspace ? 1 : 0) + cfg->n_mounts;
        if (!n)
                return 0;
        char(*hex)[FSX_SIGNATURE_HEX] = calloc(n, sizeof(*hex));
        if (!hex)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        int r = cache_trees_sign(trees, cfg, lim, hex, err);
        for (size_t i = 0; r >= 0 && i < n; i++)
                r = cache_fp_field(b, "signature", hex[i]);
        free(hex);
        return r;
}

/* The text has two parts: what the configuration says (tools, approval,
 * allow-list, limits, preloads, the paths of the workspace and mounts), then
 * the signatures of the trees at those paths. *ret_static_len is the length
 * of the first part: two keys that share it are two versions of one
 * configuration, and the older one is stale.
 *
 * The first part changes only through a setter, which drops the memo in cfg,
 * so it is made once per version of the configuration and not at every run.
 * The trees can change at any time, so their signatures are read every time,
 * and so is the signature of the Python installation and the --python-path
 * folders (pypath_env_signature, some 20 us). */
int cache_fingerprint_parts(cache_trees *trees, bool takes_late, const airlock_config *cfg,
                            char **ret_text, size_t *ret_static_len, char **ret_input,
                            airlock_error *err)
{
        /* The memo is a cache inside a configuration that callers share
         * read-only: the object is not const, only this view of it. */
        _Atomic(char *) *memo = &((airlock_config *)cfg)->fp_memo;
        char *text = atomic_load(memo);
        if (!text) {
                char *made = NULL;
                int r = config_text(cfg, &made);
                if (r < 0)
                        return al_error(err, r, NULL, "configuration fingerprint: %s",
                                        strerror(-r));
                /* Two runs may make it at once; the first one's stays. */
                text = NULL;
                if (atomic_compare_exchange_strong(memo, &text, made))
                        text = made;
                else
                        free(made);
        }
        dynbuf b;
        dynbuf_init(&b, CACHE_FINGERPRINT_CAP);
        int r = dynbuf_append(&b, text, strlen(text));
        if (r < 0) {
                dynbuf_free(&b);
                return al_error(err, r, NULL, "configuration fingerprint: %s", strerror(-r));
        }
        size_t static_len = b.len;
        const fsx_limits lim = sbx_stage_limits(cfg);
        /* The signatures are the part that can fail on bad input (a link in
         * the workspace, a missing mount), and their error names the path.
         * With a late input they are the input's version, apart from the
         * sandbox's key: the tree paths and caps, then the signatures. */
        dynbuf in;
        dynbuf_init(&in, CACHE_FINGERPRINT_CAP);
        bool late = cache_late_input(cfg);
        /* A cache whose sandboxes cannot take late inputs (fakes in tests)
         * keys each version of the trees to a sandbox of its own. */
        if (!takes_late)
                ret_input = NULL;
        if (late && (cfg->workspace || cfg->n_mounts)) {
                _cleanup_free_ char *tk = cache_tree_key(cfg, &lim);
                r = tk ? dynbuf_append(&in, tk, strlen(tk)) : -ENOMEM;
                if (r >= 0)
                        r = fp_trees(trees, cfg, &in, &lim, err);
        } else if (!late) {
                r = fp_trees(trees, cfg, &b, &lim, err);
        }
        /* The Python installation and the --python-path folders: a
         * template that preloaded the old version of a package must not
         * serve runs that would import the rest of it lazily from the new
         * one. */
        char py[17];
        if (r >= 0) {
                pypath_env_signature(cfg->python_paths, cfg->n_python_paths, py);
                r = cache_fp_field(&b, "python", py);
        }
        if (r < 0) {
                dynbuf_free(&b);
                dynbuf_free(&in);
                if (r == -ENOMEM || r == -E2BIG)
                        return al_error(err, r, NULL, "configuration fingerprint: %s",
                                        strerror(-r));
                return r;
        }
        if (ret_input) {
                *ret_input = in.len ? dynbuf_take(&in, NULL) : NULL;
        } else if (in.len) {
                /* One text for both: the caller compares configurations. */
                r = dynbuf_append(&b, in.data, in.len);
                if (r < 0) {
                        dynbuf_free(&b);
                        dynbuf_free(&in);
                        return al_error(err, r, NULL, "configuration fingerprint: %s",
                                        strerror(-r));
                }
        }
        dynbuf_free(&in);
        *ret_text = dynbuf_take(&b, NULL);
        if (ret_static_len)
                *ret_static_len = static_len;
        return 0;
}

int cache_fingerprint(const airlock_config *cfg, char **ret_text, airlock_error *err)
{
        return cache_fingerprint_parts(NULL, true, cfg, ret_text, NULL, NULL, err);
}

bool cache_late_input(const airlock_config *cfg)
{
        /* Upstream MCP servers are the sandbox's (started with it, their
         * state shared by its runs): a configuration with servers keeps a
         * sandbox per workspace, so that no two workspaces (tenants) ever
         * share a server process. */
        return cfg->servers.n == 0;
}

uint64_t cache_fnv1a(const char *s)
{
        uint64_t h = 0xcbf29ce484222325ull;
        for (; *s; s++) {
                h ^= (unsigned char)*s;
                h *= 0x100000001b3ull;
        }
        return h;
}
