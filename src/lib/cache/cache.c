/* The sandbox cache: one sandbox per configuration fingerprint, shared by
 * every run with that fingerprint, evicted least-recently-used first and when
 * idle too long.
 *
 * Locking: one mutex guards the entry list, the counters and the state of
 * each entry. It is held only for lookups and bookkeeping, never while a
 * sandbox is created, runs code or is closed. Each entry is reference
 * counted by the runs that use it; an entry that is evicted while in use is
 * taken off the list at once ("doomed") and closed by the last run that
 * releases it, so a run never sees its sandbox closed under it.
 *
 * The key is a configuration's fingerprint (cache_fingerprint.c), whose
 * tree signatures come from the tree watch (cache_trees.c), which has a
 * lock of its own: this file never holds both. */
#include "cache/cache.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/cache_fingerprint.h"
#include "cache/cache_trees.h"
#include "config/config.h"
#include "core/util.h"
#include "fsx/fsx.h"
#include "fsx/fsx_watch.h"
#include "sandbox/input.h"
#include "sandbox/sandbox.h"

typedef enum entry_state {
        ENTRY_BUILDING, /* one run is creating the sandbox; others wait */
        ENTRY_READY,
        ENTRY_FAILED, /* creation failed; err holds why */
} entry_state;

/* One staged version of one set of trees (a workspace and its mounts),
 * for the runs of a late-input sandbox (sbx_sandbox_new_late): many
 * workspaces, one template. */
typedef struct cache_input {
        char *key;     /* tree key and signatures: the version */
        size_t tk_len; /* length of the tree key at its start: the trees */
        sbx_input *in;
        entry_state state;
        airlock_error build_err;
        unsigned refs;
        bool stale;   /* a newer version replaced it: freed by its last user */
        bool cool;    /* its overlay was let go (sbx_input_idle) since it was last used */
        bool cooling; /* let go by a release, whose own release starts no new round */
        uint64_t last_used_ns;
        struct cache_input *next;
} cache_input;

typedef struct cache_entry {
        char *key;         /* fingerprint text */
        size_t static_len; /* length of its part without tree signatures */
        uint64_t hash;     /* of key, to skip most string compares */
        airlock_sandbox *sb;
        entry_state state;
        airlock_error build_err;
        unsigned refs; /* runs holding the entry */
        bool doomed;   /* off the list; closed when refs drops to 0 */
        uint64_t last_used_ns;
        struct cache_entry *prev, *next; /* LRU list: head is the most recent */
        bool late;                       /* sbx_sandbox_new_late: inputs below */
        cache_input *inputs;             /* most recently used first */
        unsigned n_idle_inputs;
} cache_entry;

struct airlock_cache {
        pthread_mutex_t lock;
        pthread_cond_t changed; /* a build ended, a run slot freed, or closing */
        pthread_cond_t reaper_wake;
        pthread_t reaper;
        bool reaper_started;
        bool closing;
        unsigned max_sandboxes;
        uint64_t idle_ns; /* 0: no idle eviction */
        unsigned max_parallel;
        unsigned running;
        unsigned closing_later; /* stale sandboxes being closed on threads of their own */
        cache_entry *head, *tail;
        unsigned n_entries;
        cache_ops ops;
        cache_stats stats;
        cache_trees trees; /* the tree watch, with a lock of its own */
};

static bool cache_takes_late(const airlock_cache *c)
{
        return c->ops.sandbox_new_late != NULL;
}

static uint64_t real_now_ns(void)
{
        return al_now_ns();
}

static const cache_ops real_ops = {
    .sandbox_new = sbx_sandbox_new_from,
    .sandbox_yield = sbx_sandbox_yield_staging,
    .sandbox_run = sbx_run_watched,
    .sandbox_close = airlock_sandbox_close,
    .sandbox_trim = sbx_sandbox_trim,
    .now_ns = real_now_ns,
    .sandbox_new_late = sbx_sandbox_new_late,
    .sandbox_run_input = sbx_run_input,
    .session_open_input = sbx_session_open_input,
};

static void list_unlink(airlock_cache *c, cache_entry *e)
{
        if (e->prev)
                e->prev->next = e->next;
        else
                c->head = e->next;
        if (e->next)
                e->next->prev = e->prev;
        else
                c->tail = e->prev;
        e->prev = e->next = NULL;
        c->n_entries--;
}

static void list_push_front(airlock_cache *c, cache_entry *e)
{
        e->prev = NULL;
        e->next = c->head;
        if (c->head)
                c->head->prev = e;
        c->head = e;
        if (!c->tail)
                c->tail = e;
        c->n_entries++;
}

static void input_free(cache_input *ci)
{
        if (!ci)
                return;
        sbx_input_free(ci->in);
        free(ci->key);
        free(ci);
}

/* Called once nothing holds e: its inputs go with its sandbox. */
static void entry_free(cache_entry *e)
{
        if (!e)
                return;
        while (e->inputs) {
                cache_input *ci = e->inputs;
                e->inputs = ci->next;
                input_free(ci);
        }
        free(e->key);
        free(e);
}

/* Takes e off the list. Returns e when nothing uses it (the caller closes it
 * after dropping the lock), NULL when its last run will. Caller holds lock. */
static cache_entry *entry_doom_locked(airlock_cache *c, cache_entry *e)
{
        if (!e->doomed) {
                list_unlink(c, e);
                e->doomed = true;
        }
        return e->refs == 0 ? e : NULL;
}

/* A small list of entries to close once the lock is dropped. */
typedef struct close_list {
        cache_entry *items[16];
        size_t n;
        cache_entry *overflow; /* chained through next when items is full */
} close_list;

static void close_list_add(close_list *l, cache_entry *e)
{
        if (!e)
                return;
        if (l->n < ARRAY_SIZE(l->items)) {
                l->items[l->n++] = e;
        } else {
                e->next = l->overflow;
                l->overflow = e;
        }
}

/* Closes and frees every entry in l. Called without the lock: closing kills
 * processes and may take a while. */
static void close_list_run(airlock_cache *c, close_list *l)
{
        unsigned closed = 0;
        for (size_t i = 0; i < l->n; i++) {
                if (l->items[i]->sb) {
                        c->ops.sandbox_close(l->items[i]->sb);
                        closed++;
                }
                entry_free(l->items[i]);
        }
        while (l->overflow) {
                cache_entry *e = l->overflow;
                l->overflow = e->next;
                if (e->sb) {
                        c->ops.sandbox_close(e->sb);
                        closed++;
                }
                entry_free(e);
        }
        l->n = 0;
        if (closed) {
                pthread_mutex_lock(&c->lock);
                c->stats.closed += closed;
                pthread_mutex_unlock(&c->lock);
        }
}

/* Work the cache does beside its callers, on a detached thread: fn(c, arg),
 * counted in closing_later, which airlock_cache_close waits for. */
typedef struct later_job {
        airlock_cache *c;
        void (*fn)(airlock_cache *c, void *arg);
        void *arg;
} later_job;

static void *later_main(void *p)
{
        later_job *j = p;
        airlock_cache *c = j->c;
        j->fn(c, j->arg);
        free(j);
        pthread_mutex_lock(&c->lock);
        c->closing_later--;
        pthread_cond_broadcast(&c->changed);
        pthread_mutex_unlock(&c->lock);
        return NULL;
}

/* Starts fn(c, arg) on a thread of its own; false when no thread could be
 * started (the caller then does the work itself). */
static bool run_later(airlock_cache *c, void (*fn)(airlock_cache *c, void *arg), void *arg)
{
        later_job *j = malloc(sizeof(*j));
        pthread_attr_t a;
        bool started = false;
        if (j && pthread_attr_init(&a) == 0) {
                *j = (later_job){c, fn, arg};
                pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
                pthread_mutex_lock(&c->lock);
                c->closing_later++;
                pthread_mutex_unlock(&c->lock);
                pthread_t t;
                started = pthread_create(&t, &a, later_main, j) == 0;
                pthread_attr_destroy(&a);
                if (!started) {
                        pthread_mutex_lock(&c->lock);
                        c->closing_later--;
                        pthread_mutex_unlock(&c->lock);
                }
        }
        if (!started)
                free(j);
        return started;
}

static void close_list_later(airlock_cache *c, void *arg)
{
        close_list_run(c, arg);
        free(arg);
}

/* Closes the entries of l on a detached thread of their own (or here, when
 * no thread can be started); airlock_cache_close waits for every one. */
static void close_list_run_later(airlock_cache *c, close_list *l)
{
        if (!l->n && !l->overflow)
                return;
        close_list *held = malloc(sizeof(*held));
        if (held)
                *held = *l;
        if (!held || !run_later(c, close_list_later, held)) {
                free(held);
                close_list_run(c, l);
        }
        *l = (close_list){0};
}

/* Dooms entries idle longer than the timeout. Caller holds lock. */
static void reap_locked(airlock_cache *c, close_list *out)
{
        if (!c->idle_ns)
                return;
        uint64_t now = c->ops.now_ns();
        for (cache_entry *e = c->tail, *prev; e; e = prev) {
                prev = e->prev;
                if (e->refs == 0 && e->state != ENTRY_BUILDING && now > e->last_used_ns &&
                    now - e->last_used_ns > c->idle_ns)
                        close_list_add(out, entry_doom_locked(c, e));
        }
}

/* Keeps at most max_sandboxes entries on the list: the least recently used
 * go first, idle ones before busy ones (a busy one is closed when its runs
 * end). Caller holds lock. */
static void evict_locked(airlock_cache *c, close_list *out)
{
        while (c->n_entries > c->max_sandboxes) {
                cache_entry *victim = NULL;
                for (cache_entry *e = c->tail; e; e = e->prev)
                        if (e->refs == 0) {
                                victim = e;
                                break;
                        }
                if (!victim)
                        victim = c->tail;
                close_list_add(out, entry_doom_locked(c, victim));
        }
}

static void *reaper_main(void *arg)
{
        airlock_cache *c = arg;
        pthread_mutex_lock(&c->lock);
        while (!c->closing) {
                /* Wake a few times per idle period, at most once a second, so
                 * that an idle sandbox outlives its timeout by little. */
                uint64_t step = MIN(c->idle_ns / 4, 1000000000ull);
                if (step < 10000000ull)
                        step = 10000000ull;
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t when = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + step;
                ts.tv_sec = (time_t)(when / 1000000000ull);
                ts.tv_nsec = (long)(when % 1000000000ull);
                pthread_cond_timedwait(&c->reaper_wake, &c->lock, &ts);
                if (c->closing)
                        break;
                close_list l = {0};
                reap_locked(c, &l);
                /* The copies a burst left ready are ended once runs slow
                 * down, not only at the next run. */
                for (cache_entry *e = c->head; e && c->ops.sandbox_trim; e = e->next)
                        if (e->refs == 0 && e->state == ENTRY_READY && e->sb)
                                c->ops.sandbox_trim(e->sb);
                pthread_mutex_unlock(&c->lock);
                close_list_run(c, &l);
                cache_trees_reap(&c->trees);
                pthread_mutex_lock(&c->lock);
        }
        pthread_mutex_unlock(&c->lock);
        return NULL;
}

int airlock_cache_new(unsigned max_sandboxes, double idle_timeout_s, airlock_cache **ret,
                      airlock_error *err)
{
        airlock_error_clear(err);
        if (idle_timeout_s != idle_timeout_s || idle_timeout_s > 1e9)
                return al_error(err, -EINVAL, NULL, "cache idle timeout %g s is out of range",
                                idle_timeout_s);
        airlock_cache *c = calloc(1, sizeof(*c));
        if (!c)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        c->max_sandboxes = max_sandboxes ? max_sandboxes : CACHE_DEFAULT_MAX_SANDBOXES;
        /* 0 means the default; a negative timeout turns idle eviction off. */
        if (idle_timeout_s == 0)
                idle_timeout_s = CACHE_DEFAULT_IDLE_S;
        c->idle_ns = idle_timeout_s > 0 ? (uint64_t)(idle_timeout_s * 1e9) : 0;
        if (idle_timeout_s > 0 && !c->idle_ns)
                c->idle_ns = 1;
        c->max_parallel = CACHE_DEFAULT_MAX_PARALLEL;
        c->ops = real_ops;
        cache_trees_init(&c->trees, c->max_sandboxes, c->idle_ns, real_now_ns);
        /* A test knob for the black-box tests: AIRLOCK_WATCH_MAX lowers the
         * cap on watches per tree set (it can only lower it, so the most it
         * does is make calls walk the trees, as without watches). */
        const char *wm = secure_getenv("AIRLOCK_WATCH_MAX");
        if (wm && *wm) {
                char *end = NULL;
                unsigned long v = strtoul(wm, &end, 10);
                if (end && !*end && v > 0 && v < FSX_WATCH_MAX_DEFAULT)
                        c->trees.watch_max = (unsigned)v;
        }
        /* A test knob: AIRLOCK_SAFETY_WALK_S sets the safety walk's period
         * (1 to 3600 s, or 0 for a walk due at every call, past the scaling
         * of a shared tree's period; FSX_WATCH_PERIOD_NS otherwise), so that
         * a test of which folders a call reads again does not depend on how
         * long the machine takes between two calls, and one of the safety
         * walk can make it come soon. */
        const char *sw = secure_getenv("AIRLOCK_SAFETY_WALK_S");
        if (sw && *sw) {
                char *end = NULL;
                unsigned long v = strtoul(sw, &end, 10);
                if (end && !*end && v <= 3600)
                        c->trees.watch_period_ns = v ? (uint64_t)v * 1000000000ull : 1;
        }
        /* AIRLOCK_SHARED_WALK_MAX lowers the shared walk cap (0: a tree on
         * shared storage is never walked at every call, and only its
         * generation and the safety walk tell of another machine's
         * changes): for the bench, and for an operator who trades the
         * changes made behind airlock's back for the walk's cost. */
        const char *sm = secure_getenv("AIRLOCK_SHARED_WALK_MAX");
        if (sm && *sm) {
                char *end = NULL;
                unsigned long long v = strtoull(sm, &end, 10);
                if (end && !*end && v < FSX_SHARED_WALK_MAX) {
                        c->trees.shared_max_set = true;
                        c->trees.shared_max = v;
                }
        }
        pthread_mutex_init(&c->lock, NULL);
        pthread_cond_init(&c->changed, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&c->reaper_wake, &ca);
        pthread_condattr_destroy(&ca);
        if (c->idle_ns) {
                int r = pthread_create(&c->reaper, NULL, reaper_main, c);
                if (r != 0) {
                        airlock_cache_close(c);
                        return al_error(err, -r, NULL, "cannot start the cache reaper thread: %s",
                                        strerror(r));
                }
                c->reaper_started = true;
        }
        *ret = c;
        return 0;
}

void cache_set_ops(airlock_cache *c, const cache_ops *ops)
{
        pthread_mutex_lock(&c->lock);
        c->ops.sandbox_new = ops->sandbox_new ? ops->sandbox_new : real_ops.sandbox_new;
        /* A fake sandbox_new makes fake sandboxes: the real yield must not
         * see them. */
        c->ops.sandbox_yield = ops->sandbox_yield ? ops->sandbox_yield
                               : ops->sandbox_new ? NULL
                                                  : real_ops.sandbox_yield;
        c->ops.sandbox_run = ops->sandbox_run ? ops->sandbox_run : real_ops.sandbox_run;
        c->ops.sandbox_close = ops->sandbox_close ? ops->sandbox_close : real_ops.sandbox_close;
        c->ops.sandbox_trim = ops->sandbox_new    ? ops->sandbox_trim
                              : ops->sandbox_trim ? ops->sandbox_trim
                                                  : real_ops.sandbox_trim;
        c->ops.now_ns = ops->now_ns ? ops->now_ns : real_ops.now_ns;
        c->trees.now_ns = c->ops.now_ns;
        /* A fake sandbox_new without the late-input ops: a sandbox per
         * workspace, as the fakes expect. */
        c->ops.sandbox_new_late =
            ops->sandbox_new ? ops->sandbox_new_late : real_ops.sandbox_new_late;
        c->ops.sandbox_run_input =
            ops->sandbox_new ? ops->sandbox_run_input : real_ops.sandbox_run_input;
        c->ops.session_open_input =
            ops->sandbox_new ? ops->session_open_input : real_ops.session_open_input;
        pthread_mutex_unlock(&c->lock);
}

void cache_set_max_parallel(airlock_cache *c, unsigned n)
{
        pthread_mutex_lock(&c->lock);
        c->max_parallel = n ? n : 1;
        pthread_cond_broadcast(&c->changed);
        pthread_mutex_unlock(&c->lock);
}

void cache_get_stats(airlock_cache *c, cache_stats *ret)
{
        pthread_mutex_lock(&c->lock);
        *ret = c->stats;
        ret->sandboxes = c->n_entries;
        ret->running = c->running;
        pthread_mutex_unlock(&c->lock);
        pthread_mutex_lock(&c->trees.lock);
        ret->tree_walks = c->trees.walks;
        ret->tree_checks = c->trees.checks;
        pthread_mutex_unlock(&c->trees.lock);
}

void cache_set_watch_knobs(airlock_cache *c, unsigned max_watches, uint64_t period_ns)
{
        cache_trees_set_knobs(&c->trees, max_watches, period_ns);
}

void cache_wait_later_closes(airlock_cache *c)
{
        pthread_mutex_lock(&c->lock);
        while (c->closing_later > 0)
                pthread_cond_wait(&c->changed, &c->lock);
        pthread_mutex_unlock(&c->lock);
}

void cache_reap(airlock_cache *c)
{
        close_list l = {0};
        pthread_mutex_lock(&c->lock);
        reap_locked(c, &l);
        pthread_mutex_unlock(&c->lock);
        close_list_run(c, &l);
}

/* Errors of airlock_sandbox_run that mean the template process or its
 * channel is gone, so the sandbox cannot run anything any more. */
static bool template_died(int r)
{
        return r == -ECHILD || r == -EPIPE || r == -ESRCH || r == -ECONNRESET;
}

/* Drops a reference taken by entry_acquire; the last run of a doomed entry
 * closes its sandbox. */
static void entry_release(airlock_cache *c, cache_entry *e)
{
        close_list l = {0};
        pthread_mutex_lock(&c->lock);
        e->refs--;
        e->last_used_ns = c->ops.now_ns();
        if (e->doomed && e->refs == 0)
                close_list_add(&l, e);
        pthread_mutex_unlock(&c->lock);
        close_list_run(c, &l);
}

/* Finds or creates the entry for key and takes a reference on it; creates
 * its sandbox when this run is the first. Returns the entry, ready, or a
 * negative errno with err filled. Caller holds a run slot, not the lock. */
/* Waits until another run's build of what *state belongs to (an entry or
 * an input version) is over, handing the caller's input on first when it
 * must wait (the build may take long). */
static void wait_built(airlock_cache *c, const entry_state *state, al_watch *w)
{
        pthread_mutex_lock(&c->lock);
        if (*state == ENTRY_BUILDING) {
                pthread_mutex_unlock(&c->lock);
                al_watch_fire(w);
                pthread_mutex_lock(&c->lock);
        }
        while (*state == ENTRY_BUILDING)
                pthread_cond_wait(&c->changed, &c->lock);
        pthread_mutex_unlock(&c->lock);
}

/* Builds the sandbox of the new entry e (ENTRY_BUILDING, one reference of
 * the caller's), from the stale version from when there is one (its
 * build's reference is dropped here), and wakes the runs that wait for it.
 * A failed build stays in e->build_err and leaves the list, so that the
 * next run tries again. The stale versions' closes go beside the run. */
static void entry_build(airlock_cache *c, const airlock_config *cfg, cache_entry *e,
                        cache_entry *from, close_list *stale, al_watch *w)
{
        airlock_sandbox *sb = NULL;
        airlock_error berr = {0};
        al_watch_fire(w);
        bool late = cache_late_input(cfg) && c->ops.sandbox_new_late;
        int r = late ? c->ops.sandbox_new_late(cfg, &sb, &berr)
                     : c->ops.sandbox_new(cfg, from ? from->sb : NULL, &sb, &berr);
        pthread_mutex_lock(&c->lock);
        if (from) {
                /* Its close, now that nothing links from it any
                 * more, goes beside the run, as for the others. */
                from->refs--;
                if (from->refs == 0)
                        close_list_add(stale, from);
        }
        if (r < 0) {
                e->state = ENTRY_FAILED;
                e->build_err = berr;
                if (!e->build_err.code)
                        e->build_err.code = r;
                /* A failed build is not cached: the next run tries
                 * again (the cause may be fixed by then). */
                if (!e->doomed) {
                        list_unlink(c, e);
                        e->doomed = true;
                }
        } else {
                e->sb = sb;
                e->late = late;
                e->state = ENTRY_READY;
                c->stats.created++;
        }
        pthread_cond_broadcast(&c->changed);
        pthread_mutex_unlock(&c->lock);
        close_list_run_later(c, stale);
}

static int entry_acquire(airlock_cache *c, const airlock_config *cfg, const char *key,
                         size_t static_len, uint64_t hash, al_watch *w, cache_entry **ret,
                         airlock_error *err)
{
        close_list l = {0}, stale = {0};
        cache_entry *from = NULL; /* the stale version the build reuses */
        pthread_mutex_lock(&c->lock);
        reap_locked(c, &l);
        cache_entry *e = c->head;
        for (; e; e = e->next)
                if (e->hash == hash && strcmp(e->key, key) == 0)
                        break;
        bool build = false;
        if (e) {
                e->refs++;
                list_unlink(c, e);
                list_push_front(c, e);
                c->stats.hits++;
        } else {
                e = calloc(1, sizeof(*e));
                char *k = e ? strdup(key) : NULL;
                if (!k) {
                        free(e);
                        pthread_mutex_unlock(&c->lock);
                        close_list_run(c, &l);
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                }
                /* The same configuration with other tree signatures is a
                 * stale version (the workspace changed since): it would only
                 * be hit again if the edit were undone, so it goes now. The
                 * most recent ready one is kept open, by a reference of the
                 * build's own, until the new sandbox is built from its
                 * staged copy (sbx_sandbox_new_from): closing it first would
                 * remove the files the build links to. */
                for (cache_entry *o = c->head, *next; o; o = next) {
                        next = o->next;
                        if (o->static_len != static_len || memcmp(o->key, key, static_len) != 0)
                                continue;
                        if (!from && o->state == ENTRY_READY && o->sb) {
                                from = o;
                                from->refs++;
                        }
                        close_list_add(&stale, entry_doom_locked(c, o));
                }
                /* Only our reference left on a doomed version: no run or
                 * session is on it, and none can begin (it is off the list).
                 * Its staged tree can then be updated in place by the build
                 * instead of linked file by file. */
                if (from && from->refs == 1 && from->doomed && c->ops.sandbox_yield)
                        c->ops.sandbox_yield(from->sb);
                e->key = k;
                e->static_len = static_len;
                e->hash = hash;
                e->state = ENTRY_BUILDING;
                e->refs = 1;
                list_push_front(c, e);
                evict_locked(c, &l);
                build = true;
        }
        e->last_used_ns = c->ops.now_ns();
        pthread_mutex_unlock(&c->lock);
        close_list_run(c, &l);
        /* Closing a stale version removes its staged copy, which takes as
         * long as the workspace is large (seconds for 10,000 files on a busy
         * disk): it is done beside the run that replaces it, not before; the
         * one the build reuses, once the build is over. */
        close_list_run_later(c, &stale);

        if (build) {
                entry_build(c, cfg, e, from, &stale, w);
        } else {
                wait_built(c, &e->state, w);
        }
        /* The state no longer changes once it left BUILDING. */
        if (e->state == ENTRY_FAILED) {
                int r = e->build_err.code < 0 ? e->build_err.code : -EIO;
                if (err)
                        *err = e->build_err;
                entry_release(c, e);
                return r;
        }
        *ret = e;
        return 0;
}

/* Idle staged inputs kept per sandbox (their files on disk, nothing else):
 * a tenant that comes back finds its workspace staged. */
#define CACHE_MAX_IDLE_INPUTS 4096

static void input_free_job(airlock_cache *c, void *arg)
{
        (void)c;
        input_free(arg);
}

/* Frees a stale input on a detached thread of its own (or here, when no
 * thread can be started): removing its staged files takes as long as the
 * tree is large, and letting its overlay go waits for the kernel, neither
 * of which a run of the new version should wait for. airlock_cache_close
 * waits for every one. */
static void input_free_later(airlock_cache *c, cache_input *ci)
{
        if (ci && !run_later(c, input_free_job, ci))
                input_free(ci);
}

/* Idle inputs that keep their overlay mounted, the most recently used:
 * the others hold only their files on disk, and the overlay is made again
 * (some 100 us) when one is used again. */
#define CACHE_HOT_INPUTS 64

static void input_release(airlock_cache *c, cache_entry *e, cache_input *ci)
{
        cache_input *drop = NULL;
        cache_input *cool[8];
        size_t n_cool = 0;
        pthread_mutex_lock(&c->lock);
        ci->refs--;
        ci->last_used_ns = c->ops.now_ns();
        if (ci->refs == 0) {
                if (ci->stale || ci->state == ENTRY_FAILED) {
                        for (cache_input **pp = &e->inputs; *pp; pp = &(*pp)->next)
                                if (*pp == ci) {
                                        *pp = ci->next;
                                        break;
                                }
                        drop = ci;
                } else {
                        e->n_idle_inputs++;
                }
        }
        /* Past the cap, the least recently used idle ones go. */
        while (!drop && e->n_idle_inputs > CACHE_MAX_IDLE_INPUTS) {
                cache_input **victim = NULL;
                for (cache_input **pp = &e->inputs; *pp; pp = &(*pp)->next)
                        if ((*pp)->refs == 0)
                                victim = pp;
                if (!victim)
                        break;
                drop = *victim;
                *victim = drop->next;
                e->n_idle_inputs--;
        }
        /* Held (a reference each) while their overlays go, without the
         * lock: letting a mount go may wait for the kernel. An input used
         * again meanwhile makes its overlay anew. */
        if (!drop && !ci->cooling && e->n_idle_inputs > CACHE_HOT_INPUTS) {
                unsigned idle = 0;
                for (cache_input *o = e->inputs; o && n_cool < ARRAY_SIZE(cool); o = o->next)
                        if (o->refs == 0 && o->in && !o->cool && ++idle > CACHE_HOT_INPUTS) {
                                o->refs++;
                                o->cool = o->cooling = true;
                                e->n_idle_inputs--;
                                cool[n_cool++] = o;
                        }
        }
        pthread_mutex_unlock(&c->lock);
        input_free_later(c, drop);
        for (size_t i = 0; i < n_cool; i++) {
                sbx_input_idle(cool[i]->in);
                input_release(c, e, cool[i]); /* still cooling: no new round */
        }
}

/* The workspace signature at the end of an input key (its last field,
 * "signature:32:HEX\n"), or NULL. */
static const char *key_signature(const char *key)
{
        size_t n = strlen(key), f = strlen("signature:32:");
        if (n < f + FSX_SIGNATURE_HEX || key[n - 1] != '\n')
                return NULL;
        const char *p = key + n - FSX_SIGNATURE_HEX - f;
        return memcmp(p, "signature:32:", f) == 0 ? p + f : NULL;
}

static void dirs_free(char **dirs, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(dirs[i]);
        free(dirs);
}

/* The directories of cfg's workspace whose files changed between the
 * versions from_key and to_key, as the workspace's watcher saw them
 * (fsx_watch_delta); NULL when it cannot tell (a workspace with mounts, no
 * watcher, changes it did not follow): then the whole tree is staged. */
static char **input_delta(airlock_cache *c, const airlock_config *cfg, const char *from_key,
                          const char *to_key, size_t *ret_n, char ***ret_files, size_t *ret_nf,
                          fsx_hashes *ret_known)
{
        *ret_n = *ret_nf = 0;
        *ret_files = NULL;
        *ret_known = (fsx_hashes){0};
        if (!cfg->workspace || cfg->n_mounts)
                return NULL;
        const char *from = key_signature(from_key), *to = key_signature(to_key);
        const fsx_limits lim = sbx_stage_limits(cfg);
        _cleanup_free_ char *tk = cache_tree_key(cfg, &lim);
        if (!from || !to || !tk)
                return NULL;
        char fh[FSX_SIGNATURE_HEX], th[FSX_SIGNATURE_HEX];
        memcpy(fh, from, FSX_SIGNATURE_HEX - 1);
        memcpy(th, to, FSX_SIGNATURE_HEX - 1);
        fh[FSX_SIGNATURE_HEX - 1] = th[FSX_SIGNATURE_HEX - 1] = '\0';
        char **dirs = cache_trees_delta(&c->trees, tk, fh, th, ret_n, ret_files, ret_nf);
        /* What the signature of th read of those directories' files: staging
         * compares each copy with it instead of reading the source again. */
        if (dirs)
                (void)cache_trees_hashes(&c->trees, tk, th, (const char *const *)dirs, *ret_n,
                                         ret_known);
        return dirs;
}

/* Contract: finds or stages the input version key (tree key, then the
 * trees' signatures) of cfg for the late-input sandbox of e, and takes a
 * reference on it. Each version is staged once, however many runs want
 * it at once (the others wait for it). A new version of the same trees
 * costs what changed: the watcher names the directories whose files
 * changed since the version before (input_delta), and only those are
 * staged again, where the version before stands when nothing holds it
 * (sbx_input_update), else as a layer over it (sbx_input_new), which then
 * stays whole for its runs and sessions; the stale one is removed when its
 * last run or session lets it go (its files stay while a layer over them
 * does).
 * The staged tree is owned by e's guest ids, and only e's copies ever
 * see it. Caller holds a reference on e. */
/* Stages the new version ci of the entry e's input (ENTRY_BUILDING, one
 * reference of the caller's): in place over taken when nothing held the
 * version before, else beside prev (held by one reference of the build's,
 * dropped here), with the directories that changed since when the watch
 * can tell them. Wakes the runs that wait for it; a failure stays in
 * ci->build_err and leaves prev usable. */
static void input_build(airlock_cache *c, cache_entry *e, const airlock_config *cfg,
                        const char *key, cache_input *ci, cache_input *prev, cache_input *taken)
{
        uid_t uid = (uid_t)-1;
        gid_t gid = (gid_t)-1;
        if (geteuid() == 0)
                sbx_guest_ids(e->sb, &uid, &gid);
        sbx_input *in = NULL;
        airlock_error berr = {0};
        int r;
        const cache_input *from = taken ? taken : prev;
        size_t n_dirs = 0, n_files = 0;
        fsx_hashes known = {0};
        char **files = NULL;
        char **dirs =
            from ? input_delta(c, cfg, from->key, key, &n_dirs, &files, &n_files, &known) : NULL;
        if (taken) {
                r = sbx_input_update(cfg, TAKE_PTR(taken->in), (const char *const *)dirs, n_dirs,
                                     (const char *const *)files, n_files, &known,
                                     sbx_sandbox_mounter(e->sb), &in, &berr);
                input_free(taken);
        } else {
                r = sbx_input_new(cfg, uid, gid, prev ? prev->in : NULL, (const char *const *)dirs,
                                  n_dirs, (const char *const *)files, n_files, &known,
                                  sbx_sandbox_mounter(e->sb), &in, &berr);
        }
        dirs_free(dirs, n_dirs);
        dirs_free(files, n_files);
        fsx_hashes_free(&known);
        pthread_mutex_lock(&c->lock);
        if (r < 0) {
                ci->state = ENTRY_FAILED;
                ci->build_err = berr;
                if (!ci->build_err.code)
                        ci->build_err.code = r;
                /* The next run stages again (the cause may be
                 * fixed by then); the one before stays usable. */
                if (prev)
                        prev->stale = false;
        } else {
                ci->in = in;
                ci->state = ENTRY_READY;
                c->stats.inputs_staged++;
                c->stats.input_files_staged += sbx_input_files_staged(in);
        }
        pthread_cond_broadcast(&c->changed);
        pthread_mutex_unlock(&c->lock);
        if (prev)
                input_release(c, e, prev);
}

static int input_acquire(airlock_cache *c, cache_entry *e, const airlock_config *cfg,
                         const char *key, al_watch *w, cache_input **ret, airlock_error *err)
{
        /* The key starts with the trees' key (tree_key): a version of the
         * same trees shares that part. */
        const fsx_limits lim = sbx_stage_limits(cfg);
        _cleanup_free_ char *tk = cache_tree_key(cfg, &lim);
        if (!tk)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        size_t tk_len = strlen(tk);
        pthread_mutex_lock(&c->lock);
        cache_input *ci = NULL, *prev = NULL, *taken = NULL, **pp = &e->inputs;
        for (; *pp; pp = &(*pp)->next) {
                cache_input *o = *pp;
                if (o->stale || o->state == ENTRY_FAILED)
                        continue;
                if (strcmp(o->key, key) == 0) {
                        ci = o;
                        *pp = o->next;
                        break;
                }
                if (!prev && o->tk_len == tk_len && memcmp(o->key, key, tk_len) == 0 &&
                    o->state == ENTRY_READY)
                        prev = o;
        }
        bool build = false;
        if (ci) {
                if (ci->refs++ == 0)
                        e->n_idle_inputs--;
                ci->cool = ci->cooling = false;
        } else {
                ci = calloc(1, sizeof(*ci));
                if (!ci || !(ci->key = strdup(key))) {
                        free(ci);
                        pthread_mutex_unlock(&c->lock);
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                }
                ci->tk_len = tk_len;
                ci->state = ENTRY_BUILDING;
                ci->refs = 1;
                build = true;
                if (prev && prev->refs == 0 && sbx_input_updatable(cfg, prev->in)) {
                        /* Nothing uses it, and nothing can begin to once
                         * it is off the list: the new version is made
                         * where it stands (sbx_input_update). */
                        for (cache_input **q = &e->inputs; *q; q = &(*q)->next)
                                if (*q == prev) {
                                        *q = prev->next;
                                        break;
                                }
                        e->n_idle_inputs--;
                        taken = prev;
                        prev = NULL;
                } else if (prev) {
                        /* Held until the new version is staged from it. */
                        prev->stale = true;
                        if (prev->refs++ == 0)
                                e->n_idle_inputs--;
                }
        }
        ci->next = e->inputs;
        e->inputs = ci;
        pthread_mutex_unlock(&c->lock);

        if (build) {
                input_build(c, e, cfg, key, ci, prev, taken);
        } else {
                wait_built(c, &ci->state, w);
        }
        if (ci->state == ENTRY_FAILED) {
                int r = ci->build_err.code < 0 ? ci->build_err.code : -EIO;
                if (err)
                        *err = ci->build_err;
                input_release(c, e, ci);
                return r;
        }
        *ret = ci;
        return 0;
}

/* Waits for one of the max_parallel run slots, firing w (may be NULL)
 * before it waits. */
static int slot_acquire(airlock_cache *c, al_watch *w, airlock_error *err)
{
        pthread_mutex_lock(&c->lock);
        while (!c->closing && c->running >= c->max_parallel) {
                pthread_mutex_unlock(&c->lock);
                al_watch_fire(w);
                pthread_mutex_lock(&c->lock);
                if (c->closing || c->running < c->max_parallel)
                        break;
                pthread_cond_wait(&c->changed, &c->lock);
        }
        if (c->closing) {
                pthread_mutex_unlock(&c->lock);
                return al_error(err, -ECANCELED, NULL, "the sandbox cache is closing");
        }
        c->running++;
        pthread_mutex_unlock(&c->lock);
        return 0;
}

static void slot_release(airlock_cache *c)
{
        pthread_mutex_lock(&c->lock);
        c->running--;
        pthread_cond_broadcast(&c->changed);
        pthread_mutex_unlock(&c->lock);
}

static int cache_run(airlock_cache *c, const airlock_config *cfg, const char *code, size_t len,
                     const airlock_run_options *opts, al_watch *w, airlock_result **ret,
                     airlock_error *err);

int airlock_cache_run(airlock_cache *c, const airlock_config *cfg, const char *code, size_t len,
                      const airlock_run_options *opts, airlock_result **ret, airlock_error *err)
{
        airlock_error_clear(err);
        if (!c || !cfg || (!code && len))
                return al_error(err, -EINVAL, NULL,
                                "cache run: missing cache, configuration or code");
        airlock_run_options o;
        int r = al_run_options_in(opts, &o, err);
        if (r < 0)
                return r;
        /* The outermost layer of this call: its watch starts here, and the
         * sandbox's run fires the same one (sbx_run_watched). */
        al_watch w = al_watch_from(&o);
        return cache_run(c, cfg, code, len, &o, &w, ret, err);
}

static int cache_run(airlock_cache *c, const airlock_config *cfg, const char *code, size_t len,
                     const airlock_run_options *opts, al_watch *w, airlock_result **ret,
                     airlock_error *err)
{
        /* The tree signatures of a workspace and mounts are read at every
         * run, which takes as long as their trees are large. */
        if (cfg->workspace || cfg->n_mounts)
                al_watch_fire(w);
        _cleanup_free_ char *key = NULL, *input_key = NULL;
        size_t static_len = 0;
        int r = cache_fingerprint_parts(&c->trees, cache_takes_late(c), cfg, &key, &static_len,
                                        &input_key, err);
        if (r < 0)
                return r;
        uint64_t hash = cache_fnv1a(key);
        r = slot_acquire(c, w, err);
        if (r < 0)
                return r;
        /* A sandbox whose template died is closed and rebuilt once, and the
         * run tried again on the new one; a second death is reported. */
        for (int attempt = 0;; attempt++) {
                cache_entry *e = NULL;
                r = entry_acquire(c, cfg, key, static_len, hash, w, &e, err);
                if (r < 0)
                        break;
                airlock_result *res = NULL;
                cache_input *ci = NULL;
                if (e->late && input_key) {
                        r = input_acquire(c, e, cfg, input_key, w, &ci, err);
                        if (r < 0) {
                                entry_release(c, e);
                                break;
                        }
                }
                if (e->late)
                        r = c->ops.sandbox_run_input(e->sb, ci ? ci->in : NULL, code ? code : "",
                                                     len, opts, w, &res, err);
                else
                        r = c->ops.sandbox_run(e->sb, code ? code : "", len, opts, w, &res, err);
                if (ci)
                        input_release(c, e, ci);
                if (r >= 0) {
                        entry_release(c, e);
                        *ret = res;
                        break;
                }
                if (!template_died(r)) {
                        entry_release(c, e);
                        break;
                }
                close_list l = {0};
                pthread_mutex_lock(&c->lock);
                close_list_add(&l, entry_doom_locked(c, e));
                if (attempt == 0)
                        c->stats.rebuilds++;
                pthread_mutex_unlock(&c->lock);
                close_list_run(c, &l);
                entry_release(c, e);
                if (attempt > 0)
                        break;
        }
        slot_release(c);
        return r;
}

/* A session's hold on the cache entry whose sandbox it runs in: the entry
 * (and its sandbox) stays until the session is closed, even once the cache
 * has replaced it (a changed workspace) or evicted it. */
typedef struct cache_hold {
        airlock_cache *c;
        cache_entry *e;
        cache_input *ci; /* the input it opened with (late input), or NULL */
} cache_hold;

static void cache_hold_release(void *arg)
{
        cache_hold *h = arg;
        if (h->ci)
                input_release(h->c, h->e, h->ci);
        entry_release(h->c, h->e);
        free(h);
}

int airlock_cache_session_open(airlock_cache *c, const airlock_config *cfg, airlock_session **ret,
                               airlock_error *err)
{
        airlock_error_clear(err);
        if (!c || !cfg || !ret)
                return al_error(err, -EINVAL, NULL,
                                "cache session: missing cache, configuration or result");
        _cleanup_free_ char *key = NULL, *input_key = NULL;
        size_t static_len = 0;
        int r = cache_fingerprint_parts(&c->trees, cache_takes_late(c), cfg, &key, &static_len,
                                        &input_key, err);
        if (r < 0)
                return r;
        cache_hold *h = calloc(1, sizeof(*h));
        if (!h)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        h->c = c;
        r = slot_acquire(c, NULL, err);
        if (r >= 0) {
                r = entry_acquire(c, cfg, key, static_len, cache_fnv1a(key), NULL, &h->e, err);
                if (r >= 0 && h->e->late && input_key)
                        r = input_acquire(c, h->e, cfg, input_key, NULL, &h->ci, err);
                if (r >= 0 && h->e->late)
                        r = c->ops.session_open_input(h->e->sb, h->ci ? h->ci->in : NULL, ret, err);
                else if (r >= 0)
                        r = airlock_session_open(h->e->sb, ret, err);
                if (r >= 0) {
                        sbx_session_on_close(*ret, cache_hold_release, h);
                } else if (h->e) {
                        if (h->ci)
                                input_release(c, h->e, h->ci);
                        entry_release(c, h->e);
                }
                slot_release(c);
        }
        if (r < 0)
                free(h);
        return r;
}

/* Adds "workspace_watch" (how changes of the trees are detected, and the
 * watches held) to a sandbox's describe JSON, and a warning when the trees
 * are walked at every call. text is consumed. */
static char *with_watch_report(airlock_cache *c, const airlock_config *cfg, char *text)
{
        _cleanup_free_ char *warning = NULL;
        json_t *report = cache_trees_report(&c->trees, cfg, &warning);
        if (!report)
                return text;
        json_t *o = json_loads(text, 0, NULL);
        if (!o || !json_is_object(o)) {
                json_decref(o);
                json_decref(report);
                return text;
        }
        json_object_set_new(o, "workspace_watch", report);
        json_t *w = json_object_get(o, "warnings");
        if (warning && json_is_array(w))
                json_array_append_new(w, json_string(warning));
        char *out = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(o);
        if (!out)
                return text;
        free(text);
        return out;
}

char *airlock_cache_describe_json(airlock_cache *c, const airlock_config *cfg, airlock_error *err)
{
        airlock_error_clear(err);
        if (!c || !cfg) {
                al_error(err, -EINVAL, NULL, "cache describe: missing cache or configuration");
                return NULL;
        }
        _cleanup_free_ char *key = NULL;
        size_t static_len = 0;
        if (cache_fingerprint_parts(&c->trees, cache_takes_late(c), cfg, &key, &static_len, NULL,
                                    err) < 0 ||
            slot_acquire(c, NULL, err) < 0)
                return NULL;
        cache_entry *e = NULL;
        char *text = NULL;
        if (entry_acquire(c, cfg, key, static_len, cache_fnv1a(key), NULL, &e, err) >= 0) {
                /* A late-input sandbox serves many workspaces: the text
                 * names the caller's, never the one it was built for. */
                text = e->late ? sbx_describe_json_for(e->sb, cfg, err)
                               : airlock_sandbox_describe_json(e->sb, err);
                entry_release(c, e);
        }
        slot_release(c);
        return text ? with_watch_report(c, cfg, text) : NULL;
}

/* Whether the fingerprint field f (of flen bytes) is in the first n bytes
 * of key. A field is "name:length:value\n", so a workspace's field never
 * matches another path; a match inside some other field's value (a tool's
 * description that quotes it) only closes a sandbox early. */
static bool key_has_field(const char *key, size_t n, const char *f, size_t flen)
{
        return flen <= n && memmem(key, n, f, flen) != NULL;
}

/* The fingerprint's field of the workspace at path, as cache_fingerprint.c
 * writes it ("workspace:LEN:PATH\n"): what a key holds when its tree set
 * starts with that workspace. Malloc'd; NULL when there is no cache or no
 * path (nothing to do) or out of memory. */
static char *workspace_field(const airlock_cache *c, const char *path)
{
        char *field = NULL;
        if (!c || !path || !*path)
                return NULL;
        return asprintf(&field, "workspace:%zu:%s\n", strlen(path), path) < 0 ? NULL : field;
}

/* Contract: after this, the cache holds nothing of the workspace at path
 * but what runs and sessions in progress use, and that goes when the last
 * of them ends: every staged version of a tree set that starts with the
 * workspace (any caps, any mounts) is freed now when unused, else marked
 * stale (input_release frees a stale input with its last reference, and
 * input_acquire never hands one out again); its unused change watch is
 * closed; a sandbox keyed to it (with upstream servers, a sandbox per
 * workspace) is doomed, closed by its last user. A later run of the same
 * workspace stages it afresh. */
void airlock_cache_forget_workspace(airlock_cache *c, const char *path)
{
        _cleanup_free_ char *field = workspace_field(c, path);
        if (!field)
                return;
        size_t flen = strlen(field);
        cache_input *drop = NULL;
        close_list l = {0};
        pthread_mutex_lock(&c->lock);
        for (cache_entry *e = c->head, *next; e; e = next) {
                next = e->next;
                if (!e->late) {
                        if (key_has_field(e->key, e->static_len, field, flen))
                                close_list_add(&l, entry_doom_locked(c, e));
                        continue;
                }
                for (cache_input **pp = &e->inputs; *pp;) {
                        cache_input *ci = *pp;
                        /* The tree key is the caps' line, then the
                         * workspace's field. */
                        const char *nl = memchr(ci->key, '\n', ci->tk_len);
                        bool mine = nl && (size_t)(ci->key + ci->tk_len - (nl + 1)) >= flen &&
                                    memcmp(nl + 1, field, flen) == 0;
                        if (!mine) {
                                pp = &ci->next;
                                continue;
                        }
                        if (ci->refs > 0) {
                                ci->stale = true;
                                pp = &ci->next;
                                continue;
                        }
                        *pp = ci->next;
                        e->n_idle_inputs--;
                        ci->next = drop;
                        drop = ci;
                }
        }
        pthread_mutex_unlock(&c->lock);
        while (drop) {
                cache_input *next = drop->next;
                input_free_later(c, drop);
                drop = next;
        }
        cache_trees_forget(&c->trees, field, flen);
        close_list_run_later(c, &l);
}

void airlock_cache_workspace_changed(airlock_cache *c, const char *path)
{
        _cleanup_free_ char *field = workspace_field(c, path);
        if (!field)
                return;
        cache_trees_changed(&c->trees, field, strlen(field));
}

void airlock_cache_workspace_changed_in(airlock_cache *c, const char *path, const char *const *dirs,
                                        size_t n)
{
        if (!n || !dirs) {
                airlock_cache_workspace_changed(c, path);
                return;
        }
        _cleanup_free_ char *field = workspace_field(c, path);
        if (!field)
                return;
        cache_trees_changed_in(&c->trees, field, strlen(field), dirs, n);
}

void airlock_cache_workspace_files_changed(airlock_cache *c, const char *path,
                                           const char *const *files, const uint64_t *sizes,
                                           const char *const *hashes, size_t n)
{
        if (!n || !files || !sizes || !hashes || n > 64) {
                airlock_cache_workspace_changed(c, path);
                return;
        }
        _cleanup_free_ char *field = workspace_field(c, path);
        _cleanup_free_ fsx_file_change *v = calloc(n, sizeof(*v));
        if (!field)
                return;
        if (!v) {
                cache_trees_changed(&c->trees, field, strlen(field));
                return;
        }
        for (size_t i = 0; i < n; i++) {
                if (!files[i]) {
                        cache_trees_changed(&c->trees, field, strlen(field));
                        return;
                }
                v[i] = (fsx_file_change){.rel = files[i], .removed = !hashes[i], .size = sizes[i]};
                if (hashes[i])
                        snprintf(v[i].hex, sizeof(v[i].hex), "%s", hashes[i]);
        }
        cache_trees_files_changed(&c->trees, field, strlen(field), v, n);
}

void airlock_content_hash(const void *data, size_t len, char ret_hex[33])
{
        fsx_content_hash(data, len, ret_hex);
}

void airlock_cache_close(airlock_cache *c)
{
        if (!c)
                return;
        pthread_mutex_lock(&c->lock);
        c->closing = true;
        pthread_cond_broadcast(&c->changed);
        pthread_cond_broadcast(&c->reaper_wake);
        /* Runs in progress finish first: their sandboxes are closed by them
         * or below, never under them. */
        while (c->running > 0 || c->closing_later > 0)
                pthread_cond_wait(&c->changed, &c->lock);
        pthread_mutex_unlock(&c->lock);
        if (c->reaper_started)
                pthread_join(c->reaper, NULL);
        close_list l = {0};
        pthread_mutex_lock(&c->lock);
        while (c->head)
                close_list_add(&l, entry_doom_locked(c, c->head));
        pthread_mutex_unlock(&c->lock);
        close_list_run(c, &l);
        cache_trees_destroy(&c->trees);
        pthread_cond_destroy(&c->reaper_wake);
        pthread_cond_destroy(&c->changed);
        pthread_mutex_destroy(&c->lock);
        free(c);
}
