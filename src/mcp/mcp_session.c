/* Sessions of `airlock mcp` as handles (see mcp_session.h). A handle is
 * "sess_" and 26 base32 characters of 128 bits from getrandom: it cannot be
 * guessed, and it names a session only in the table of the server process
 * that made it, so it is bound to that process. A handle that is not in the
 * table is a tool error that names it and says whether it was closed,
 * expired or never known here.
 *
 * A session is used by one call at a time (a second call meanwhile is told
 * so); closing a session that runs a cell closes it when the cell ends. A
 * thread closes idle and old sessions; caps are checked when a session is
 * opened (how many) and after each cell (the memory it holds). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base.h"
#include "mcp.h"
#include "mcp_session.h"
#include "quota.h"

#define HANDLE_PREFIX "sess_"
#define HANDLE_RANDOM 26 /* base32 characters of 128 bits */
/* "sess_", then under `airlock serve` the instance's name and "_", then
 * the random part: sess_<instance>_<random>, so that a load balancer can
 * route a call to the instance that holds its session. */
#define HANDLE_LEN     (sizeof(HANDLE_PREFIX) - 1 + MCP_INSTANCE_MAX + 1 + HANDLE_RANDOM)
#define TOMBSTONES     256
#define SWEEP_PERIOD_S 1.0

typedef struct entry {
        char handle[HANDLE_LEN + 1];
        /* Who opened it (the transport's owner: under `airlock serve` the
         * bearer token's identity), "" on stdio. Only the same owner finds
         * it: a handle shows in logs and in the text a client hands its
         * model, so it is no capability by itself. */
        char owner[MCP_OWNER_MAX + 1];
        airlock_session *s;
        uint64_t opened_ns, used_ns;
        unsigned cells;
        bool busy;
        bool closing;   /* close when the cell in progress ends */
        bool cancelled; /* the call in progress was cancelled: the next one waits for it */
        struct entry *next;
} entry;

/* How a session ended, told only to the owner that opened it: to anyone
 * else its handle is one never opened. */
typedef struct tombstone {
        char handle[HANDLE_LEN + 1];
        char owner[MCP_OWNER_MAX + 1];
        char why[160];
} tombstone;

struct mcp_sessions {
        airlock_cache *cache;
        const airlock_config *cfg;
        /* Where session_open takes the current configuration from, when
         * the server can swap it (mcp_sessions_set_config_source). */
        const airlock_config *(*cfg_get)(void *arg, const char *owner, void **ref,
                                         airlock_error *err);
        void (*cfg_put)(void *arg, void *ref);
        void *cfg_arg;
        mcp_session_caps caps;
        pthread_mutex_t lock;
        pthread_cond_t changed; /* a cell ended, or stopping */
        entry *head;
        unsigned n;
        tombstone dead[TOMBSTONES];
        unsigned n_dead; /* total written; the ring holds the last TOMBSTONES */
        bool stopping;
        pthread_t sweeper;
        bool sweeper_started;
        char instance[MCP_INSTANCE_MAX + 1]; /* named in new handles; "" on stdio */
        quota_table *quotas;                 /* per owner (airlock serve), or NULL */
};

struct mcp_session_use {
        mcp_sessions *m;
        entry *e;
};

static uint64_t now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the table --------------------------------------------------------- */

static int new_handle(const mcp_sessions *m, char *buf)
{
        static const char b32[] = "abcdefghijklmnopqrstuvwxyz234567";
        unsigned char rnd[16];
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
                return -EIO;
        char *p = stpcpy(buf, HANDLE_PREFIX);
        if (m->instance[0]) {
                p = stpcpy(p, m->instance);
                *p++ = '_';
        }
        unsigned acc = 0, bits = 0;
        for (size_t i = 0; i < sizeof(rnd); i++) {
                acc = (acc << 8) | rnd[i];
                bits += 8;
                while (bits >= 5) {
                        *p++ = b32[(acc >> (bits - 5)) & 31];
                        bits -= 5;
                }
        }
        if (bits)
                *p++ = b32[(acc << (5 - bits)) & 31];
        *p = '\0';
        return 0;
}

/* The open session named handle that owner opened, or NULL: another
 * owner's session is not found, so that it answers as a handle never
 * opened (no oracle for handles seen elsewhere). */
static entry *find_locked(mcp_sessions *m, const char *handle, const char *owner)
{
        for (entry *e = m->head; e; e = e->next)
                if (strcmp(e->handle, handle) == 0 && strcmp(e->owner, owner ? owner : "") == 0)
                        return e;
        return NULL;
}

/* find_locked, once a cancelled call's cell is rolled back: a call waits
 * for it rather than be refused as "running another call". Caller holds
 * m->lock, which the wait releases meanwhile. */
static entry *find_settled_locked(mcp_sessions *m, const char *handle, const char *owner)
{
        entry *e = find_locked(m, handle, owner);
        while (e && e->busy && e->cancelled) {
                pthread_cond_wait(&m->changed, &m->lock);
                e = find_locked(m, handle, owner);
        }
        return e;
}

static void unlink_locked(mcp_sessions *m, entry *e, const char *why)
{
        for (entry **p = &m->head; *p; p = &(*p)->next)
                if (*p == e) {
                        *p = e->next;
                        m->n--;
                        if (m->quotas)
                                quota_give(m->quotas, e->owner, QUOTA_SESSIONS);
                        break;
                }
        tombstone *t = &m->dead[m->n_dead++ % TOMBSTONES];
        snprintf(t->handle, sizeof(t->handle), "%s", e->handle);
        snprintf(t->owner, sizeof(t->owner), "%s", e->owner);
        snprintf(t->why, sizeof(t->why), "%s", why);
}

static void entry_close(entry *e)
{
        airlock_session_close(e->s);
        free(e);
}

bool mcp_session_handle_instance(const char *handle, char out[MCP_INSTANCE_MAX + 1])
{
        size_t pre = sizeof(HANDLE_PREFIX) - 1;
        if (strncmp(handle, HANDLE_PREFIX, pre) != 0)
                return false;
        const char *rest = handle + pre;
        const char *us = strrchr(rest, '_');
        if (!us || strlen(us + 1) != HANDLE_RANDOM)
                return false;
        size_t n = (size_t)(us - rest);
        if (!mcp_instance_valid(rest, n))
                return false;
        memcpy(out, rest, n);
        out[n] = '\0';
        return true;
}

void mcp_sessions_set_quotas(mcp_sessions *m, quota_table *quotas)
{
        m->quotas = quotas;
}

void mcp_sessions_set_instance(mcp_sessions *m, const char *instance)
{
        snprintf(m->instance, sizeof(m->instance), "%s", instance);
}

unsigned mcp_sessions_count(mcp_sessions *m)
{
        pthread_mutex_lock(&m->lock);
        unsigned n = m->n;
        pthread_mutex_unlock(&m->lock);
        return n;
}

/* The tool error for a handle that names no open session of owner's. How
 * a session ended (closed, expired, over its memory cap, and what it held)
 * is told only to the owner that opened it: another owner gets, byte for
 * byte, the answer for a handle never opened, whether the session is open,
 * ended or never was, so that a handle seen in a log or another client's
 * text tells it nothing. */
static json_t *unknown_handle(mcp_sessions *m, const char *handle, const char *owner)
{
        char msg[512];
        const char *why = NULL;
        pthread_mutex_lock(&m->lock);
        unsigned n = m->n_dead < TOMBSTONES ? m->n_dead : TOMBSTONES;
        for (unsigned i = 0; i < n; i++)
                if (strcmp(m->dead[i].handle, handle) == 0 &&
                    strcmp(m->dead[i].owner, owner ? owner : "") == 0)
                        why = m->dead[i].why;
        if (why)
                snprintf(msg, sizeof(msg),
                         "session %s is %s; open a new one with session_open (its variables "
                         "are gone)",
                         handle, why);
        pthread_mutex_unlock(&m->lock);
        char other[MCP_INSTANCE_MAX + 1];
        if (!why && mcp_session_handle_instance(handle, other) && strcmp(other, m->instance) != 0)
                snprintf(msg, sizeof(msg),
                         "session %s belongs to instance %s; this is %s. Send the call to the "
                         "instance that opened the session (if %s is gone, so is the session: "
                         "open a new one with session_open)",
                         handle, other,
                         m->instance[0] ? m->instance : "a server without an instance name", other);
        else if (!why)
                snprintf(msg, sizeof(msg),
                         "unknown session %.100s: this server never opened it (handles are "
                         "valid only in the server that made them, until it stops); open one "
                         "with session_open",
                         handle);
        _cleanup_free_ char *clean = al_utf8_sanitize(msg, strlen(msg));
        return mcp_tool_error(clean ? clean : msg);
}

/* Whether e has outlived --session-idle or --session-lifetime at now; if
 * so, why says what happened (how long it was unused or open) and the cap.
 * The sweeper and every call check it, so that no call gets through after
 * a cap however the sweeper's second falls. */
static bool expired_locked(const mcp_sessions *m, const entry *e, uint64_t now, char *why,
                           size_t len)
{
        /* Rounded up to hundredths, so that the time said is never the cap's
         * own figure ("unused for 1.00 s, more than 1 s"). */
        double unused = (double)((now - e->used_ns + 9999999) / 10000000) / 100;
        double open = (double)((now - e->opened_ns + 9999999) / 10000000) / 100;
        if (unused > m->caps.idle_s) {
                snprintf(why, len, "expired: unused for %.2f s, more than --session-idle %g s",
                         unused, m->caps.idle_s);
                return true;
        }
        if (open > m->caps.lifetime_s) {
                snprintf(why, len, "expired: open for %.2f s, more than --session-lifetime %g s",
                         open, m->caps.lifetime_s);
                return true;
        }
        return false;
}

/* Closes idle and old sessions, once a second. */
static void *sweep_main(void *arg)
{
        mcp_sessions *m = arg;
        pthread_mutex_lock(&m->lock);
        while (!m->stopping) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_sec += (time_t)SWEEP_PERIOD_S;
                pthread_cond_timedwait(&m->changed, &m->lock, &ts);
                entry *doomed = NULL;
                uint64_t now = now_ns();
                for (entry *e = m->head, *next; e; e = next) {
                        next = e->next;
                        if (e->busy)
                                continue;
                        char why[160];
                        if (expired_locked(m, e, now, why, sizeof(why))) {
                                unlink_locked(m, e, why);
                                e->next = doomed;
                                doomed = e;
                        }
                }
                pthread_mutex_unlock(&m->lock);
                while (doomed) {
                        entry *e = doomed;
                        doomed = e->next;
                        entry_close(e);
                }
                pthread_mutex_lock(&m->lock);
        }
        pthread_mutex_unlock(&m->lock);
        return NULL;
}

int mcp_sessions_new(airlock_cache *cache, const airlock_config *cfg, const mcp_session_caps *caps,
                     mcp_sessions **ret)
{
        mcp_sessions *m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->cache = cache;
        m->cfg = cfg;
        m->caps = *caps;
        pthread_mutex_init(&m->lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&m->changed, &ca);
        pthread_condattr_destroy(&ca);
        *ret = m;
        return 0;
}

void mcp_sessions_set_config_source(mcp_sessions *m,
                                    const airlock_config *(*get)(void *arg, const char *owner,
                                                                 void **ref, airlock_error *err),
                                    void (*put)(void *arg, void *ref), void *arg)
{
        m->cfg_get = get;
        m->cfg_put = put;
        m->cfg_arg = arg;
}

void mcp_sessions_free(mcp_sessions *m)
{
        if (!m)
                return;
        pthread_mutex_lock(&m->lock);
        m->stopping = true;
        pthread_cond_broadcast(&m->changed);
        pthread_mutex_unlock(&m->lock);
        if (m->sweeper_started)
                pthread_join(m->sweeper, NULL);
        pthread_mutex_lock(&m->lock);
        /* Cells in progress were cancelled by the server; they end soon. */
        for (;;) {
                bool busy = false;
                for (entry *e = m->head; e; e = e->next)
                        busy |= e->busy;
                if (!busy)
                        break;
                pthread_cond_wait(&m->changed, &m->lock);
        }
        entry *e = m->head;
        m->head = NULL;
        pthread_mutex_unlock(&m->lock);
        while (e) {
                entry *next = e->next;
                entry_close(e);
                e = next;
        }
        pthread_cond_destroy(&m->changed);
        pthread_mutex_destroy(&m->lock);
        free(m);
}

void mcp_sessions_close_owner(mcp_sessions *m, const char *owner, const char *why)
{
        entry *doomed = NULL;
        pthread_mutex_lock(&m->lock);
        for (entry *e = m->head, *next; e; e = next) {
                next = e->next;
                if (strcmp(e->owner, owner ? owner : "") != 0)
                        continue;
                unlink_locked(m, e, why);
                if (e->busy) {
                        e->closing = true; /* the cell in progress closes it */
                } else {
                        e->next = doomed;
                        doomed = e;
                }
        }
        pthread_mutex_unlock(&m->lock);
        while (doomed) {
                entry *e = doomed;
                doomed = e->next;
                entry_close(e);
        }
}

/* ---- the tools --------------------------------------------------------- */

json_t *mcp_sessions_open_description(const mcp_sessions *m)
{
        char open_desc[3072];
        snprintf(open_desc, sizeof(open_desc),
                 "Opens a Python session that keeps its state across execute_code calls, like a "
                 "notebook kernel: load data once, then ask about it in later calls. Returns a "
                 "handle (\"sess_...\"); pass it as execute_code's \"session\" argument.\n"
                 "- Each call is a transaction. If it succeeds, its variables, imports and objects "
                 "stay; if it fails, times out, hits a limit or is cancelled, they are as they "
                 "were before the call, and the result says \"state kept\" or \"state rolled "
                 "back\".\n"
                 "- In a session the value of a final expression is shown (its repr, or an image "
                 "for a figure or an object with _repr_png_); a fresh run shows nothing for it.\n"
                 "- Survives a successful call: variables, imports, open files, threads, child "
                 "processes, files in /tmp. Nothing of a session runs between its calls: child "
                 "processes stay alive but stopped until the session's next call, and a thread's "
                 "tool calls wait for it. A rollback restores the variables and imports but not "
                 "files in /tmp or what a call wrote to files, and it ends the threads and child "
                 "processes of earlier calls. /output is fresh for every call.\n"
                 "- A session refuses shared memory (mmap.mmap(-1, n), memfds, SysV segments, "
                 "/dev/shm, and so multiprocessing's locks, queues and pools): a rollback or a "
                 "fork could not give each state its own copy. A call without a session has "
                 "it.\n"
                 "- A session sees /input as it was when it opened; open a new session to see a "
                 "changed workspace.\n"
                 "- session_fork copies a session, variables included, into a new handle in "
                 "milliseconds: try something risky or two ideas side by side; the two then "
                 "share /tmp and /output but not variables.\n"
                 "- At most %u sessions at once (forks count); one is closed after %g minutes "
                 "unused, after %g hours, or when it holds more than %llu MiB between calls. "
                 "Close it with session_close when done.",
                 m->caps.max_sessions, m->caps.idle_s / 60, m->caps.lifetime_s / 3600,
                 (unsigned long long)(m->caps.max_memory >> 20));
        return json_string(open_desc);
}

static json_t *text_result(const char *text, const char *handle)
{
        /* The handle is in the text, which every client hands its model, and
         * for programs in _meta. */
        return json_pack("{s:[{s:s, s:s}], s:{s:s}, s:b}", "content", "type", "text", "text", text,
                         "_meta", MCP_META_SESSION, handle, "isError", 0);
}

/* The answer of session_open and session_fork: text_result's, and the new
 * handle as structuredContent ({"session"}), which their outputSchema
 * (tools.c) describes, as the workspace tools give theirs. */
static json_t *handle_result(const char *text, const char *handle)
{
        json_t *r = text_result(text, handle);
        if (r &&
            json_object_set_new(r, "structuredContent", json_pack("{s:s}", "session", handle)) < 0)
                json_decref(TAKE_PTR(r));
        return r;
}

/* Counts one more session of owner's (a fork counts as one), under the
 * lock, or returns the tool error. With per-owner quotas (airlock serve)
 * owner's own quota is checked first, then the server-wide cap, and the
 * refusal names only owner's own sessions and limit: how many the other
 * owners hold is theirs. */
static json_t *count_session_locked(mcp_sessions *m, const char *owner, bool fork)
{
        char msg[300];
        const char *more = fork ? ", and a fork is one more" : "";
        if (m->quotas) {
                unsigned held = 0, limit = 0;
                int r = quota_take(m->quotas, owner, QUOTA_SESSIONS, &held, &limit);
                if (r == -ENOMEM)
                        return mcp_tool_error("out of memory");
                if (r < 0) {
                        bool own = false;
                        (void)quota_limit(m->quotas, owner, QUOTA_SESSIONS, &own);
                        snprintf(msg, sizeof(msg),
                                 "too many sessions: you have %u open, your limit (%s %u)%s; "
                                 "close one with session_close",
                                 held,
                                 own ? "max-sessions of your tenant" : "--max-sessions-per-token",
                                 limit, more);
                        return mcp_tool_error(msg);
                }
                if (m->n >= m->caps.max_sessions) {
                        quota_give(m->quotas, owner, QUOTA_SESSIONS);
                        snprintf(msg, sizeof(msg),
                                 "no session can be opened now: this server's sessions are all "
                                 "taken (--max-sessions, shared by every client); you have %u "
                                 "open. Close one of yours with session_close, or retry later",
                                 held);
                        return mcp_tool_error(msg);
                }
        } else if (m->n >= m->caps.max_sessions) {
                snprintf(msg, sizeof(msg),
                         "too many sessions: %u are open, the cap (--max-sessions %u)%s; close "
                         "one with session_close",
                         m->n, m->caps.max_sessions, more);
                return mcp_tool_error(msg);
        }
        /* Counted now, so that opens in parallel cannot pass the cap. */
        m->n++;
        return NULL;
}

/* Takes back what count_session_locked counted, for a session that did not
 * open. */
static void uncount_session_locked(mcp_sessions *m, const char *owner)
{
        m->n--;
        if (m->quotas)
                quota_give(m->quotas, owner, QUOTA_SESSIONS);
}

static json_t *session_open(mcp_sessions *m, const char *owner)
{
        pthread_mutex_lock(&m->lock);
        json_t *refused = count_session_locked(m, owner, false);
        if (refused) {
                pthread_mutex_unlock(&m->lock);
                return refused;
        }
        if (!m->sweeper_started && pthread_create(&m->sweeper, NULL, sweep_main, m) == 0)
                m->sweeper_started = true;
        pthread_mutex_unlock(&m->lock);
        entry *e = calloc(1, sizeof(*e));
        airlock_error err = {0};
        int r = e ? new_handle(m, e->handle) : -ENOMEM;
        if (r >= 0)
                snprintf(e->owner, sizeof(e->owner), "%s", owner ? owner : "");
        if (r >= 0) {
                /* The session keeps the sandbox made from the configuration
                 * current now; a later reload does not change it. */
                void *ref = NULL;
                const airlock_config *cfg =
                    m->cfg_get ? m->cfg_get(m->cfg_arg, owner, &ref, &err) : m->cfg;
                r = cfg ? airlock_cache_session_open(m->cache, cfg, &e->s, &err)
                        : (err.code < 0 ? err.code : -EINVAL);
                if (m->cfg_put)
                        m->cfg_put(m->cfg_arg, ref);
        }
        pthread_mutex_lock(&m->lock);
        if (r < 0) {
                uncount_session_locked(m, owner);
                pthread_mutex_unlock(&m->lock);
                free(e);
                char msg[AIRLOCK_MESSAGE_MAX + 64];
                snprintf(msg, sizeof(msg), "airlock could not open a session: %s",
                         err.message[0] ? err.message : strerror(-r));
                return mcp_tool_error(msg);
        }
        e->opened_ns = e->used_ns = now_ns();
        e->next = m->head;
        m->head = e;
        pthread_mutex_unlock(&m->lock);
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "Session %s is open. Pass \"session\": \"%s\" to execute_code to run code in "
                 "it; close it with session_close when done.",
                 e->handle, e->handle);
        return handle_result(msg, e->handle);
}

/* A fork of an open session: a new entry, counted against the cap, whose
 * lifetime runs from when the session it copies (or the first of its
 * line) was opened, so that forking cannot keep a copy alive past
 * --session-lifetime. The session forked is busy meanwhile, as for a
 * cell. */
static json_t *session_fork(mcp_sessions *m, const json_t *args, const char *owner)
{
        /* A string: the tool table's schema says so (mcp_tool_check). */
        const char *handle = json_string_value(json_object_get(args, "session"));
        pthread_mutex_lock(&m->lock);
        /* As for a cell: a cancelled call's rollback is waited for. */
        entry *e = find_settled_locked(m, handle, owner);
        if (!e) {
                pthread_mutex_unlock(&m->lock);
                return unknown_handle(m, handle, owner);
        }
        /* The handle as the table spells it: a known length from here on. */
        char h[HANDLE_LEN + 1];
        snprintf(h, sizeof(h), "%s", e->handle);
        handle = h;
        char msg[AIRLOCK_MESSAGE_MAX + 256];
        if (e->busy) {
                pthread_mutex_unlock(&m->lock);
                snprintf(msg, sizeof(msg),
                         "session %s is running another call; fork it when that call has "
                         "finished",
                         handle);
                return mcp_tool_error(msg);
        }
        char why[160];
        if (expired_locked(m, e, now_ns(), why, sizeof(why))) {
                unlink_locked(m, e, why);
                pthread_mutex_unlock(&m->lock);
                entry_close(e);
                return unknown_handle(m, handle, owner);
        }
        json_t *refused = count_session_locked(m, e->owner, true);
        if (refused) {
                pthread_mutex_unlock(&m->lock);
                return refused;
        }
        e->busy = true;
        pthread_mutex_unlock(&m->lock);
        entry *n = calloc(1, sizeof(*n));
        airlock_error err = {0};
        int r = n ? new_handle(m, n->handle) : -ENOMEM;
        /* The copy belongs to whoever owns what it copies. */
        if (r >= 0)
                snprintf(n->owner, sizeof(n->owner), "%s", e->owner);
        if (r >= 0)
                r = airlock_session_fork(e->s, &n->s, &err);
        pthread_mutex_lock(&m->lock);
        e->busy = false;
        e->used_ns = now_ns();
        bool close_it = e->closing;
        if (r < 0) {
                uncount_session_locked(m, e->owner);
                free(n);
                n = NULL;
        } else {
                n->opened_ns = e->opened_ns;
                n->used_ns = now_ns();
                n->next = m->head;
                m->head = n;
        }
        pthread_cond_broadcast(&m->changed);
        pthread_mutex_unlock(&m->lock);
        if (close_it)
                entry_close(e);
        if (!n) {
                snprintf(msg, sizeof(msg), "airlock could not fork session %s: %s", handle,
                         err.message[0] ? err.message : strerror(-r));
                return mcp_tool_error(msg);
        }
        snprintf(msg, sizeof(msg),
                 "Session %s is open: a copy of session %s as it is now, variables included. "
                 "Pass \"session\": \"%s\" to execute_code to run code in it; %s is "
                 "unchanged and stays open. Close each with session_close when done.",
                 n->handle, handle, n->handle, handle);
        return handle_result(msg, n->handle);
}

static json_t *session_close(mcp_sessions *m, const json_t *args, const char *owner)
{
        /* A string: the tool table's schema says so (mcp_tool_check). */
        const char *handle = json_string_value(json_object_get(args, "session"));
        pthread_mutex_lock(&m->lock);
        entry *e = find_locked(m, handle, owner);
        if (!e) {
                pthread_mutex_unlock(&m->lock);
                return unknown_handle(m, handle, owner);
        }
        unlink_locked(m, e, "closed (session_close)");
        bool busy = e->busy;
        if (busy)
                e->closing = true; /* the cell in progress closes it */
        pthread_mutex_unlock(&m->lock);
        if (!busy)
                entry_close(e);
        char msg[256];
        snprintf(msg, sizeof(msg), "Session %s is closed%s.", handle,
                 busy ? " (once the call running in it ends)" : "");
        return text_result(msg, handle);
}

json_t *mcp_sessions_open(mcp_sessions *m, const json_t *args, const char *owner)
{
        return session_open(m, owner);
}

json_t *mcp_sessions_fork(mcp_sessions *m, const json_t *args, const char *owner)
{
        return session_fork(m, args, owner);
}

json_t *mcp_sessions_close(mcp_sessions *m, const json_t *args, const char *owner)
{
        return session_close(m, args, owner);
}

/* ---- execute_code in a session ----------------------------------------- */

json_t *mcp_sessions_begin(mcp_sessions *m, const json_t *handle, const char *owner,
                           mcp_session_use **ret)
{
        const char *h = json_string_value(handle);
        if (!h)
                return mcp_tool_error("execute_code: \"session\" must be a string, a handle "
                                      "from session_open");
        pthread_mutex_lock(&m->lock);
        entry *e = find_settled_locked(m, h, owner);
        if (e && e->busy) {
                pthread_mutex_unlock(&m->lock);
                char msg[256];
                snprintf(msg, sizeof(msg),
                         "session %s is running another call; wait for it to finish (one call "
                         "at a time per session)",
                         h);
                return mcp_tool_error(msg);
        }
        char why[160];
        if (e && expired_locked(m, e, now_ns(), why, sizeof(why))) {
                unlink_locked(m, e, why);
                pthread_mutex_unlock(&m->lock);
                entry_close(e);
                return unknown_handle(m, h, owner);
        }
        if (e)
                e->busy = true;
        pthread_mutex_unlock(&m->lock);
        if (!e)
                return unknown_handle(m, h, owner);
        mcp_session_use *u = malloc(sizeof(*u));
        if (!u) {
                pthread_mutex_lock(&m->lock);
                e->busy = false;
                pthread_mutex_unlock(&m->lock);
                return mcp_tool_error("out of memory");
        }
        *u = (mcp_session_use){m, e};
        *ret = u;
        return NULL;
}

int mcp_sessions_run(mcp_session_use *u, const char *code, size_t len,
                     const airlock_run_options *opts, airlock_result **ret, airlock_error *err)
{
        return airlock_session_run(u->e->s, code, len, opts, ret, err);
}

void mcp_sessions_cancelled(mcp_session_use *u)
{
        pthread_mutex_lock(&u->m->lock);
        u->e->cancelled = true;
        pthread_mutex_unlock(&u->m->lock);
}

/* Appends one text item, the session's note, to a CallToolResult's
 * content, and its kind ("session") to the run record's parts when the
 * result has one: docs/mcp.md promises that parts names each item of the
 * content, in order, and a client that reads the items by their kinds
 * must not take the note for the code's output. */
static void add_text(json_t *result, const char *text)
{
        json_t *content = json_object_get(result, "content");
        if (!json_is_array(content) ||
            json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", text)) <
                0)
                return;
        json_t *parts = json_object_get(
            json_object_get(json_object_get(result, "_meta"), MCP_META_RUN), "parts");
        if (json_is_array(parts))
                json_array_append_new(parts, json_string("session"));
}

json_t *mcp_sessions_end(mcp_session_use *u, json_t *result, const airlock_result *res)
{
        mcp_sessions *m = u->m;
        entry *e = u->e;
        free(u);
        char note[512] = "";
        const char *ended = NULL;
        if (!airlock_session_alive(e->s)) {
                snprintf(note, sizeof(note),
                         "Session %s ended: its state could not be kept or restored. Open a "
                         "new one with session_open.",
                         e->handle);
                ended = "ended (its interpreter could not be restored)";
        } else if (res && res->cell_state == AIRLOCK_CELL_KEPT) {
                snprintf(note, sizeof(note), "Session %s: state kept.", e->handle);
        } else if (res && res->cell_state == AIRLOCK_CELL_ROLLED_BACK) {
                snprintf(note, sizeof(note),
                         "Session %s: state rolled back: its variables and imports are as they "
                         "were before this call.",
                         e->handle);
        }
        /* The memory the session holds now, measured before the answer
         * (half a millisecond), so that a cell that takes the session past
         * --session-memory says so itself. */
        pthread_mutex_lock(&m->lock);
        bool closing = e->closing; /* session_close came meanwhile: nothing to measure */
        pthread_mutex_unlock(&m->lock);
        uint64_t held = 0;
        bool over = !ended && !closing && airlock_session_memory(e->s, &held, NULL) >= 0 &&
                    held > m->caps.max_memory;
        char over_why[160] = "";
        if (over) {
                snprintf(over_why, sizeof(over_why),
                         "closed: it held %llu MiB after a call, more than the cap of %llu MiB "
                         "(--session-memory)",
                         (unsigned long long)(held >> 20),
                         (unsigned long long)(m->caps.max_memory >> 20));
                snprintf(note, sizeof(note),
                         "Session %s is %s; its variables are gone. The output above is this "
                         "call's; open a new session with session_open and hold less.",
                         e->handle, over_why);
        }
        if (note[0] && result)
                add_text(result, note);
        if (over && result)
                json_object_set_new(result, "isError", json_true());
        json_t *rec =
            result ? json_object_get(json_object_get(result, "_meta"), MCP_META_RUN) : NULL;
        if (json_is_object(rec))
                json_object_set_new(rec, "session", json_string(e->handle));
        pthread_mutex_lock(&m->lock);
        e->busy = false;
        e->cancelled = false;
        e->used_ns = now_ns();
        e->cells++;
        bool close_it = e->closing;
        if ((ended || over) && !close_it) {
                unlink_locked(m, e, ended ? ended : over_why);
                close_it = true;
        }
        pthread_cond_broadcast(&m->changed);
        pthread_mutex_unlock(&m->lock);
        if (close_it)
                entry_close(e);
        return result;
}
