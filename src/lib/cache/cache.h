/* The sandbox cache behind airlock_cache_*: LRU and idle eviction,
 * rebuilding a sandbox whose template died, and a cap on runs in parallel
 * (cache.c), keyed by configuration fingerprints (cache_fingerprint.c) whose
 * tree signatures the tree watch keeps (cache_trees.c). */
#ifndef AIRLOCK_CACHE_H
#define AIRLOCK_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "airlock.h"
#include "core/util.h"

#define CACHE_DEFAULT_MAX_SANDBOXES 4
#define CACHE_DEFAULT_IDLE_S        300.0
#define CACHE_DEFAULT_MAX_PARALLEL  8
/* Files up to this size are hashed by content in the tree signature, so an
 * edit that keeps size and mtime is still seen; larger ones by metadata. */
#define CACHE_CONTENT_THRESHOLD (64u << 10)

/* The canonical text of everything that changes what a sandbox is: tools,
 * approval mode, workspace and mounts with the signatures of their trees,
 * allow-list, limits and preloads. Two configurations whose texts are equal
 * make interchangeable sandboxes. The tree signatures are recomputed on every
 * call (this function keeps no watches; the cache's runs do, fsx/fsx_watch.h),
 * so an edit in the workspace changes the text. Fails (naming the path)
 * when a tree cannot be signed, e.g. because it holds a symlink. */
int cache_fingerprint(const airlock_config *cfg, char **ret_text, airlock_error *err);
/* Whether the cache gives cfg a template shared with other workspaces,
 * each run's workspace and mounts attached to its copy (true unless cfg
 * has upstream MCP servers, which are a sandbox's own). */
bool cache_late_input(const airlock_config *cfg);
struct sbx_input;

/* The sandbox operations the cache uses. Tests replace them with fakes to
 * check eviction and rebuilding without starting real sandboxes. */
typedef struct cache_ops {
        /* prev: the sandbox of the same configuration being replaced
         * (its trees changed), whose staged copy the new one may reuse; it
         * stays open until this returns. NULL for none. */
        int (*sandbox_new)(const airlock_config *cfg, airlock_sandbox *prev, airlock_sandbox **ret,
                           airlock_error *err);
        /* Called, under the cache's lock, on the stale version a build
         * will reuse when nothing else holds it (no run, no session) and it
         * can never be used again: its staged tree may be taken over
         * (sbx_sandbox_yield_staging). NULL: never. Replacing sandbox_new
         * without it leaves it NULL. */
        void (*sandbox_yield)(airlock_sandbox *prev);
        /* The runs get the call's watch (al_watch, core/util.h), which
         * the cache may have fired already (sbx_run_watched). */
        int (*sandbox_run)(airlock_sandbox *sb, const char *code, size_t len,
                           const airlock_run_options *opts, al_watch *w, airlock_result **ret,
                           airlock_error *err);
        void (*sandbox_close)(airlock_sandbox *sb);
        /* Called about once a second, under the cache's lock, on each
         * sandbox that no run holds: ends the ready copies a burst of runs
         * left over (sbx_sandbox_trim). Replacing sandbox_new without it
         * leaves it NULL: never. */
        void (*sandbox_trim)(airlock_sandbox *sb);
        uint64_t (*now_ns)(void); /* monotonic clock */
        /* One template, many workspaces (sandbox/input.h): a sandbox whose
         * runs and sessions bring their own staged input. Replacing
         * sandbox_new without them leaves them NULL: every workspace then
         * gets a sandbox of its own, as before. */
        int (*sandbox_new_late)(const airlock_config *cfg, airlock_sandbox **ret,
                                airlock_error *err);
        int (*sandbox_run_input)(airlock_sandbox *sb, struct sbx_input *in, const char *code,
                                 size_t len, const airlock_run_options *opts, al_watch *w,
                                 airlock_result **ret, airlock_error *err);
        int (*session_open_input)(airlock_sandbox *sb, struct sbx_input *in, airlock_session **ret,
                                  airlock_error *err);
} cache_ops;

/* Replaces the operations (NULL members keep the real ones). Call before the
 * first run. */
void cache_set_ops(airlock_cache *cache, const cache_ops *ops);
/* Runs allowed at once across every sandbox of the cache (default 8). */
void cache_set_max_parallel(airlock_cache *cache, unsigned n);

/* Introspection for tests and diagnostics. */
typedef struct cache_stats {
        unsigned sandboxes;     /* entries in the LRU list */
        unsigned running;       /* runs in progress */
        uint64_t created;       /* sandboxes made so far */
        uint64_t closed;        /* sandboxes closed so far */
        uint64_t hits;          /* runs that found their sandbox */
        uint64_t rebuilds;      /* sandboxes rebuilt after their template died */
        uint64_t tree_walks;    /* calls that walked the workspace and mount trees */
        uint64_t tree_checks;   /* calls that found them unchanged from inotify alone */
        uint64_t inputs_staged; /* workspace versions staged for late-input sandboxes */
        /* Their staging work: files a delta copied, or every file a whole
         * staging went through (sbx_input_files_staged). */
        uint64_t input_files_staged;
} cache_stats;

/* The watches on the workspace and mount trees (fsx/fsx_watch.h): a lower cap
 * on watches per tree set (0: the default, FSX_WATCH_MAX_DEFAULT) and the
 * safety-net period (0: FSX_WATCH_PERIOD_NS), for tests. */
void cache_set_watch_knobs(airlock_cache *cache, unsigned max_watches, uint64_t period_ns);

void cache_get_stats(airlock_cache *cache, cache_stats *ret);
/* A stale version of a configuration (its trees changed), and a stale
 * version of a late input, is closed on a thread of its own, beside the run
 * that replaced it: this waits until every such close is done
 * (airlock_cache_close waits for them too). */
void cache_wait_later_closes(airlock_cache *cache);
/* Evicts sandboxes idle longer than the idle timeout now (the reaper thread
 * and every cache call do this too). */
void cache_reap(airlock_cache *cache);

#endif
