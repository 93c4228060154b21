/* The cache's tree watch: the change detection of the workspace and mount
 * trees that configurations name, one watcher (fsx/fsx_watch.h) per set of
 * trees, shared by every configuration and every version of the sandbox
 * that names them. Kept apart from the cache's entries: an entry is
 * replaced when its trees change, and the watches must outlive that.
 *
 * Locking: the set list has a mutex of its own, never held while a tree is
 * walked or a watcher is closed (closing an inotify instance waits for the
 * kernel). The cache's own lock is never held while this one is taken. */
#ifndef AIRLOCK_CACHE_TREES_H
#define AIRLOCK_CACHE_TREES_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "airlock.h"
#include "fsx/fsx.h"

typedef struct cache_tree_set cache_tree_set;

typedef struct cache_trees {
        pthread_mutex_t lock;
        cache_tree_set *list; /* most recently used first, at most max_unused unused */
        unsigned n;
        unsigned max_unused;      /* the cache's max_sandboxes */
        uint64_t idle_ns;         /* an unused watcher older than this goes (0: never) */
        unsigned watch_max;       /* 0: FSX_WATCH_MAX_DEFAULT */
        uint64_t watch_period_ns; /* 0: FSX_WATCH_PERIOD_NS */
        bool shared_max_set;      /* shared_max lowers FSX_SHARED_WALK_MAX */
        uint64_t shared_max;
        uint64_t (*now_ns)(void); /* the cache's clock (tests replace it) */
        uint64_t walks;           /* calls that walked the trees */
        uint64_t checks;          /* calls answered from the watcher's events alone */
        /* The background walker (one thread, started at the first tree set
         * on shared storage): see cache_trees.c. */
        pthread_t walker;
        pthread_cond_t walker_wake;
        bool walker_started, walker_stop, walker_failed;
} cache_trees;

/* Tree sets on shared storage the background walker walks: the most
 * recently used ones, used by a call within CACHE_BG_ACTIVE_NS. Calls of
 * the others walk their trees themselves, as without the walker. */
#define CACHE_BG_SETS_MAX  64u
#define CACHE_BG_ACTIVE_NS (60ull * 1000000000ull)

void cache_trees_init(cache_trees *t, unsigned max_unused, uint64_t idle_ns,
                      uint64_t (*now_ns)(void));
/* Closes every watcher. Nothing may use t any more. */
void cache_trees_destroy(cache_trees *t);

/* The key of the tree set of cfg: the caps the signatures are made with,
 * then every path signed, in order, as fingerprint fields. NULL when out
 * of memory. */
char *cache_tree_key(const airlock_config *cfg, const fsx_limits *lim);

/* The signature of each of cfg's trees (the workspace, then each mount)
 * into hex[0..n-1]. With t, through the tree set's watcher (made on first
 * use): a check of its events when nothing changed, a walk otherwise;
 * without t, or when the cache keeps as many watchers as it may, a walk.
 * Errors name the path (a link in the workspace, a missing mount). */
int cache_trees_sign(cache_trees *t, const airlock_config *cfg, const fsx_limits *lim,
                     char (*hex)[FSX_SIGNATURE_HEX], airlock_error *err);

/* Takes off the list the watchers unused for the idle timeout and closes
 * them (the reaper calls this about once a second). */
void cache_trees_reap(cache_trees *t);

void cache_trees_set_knobs(cache_trees *t, unsigned max_watches, uint64_t period_ns);

/* What the tree set of cfg reports, as the describe key "workspace_watch";
 * NULL without workspace and mounts or before a run made the set. A set in
 * fallback adds a warning (*ret_warning, malloc'd). */
json_t *cache_trees_report(cache_trees *t, const airlock_config *cfg, char **ret_warning);

/* The directories of the tree set tk (a workspace without mounts) whose
 * files changed between the signatures from and to, as its watcher saw
 * them (fsx_watch_delta); NULL when it cannot tell. */
char **cache_trees_delta(cache_trees *t, const char *tk, const char *from, const char *to,
                         size_t *ret_n, char ***ret_files, size_t *ret_nf);

/* The content hashes the signature `to` of the tree set tk took of the
 * files of dirs (fsx_watch_hashes): 0 with *ret, or -1 (*ret empty). */
int cache_trees_hashes(cache_trees *t, const char *tk, const char *to, const char *const *dirs,
                       size_t n, fsx_hashes *ret);

/* Closes the unused watchers of the sets whose first path is the
 * fingerprint field (of flen bytes), e.g. "workspace:LEN:PATH\n". */
void cache_trees_forget(cache_trees *t, const char *field, size_t flen);

/* Makes the next signing of every set whose first path is the field walk
 * in full (fsx_watch_invalidate). */
void cache_trees_changed(cache_trees *t, const char *field, size_t flen);
/* Makes the next signing of those sets sign again only the directories
 * dirs of their first tree (fsx_watch_changed_in). */
void cache_trees_changed_in(cache_trees *t, const char *field, size_t flen, const char *const *dirs,
                            size_t n);
/* Makes the next signing of those sets read again only the files v of
 * their first tree (fsx_watch_files_changed). */
void cache_trees_files_changed(cache_trees *t, const char *field, size_t flen,
                               const fsx_file_change *v, size_t n);

#endif
