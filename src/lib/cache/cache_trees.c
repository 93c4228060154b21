/* The cache's tree watch (cache_trees.h): one watcher per set of trees,
 * found by the set's key, made by the first run that signs the set, and
 * closed when unused for the idle timeout or when the cache keeps too many. */
#include "cache/cache_trees.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/cache.h"
#include "cache/cache_fingerprint.h"
#include "config/config.h"
#include "fsx/fsx_watch.h"
#include "sandbox/input.h"

/* The change detection of one set of trees (a workspace and its mounts,
 * signed with one set of staging caps), shared by every configuration that
 * names them. */
struct cache_tree_set {
        char *key; /* the paths and caps, as fingerprint fields */
        fsx_watch *w;
        unsigned refs;         /* callers inside fsx_watch_signatures */
        uint64_t last_used_ns; /* for the reaper (cache_trees_reap) */
        uint64_t bg_next_ns;   /* when its background walk is due (al_now_ns) */
        struct cache_tree_set *next;
};

void cache_trees_init(cache_trees *t, unsigned max_unused, uint64_t idle_ns,
                      uint64_t (*now_ns)(void))
{
        *t = (cache_trees){.max_unused = max_unused, .idle_ns = idle_ns, .now_ns = now_ns};
        pthread_mutex_init(&t->lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&t->walker_wake, &ca);
        pthread_condattr_destroy(&ca);
}

static void tree_set_free_list(cache_tree_set *s)
{
        while (s) {
                cache_tree_set *next = s->next;
                fsx_watch_free(s->w);
                free(s->key);
                free(s);
                s = next;
        }
}

void cache_trees_destroy(cache_trees *t)
{
        if (t->walker_started) {
                pthread_mutex_lock(&t->lock);
                /* A walk running, metadata or full, gives up at its next
                 * entry (a walk of 10,000 files over FUSE takes seconds). */
                for (cache_tree_set *s = t->list; s; s = s->next)
                        fsx_watch_stop_background(s->w);
                t->walker_stop = true;
                pthread_cond_signal(&t->walker_wake);
                pthread_mutex_unlock(&t->lock);
                pthread_join(t->walker, NULL);
        }
        pthread_cond_destroy(&t->walker_wake);
        tree_set_free_list(t->list);
        t->list = NULL;
        pthread_mutex_destroy(&t->lock);
}

char *cache_tree_key(const airlock_config *cfg, const fsx_limits *lim)
{
        dynbuf b;
        dynbuf_init(&b, CACHE_FINGERPRINT_CAP);
        int r = dynbuf_appendf(&b, "caps:%llu:%llu:%u\n", (unsigned long long)lim->max_bytes,
                               (unsigned long long)lim->max_files, (unsigned)lim->max_depth);
        if (r >= 0 && cfg->workspace)
                r = cache_fp_field(&b, "workspace", cfg->workspace);
        for (size_t i = 0; r >= 0 && i < cfg->n_mounts; i++)
                r = cache_fp_field(&b, "mount_host", cfg->mounts[i].host);
        if (r < 0) {
                dynbuf_free(&b);
                return NULL;
        }
        return dynbuf_take(&b, NULL);
}

/* Finds or makes the tree set for cfg and takes a reference on it; NULL
 * when out of memory (the caller then walks without one). Unused sets past
 * max_unused go, least recently used first, into *ret_drop (the caller
 * frees them without the lock: closing an inotify instance waits for the
 * kernel to release its watches). */
static cache_tree_set *tree_set_get(cache_trees *t, const airlock_config *cfg,
                                    const fsx_limits *lim, cache_tree_set **ret_drop)
{
        *ret_drop = NULL;
        _cleanup_free_ char *key = cache_tree_key(cfg, lim);
        if (!key)
                return NULL;
        pthread_mutex_lock(&t->lock);
        cache_tree_set **pp = &t->list, *s = NULL;
        for (; *pp; pp = &(*pp)->next)
                if (strcmp((*pp)->key, key) == 0) {
                        s = *pp;
                        *pp = s->next; /* moved to the front below */
                        break;
                }
        unsigned unused = 0;
        for (cache_tree_set *o = t->list; !s && o; o = o->next)
                unused += o->refs == 0;
        if (!s && unused >= t->max_unused) {
                /* Every watch the cache keeps is taken: this tree is walked.
                 * Making a watch here and ending the least recently used one
                 * cost each call of a server with many workspaces (tenants)
                 * milliseconds (closing an inotify instance waits for the
                 * kernel), under this lock; the reaper ends watches unused
                 * for the idle timeout instead, so that a busy tree gets one
                 * again. */
                pthread_mutex_unlock(&t->lock);
                return NULL;
        }
        if (!s) {
                size_t n = (cfg->workspace ? 1 : 0) + cfg->n_mounts, k = 0;
                _cleanup_free_ const char **paths = calloc(n, sizeof(*paths));
                if (paths && cfg->workspace)
                        paths[k++] = cfg->workspace;
                for (size_t i = 0; paths && i < cfg->n_mounts; i++)
                        paths[k++] = cfg->mounts[i].host;
                s = paths ? calloc(1, sizeof(*s)) : NULL;
                if (!s || fsx_watch_new(paths, n, lim, CACHE_CONTENT_THRESHOLD, &s->w, NULL) < 0) {
                        free(s);
                        pthread_mutex_unlock(&t->lock);
                        return NULL;
                }
                fsx_watch_set_knobs(s->w, t->watch_max, t->watch_period_ns);
                if (t->shared_max_set)
                        fsx_watch_set_shared_max(s->w, t->shared_max);
                s->key = TAKE_PTR(key);
                t->n++;
        }
        s->next = t->list;
        t->list = s;
        s->refs++;
        s->last_used_ns = t->now_ns();
        pthread_mutex_unlock(&t->lock);
        return s;
}

void cache_trees_reap(cache_trees *t)
{
        if (!t->idle_ns)
                return;
        cache_tree_set *out = NULL;
        pthread_mutex_lock(&t->lock);
        uint64_t now = t->now_ns();
        for (cache_tree_set **pp = &t->list; *pp;) {
                cache_tree_set *o = *pp;
                if (o->refs == 0 && now > o->last_used_ns && now - o->last_used_ns > t->idle_ns) {
                        *pp = o->next;
                        o->next = out;
                        out = o;
                        t->n--;
                        continue;
                }
                pp = &o->next;
        }
        pthread_mutex_unlock(&t->lock);
        tree_set_free_list(out);
}

/* ---- the background walker -------------------------------------------------
 *
 * One thread per cache walks the tree sets on shared storage that calls
 * use, so that a call there reads this host's events only and answers
 * from the last walk (fsx_watch_background, which says when each set is
 * due next). Bounded: one thread; at most CACHE_BG_SETS_MAX sets (the most
 * recently used), each used by a call within CACHE_BG_ACTIVE_NS; one walk
 * of a set at a time; each set's walks spaced by its period, which is ten
 * times its walk or more. A set the walker leaves alone goes stale, and
 * its calls walk as without the walker. */

#define BG_PENDING (UINT64_MAX - 1)

/* The set due first among those the walker serves, with a reference, or
 * NULL with *ret_wait the time (al_now_ns) to wait until. Under t->lock. */
static cache_tree_set *walker_pick(cache_trees *t, uint64_t *ret_wait)
{
        uint64_t now = al_now_ns(), used_now = t->now_ns();
        uint64_t wait = now + 1000000000ull;
        cache_tree_set *pick = NULL;
        unsigned k = 0;
        for (cache_tree_set *s = t->list; s && k < CACHE_BG_SETS_MAX; s = s->next) {
                /* 0: not on shared storage (yet); BG_PENDING: being
                 * turned on; UINT64_MAX: needs no walk. */
                if (s->bg_next_ns == 0 || s->bg_next_ns >= BG_PENDING)
                        continue;
                k++;
                if (used_now - s->last_used_ns > CACHE_BG_ACTIVE_NS)
                        continue;
                if (s->bg_next_ns <= now && (!pick || s->bg_next_ns < pick->bg_next_ns))
                        pick = s;
                else if (s->bg_next_ns > now && s->bg_next_ns < wait)
                        wait = s->bg_next_ns;
        }
        if (pick)
                pick->refs++;
        *ret_wait = wait;
        return pick;
}

static void *walker_main(void *arg)
{
        cache_trees *t = arg;
        pthread_setname_np(pthread_self(), "airlock-walk");
        pthread_mutex_lock(&t->lock);
        while (!t->walker_stop) {
                uint64_t wait = 0;
                cache_tree_set *s = walker_pick(t, &wait);
                if (s) {
                        pthread_mutex_unlock(&t->lock);
                        uint64_t next = fsx_watch_background(s->w);
                        pthread_mutex_lock(&t->lock);
                        s->bg_next_ns = next;
                        s->refs--;
                        continue;
                }
                struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000ull),
                                      .tv_nsec = (long)(wait % 1000000000ull)};
                pthread_cond_timedwait(&t->walker_wake, &t->lock, &ts);
        }
        pthread_mutex_unlock(&t->lock);
        return NULL;
}

/* After a call signed s: a set on shared storage gets the background walk,
 * the walker started at the first one (without it, calls walk as before). */
static void walker_serve(cache_trees *t, cache_tree_set *s)
{
        if (!fsx_watch_shared(s->w))
                return;
        pthread_mutex_lock(&t->lock);
        if (!t->walker_started && !t->walker_failed) {
                int r = pthread_create(&t->walker, NULL, walker_main, t);
                t->walker_started = r == 0;
                t->walker_failed = r != 0;
        }
        bool first = t->walker_started && s->bg_next_ns == 0;
        if (first)
                s->bg_next_ns = BG_PENDING;
        pthread_mutex_unlock(&t->lock);
        if (!first)
                return;
        /* Without the list's lock: the watcher's own may be held through
         * a walk. Turned on before the walker may pick it. */
        fsx_watch_set_background(s->w, true);
        pthread_mutex_lock(&t->lock);
        s->bg_next_ns = 1;
        pthread_cond_signal(&t->walker_wake);
        pthread_mutex_unlock(&t->lock);
}

/* Each tree signed by a walk of its own, as without a cache. */
static int sign_walking(const airlock_config *cfg, const fsx_limits *lim,
                        char (*hex)[FSX_SIGNATURE_HEX], airlock_error *err)
{
        size_t k = 0;
        int r = 0;
        if (cfg->workspace)
                r = fsx_tree_signature(cfg->workspace, lim, CACHE_CONTENT_THRESHOLD, hex[k++], err);
        for (size_t i = 0; r >= 0 && i < cfg->n_mounts; i++)
                r = fsx_tree_signature(cfg->mounts[i].host, lim, CACHE_CONTENT_THRESHOLD, hex[k++],
                                       err);
        return r;
}

int cache_trees_sign(cache_trees *t, const airlock_config *cfg, const fsx_limits *lim,
                     char (*hex)[FSX_SIGNATURE_HEX], airlock_error *err)
{
        cache_tree_set *drop = NULL, *s = NULL;
        if (t && (cfg->workspace || cfg->n_mounts))
                s = tree_set_get(t, cfg, lim, &drop);
        tree_set_free_list(drop);
        if (!s)
                return sign_walking(cfg, lim, hex, err);
        bool walked = false;
        int r = fsx_watch_signatures(s->w, hex, &walked, err);
        if (r >= 0)
                walker_serve(t, s);
        pthread_mutex_lock(&t->lock);
        s->refs--;
        if (walked)
                t->walks++;
        else
                t->checks++;
        pthread_mutex_unlock(&t->lock);
        return r;
}

void cache_trees_set_knobs(cache_trees *t, unsigned max_watches, uint64_t period_ns)
{
        pthread_mutex_lock(&t->lock);
        t->watch_max = max_watches;
        t->watch_period_ns = period_ns;
        for (cache_tree_set *s = t->list; s; s = s->next)
                fsx_watch_set_knobs(s->w, max_watches, period_ns);
        pthread_mutex_unlock(&t->lock);
}

/* The tree set of key with a reference of the caller's, or NULL when the
 * cache has none (it is made by a run, not by a look). */
static cache_tree_set *tree_set_ref(cache_trees *t, const char *key)
{
        cache_tree_set *found = NULL;
        pthread_mutex_lock(&t->lock);
        for (cache_tree_set *s = t->list; s; s = s->next)
                if (strcmp(s->key, key) == 0) {
                        found = s;
                        found->refs++;
                        break;
                }
        pthread_mutex_unlock(&t->lock);
        return found;
}

static void tree_set_unref(cache_trees *t, cache_tree_set *s)
{
        pthread_mutex_lock(&t->lock);
        s->refs--;
        pthread_mutex_unlock(&t->lock);
}

json_t *cache_trees_report(cache_trees *t, const airlock_config *cfg, char **ret_warning)
{
        *ret_warning = NULL;
        if (!cfg->workspace && !cfg->n_mounts)
                return NULL;
        const fsx_limits lim = sbx_stage_limits(cfg);
        _cleanup_free_ char *key = cache_tree_key(cfg, &lim);
        fsx_watch_info info;
        cache_tree_set *found = key ? tree_set_ref(t, key) : NULL;
        if (!found)
                return NULL;
        /* Without the list's lock: the watcher's own is held through a
         * walk, which must not stop every other caller of the cache. */
        fsx_watch_get_info(found->w, &info);
        tree_set_unref(t, found);
        if (info.reason[0])
                *ret_warning = strdup(info.reason);
        return json_pack("{s:s, s:I, s:I, s:f, s:I, s:I, s:I, s:s?, s:b, s:I}", "mode",
                         info.active && !info.shared_walk ? "inotify" : "walk", "watches",
                         (json_int_t)info.watches, "max_watches", (json_int_t)info.max_watches,
                         "safety_walk_s", (double)info.period_ns / 1e9, "walks",
                         (json_int_t)info.walks, "checks", (json_int_t)info.checks, "partial_walks",
                         (json_int_t)info.partial, "reason", info.reason[0] ? info.reason : NULL,
                         "shared_storage", info.shared, "shared_walk_max",
                         (json_int_t)info.shared_max);
}

char **cache_trees_delta(cache_trees *t, const char *tk, const char *from, const char *to,
                         size_t *ret_n, char ***ret_files, size_t *ret_nf)
{
        *ret_n = *ret_nf = 0;
        *ret_files = NULL;
        cache_tree_set *found = tree_set_ref(t, tk);
        if (!found)
                return NULL;
        char **dirs = NULL;
        if (fsx_watch_delta(found->w, from, to, &dirs, ret_n, ret_files, ret_nf) != 1)
                dirs = NULL;
        tree_set_unref(t, found);
        return dirs;
}

int cache_trees_hashes(cache_trees *t, const char *tk, const char *to, const char *const *dirs,
                       size_t n, fsx_hashes *ret)
{
        *ret = (fsx_hashes){0};
        cache_tree_set *found = tree_set_ref(t, tk);
        if (!found)
                return -1;
        int r = fsx_watch_hashes(found->w, to, dirs, n, ret);
        tree_set_unref(t, found);
        return r;
}

/* Tells every set whose first path is the field: its whole trees changed
 * (dirs and files NULL), or only the directories dirs or the files files
 * of its first tree. */
static void tell_sets(cache_trees *t, const char *field, size_t flen, const char *const *dirs,
                      size_t n, const fsx_file_change *files)
{
        /* Each set is held by a reference, not the list's lock, while its
         * watcher is told: the watcher's own lock may be held through a
         * walk meanwhile, and the flag is set once that walk ends (a walk
         * that began before the change may have missed it, so the next one
         * must not be spared). One workspace is in few sets (one per set of
         * mounts and caps). */
        cache_tree_set *held[16];
        size_t k = 0;
        pthread_mutex_lock(&t->lock);
        for (cache_tree_set *s = t->list; s; s = s->next) {
                const char *nl = strchr(s->key, '\n');
                if (!nl || strncmp(nl + 1, field, flen) != 0)
                        continue;
                if (k == ARRAY_SIZE(held)) {
                        /* More than that: told under the lock. */
                        fsx_watch_invalidate(s->w);
                        continue;
                }
                s->refs++;
                held[k++] = s;
        }
        pthread_mutex_unlock(&t->lock);
        for (size_t i = 0; i < k; i++) {
                if (files)
                        fsx_watch_files_changed(held[i]->w, files, n);
                else if (dirs)
                        fsx_watch_changed_in(held[i]->w, dirs, n);
                else
                        fsx_watch_invalidate(held[i]->w);
                tree_set_unref(t, held[i]);
        }
}

void cache_trees_changed(cache_trees *t, const char *field, size_t flen)
{
        tell_sets(t, field, flen, NULL, 0, NULL);
}

void cache_trees_changed_in(cache_trees *t, const char *field, size_t flen, const char *const *dirs,
                            size_t n)
{
        tell_sets(t, field, flen, dirs, n, NULL);
}

void cache_trees_files_changed(cache_trees *t, const char *field, size_t flen,
                               const fsx_file_change *v, size_t n)
{
        tell_sets(t, field, flen, NULL, n, v);
}

void cache_trees_forget(cache_trees *t, const char *field, size_t flen)
{
        cache_tree_set *out = NULL;
        pthread_mutex_lock(&t->lock);
        for (cache_tree_set **pp = &t->list; *pp;) {
                cache_tree_set *s = *pp;
                const char *nl = strchr(s->key, '\n');
                if (s->refs == 0 && nl && strncmp(nl + 1, field, flen) == 0) {
                        *pp = s->next;
                        s->next = out;
                        out = s;
                        t->n--;
                        continue;
                }
                pp = &s->next;
        }
        pthread_mutex_unlock(&t->lock);
        tree_set_free_list(out);
}
