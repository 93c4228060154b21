/* airlock serve: the execute_code tool served over MCP's Streamable HTTP
 * transport (revisions 2025-11-25 and 2026-07-28) at /mcp, with GNU
 * libmicrohttpd parsing HTTP.
 *
 * Threading: libmicrohttpd's thread per connection. A tools/call blocks its
 * request until the run ends (seconds), so the run simply happens on its
 * connection's thread (mcp_core_run_here: no wake-up of another thread
 * either way), while one thread watches those sockets for a client that
 * leaves (hup_main); the number of connection threads is bounded by
 * --max-connections. A call that streams progress over SSE runs on the MCP
 * core's workers (mcp.c) while its thread writes the stream. A request takes
 * one of --max-runs run slots only once its whole body is in: a slow or
 * stalled client holds its own connection (closed after --http-timeout idle
 * seconds), never a run slot. Past the slots, at most --max-queue calls wait
 * for one (at most --queue-wait seconds, then 503); past that, 429 with
 * Retry-After.
 *
 * A POST carries one JSON-RPC message. A request is answered with
 * application/json; a tools/call that streams progress (its _meta has a
 * progressToken, and the client accepts text/event-stream) switches to an
 * SSE stream when its first notification comes, and the stream ends with the
 * response. Notifications and the client's responses get 202. A client that
 * disconnects cancels its run. The main thread handles the signals: SIGHUP
 * reloads the tokens and the configuration (reload_config), SIGTERM and
 * SIGINT drain (stop accepting, let calls finish for --grace seconds, cancel
 * the rest, close every session and sandbox). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "cli.h"
#include "mcp.h"
#include "mcp_core.h"
#include "mcp_session.h"
#include "quota.h"
#include "serve.h"
#include "tenants.h"
#include "tenant_workspace.h"

#define MAX_HEADER_MEM (64u << 10) /* headers of one request, libmicrohttpd's pool */
#define RETRY_AFTER_S  "1"

/* Revisions the MCP-Protocol-Version header may name. */
static const char *const http_versions[] = {"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26",
                                            "2024-11-05"};

/* ---- metrics ------------------------------------------------------------ */

enum call_status { ST_OK, ST_TOOL_ERROR, ST_RPC_ERROR, ST_CANCELLED, ST_REFUSED, ST_N };
static const char *const status_names[ST_N] = {"ok", "tool_error", "rpc_error", "cancelled",
                                               "refused"};
enum refusal {
        RF_BODY_TOO_LARGE,
        RF_QUEUE_FULL,
        RF_QUEUE_TIMEOUT,
        RF_DRAINING,
        RF_BAD_ORIGIN,
        RF_BAD_REQUEST,
        RF_BAD_VERSION,
        RF_WARMING_UP,
        RF_BODY_MEMORY,
        RF_SLOW_BODY,
        RF_N
};
static const char *const refusal_names[RF_N] = {
    "body_too_large", "queue_full",           "queue_timeout", "draining",    "bad_origin",
    "bad_request",    "bad_protocol_version", "warming_up",    "body_memory", "slow_body"};
static const double latency_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                         1,     2.5,  5,     10,   30,  60,   300};
#define N_BUCKETS ARRAY_SIZE(latency_buckets)

typedef struct metrics {
        atomic_ulong calls[ST_N];
        atomic_ulong refusals[RF_N];
        atomic_ulong auth_missing, auth_invalid;
        atomic_ulong http_requests;
        pthread_mutex_t hist_lock;
        unsigned long hist[N_BUCKETS + 1]; /* the last one is +Inf */
        double hist_sum;
        unsigned long hist_count;
} metrics;

/* ---- the server --------------------------------------------------------- */

typedef struct http_sink http_sink;

typedef struct server {
        serve_options opt;
        mcp_server *core;
        struct MHD_Daemon *d;
        metrics m;
        atomic_bool core_ready;  /* core may be used (it is built) */
        atomic_bool core_failed; /* the core could not be built: the server stops */
        atomic_bool ready, draining;
        atomic_bool unavailable; /* a warm-up run failed (and is retried) */
        /* The configuration options (argv without the serve and session
         * options), parsed again on SIGHUP; the strings are the process's. */
        int cfg_argc;
        char **cfg_argv;
        /* Tokens and their tenants (tenants.h), swapped whole on SIGHUP
         * under the write lock. */
        pthread_rwlock_t tokens_lock;
        tenant_table tt;
        /* Each tenant's sessions, runs and places in the queue (quota.h). */
        quota_table *quotas;
        unsigned max_sessions; /* --max-sessions, above every tenant's quota */
        /* --tenants-dir: the tenants' workspaces, or NULL. */
        mcp_workspaces *workspaces;
        /* Run slots and the bounded queue in front of them. */
        pthread_mutex_t slot_lock;
        pthread_cond_t slot_free;
        unsigned running, waiting;
        /* POSTs held until the core is built (hold_until_built), and the
         * condition that wakes them (under slot_lock). */
        unsigned held;
        pthread_cond_t built;
        atomic_uint requests;     /* HTTP requests in progress, for the drain */
        atomic_ullong body_bytes; /* request bodies held, against --max-body-total */
        /* Hang-ups (see hup_main). */
        int hup_ep, hup_stop;
        pthread_t hup_thread;
        bool hup_started;
        pthread_mutex_t hup_lock;
        struct hup_slot {
                http_sink *sink;
                uint32_t gen;
        } * hup;
        uint32_t *hup_free;
        unsigned n_hup, n_free;
} server;

static uint64_t mono_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void observe_latency(server *s, double sec)
{
        pthread_mutex_lock(&s->m.hist_lock);
        size_t i = 0;
        while (i < N_BUCKETS && sec > latency_buckets[i])
                i++;
        s->m.hist[i]++;
        s->m.hist_sum += sec;
        s->m.hist_count++;
        pthread_mutex_unlock(&s->m.hist_lock);
}

/* ---- tokens and tenants --------------------------------------------------- */

/* Compares a and b in time that depends on their lengths only, never on
 * where they differ. */
static bool same_secret(const char *a, size_t alen, const char *b, size_t blen)
{
        unsigned char diff = alen != blen;
        for (size_t i = 0; i < alen; i++)
                diff |= (unsigned char)a[i] ^ (unsigned char)(i < blen ? b[i] : 0);
        return diff == 0;
}

/* Checks a presented token against every configured one, each compared in
 * constant time and all of them always compared, so that the time tells
 * neither which token nor how much of one matched; a token is in the file
 * once (tenants_load). With a match, copies its tenant's name to owner (the
 * owner of the request's calls, sessions, runs' files and quotas: a tenant,
 * never the token or its line, so that a reload that drops, moves or adds
 * lines hands no tenant another's). Returns whether one matched. */
static bool check_token(server *s, const char *tok, size_t len, char *owner, size_t size)
{
        size_t found = 0;
        pthread_rwlock_rdlock(&s->tokens_lock);
        for (size_t i = 0; i < s->tt.n_tokens; i++) {
                bool eq = same_secret(tok, len, s->tt.tokens[i].token, s->tt.tokens[i].len);
                found |= ((size_t)0 - (size_t)eq) & (i + 1);
        }
        if (found)
                snprintf(owner, size, "%s", s->tt.tenants[s->tt.tokens[found - 1].tenant].name);
        pthread_rwlock_unlock(&s->tokens_lock);
        return found != 0;
}

/* Whether owner (a tenant name, or NULL without tokens) is still a tenant
 * of the tokens file: a call queued when its tenant is removed is refused. */
static bool tenant_exists(server *s, const char *owner)
{
        if (!owner || !s->opt.tokens_file)
                return true;
        pthread_rwlock_rdlock(&s->tokens_lock);
        bool found = tenants_find(&s->tt, owner) != NULL;
        pthread_rwlock_unlock(&s->tokens_lock);
        return found;
}

static unsigned clamp_u(uint64_t v, unsigned cap)
{
        return v < cap ? (unsigned)v : cap;
}

/* Hands the tenants' own limits of t to the quota table and the
 * workspaces: each quota clamped to its server-wide cap, as the
 * --max-...-per-token options are. Returns 0 or -ENOMEM. */
static int apply_overrides(server *s, const tenant_table *t)
{
        size_t n = t->n_tenants;
        const char **names = calloc(n + 1, sizeof(*names));
        unsigned(*q)[QUOTA_KINDS] = calloc(n + 1, sizeof(*q));
        uint64_t(*w)[2] = calloc(n + 1, sizeof(*w));
        int r = names && q && w ? 0 : -ENOMEM;
        for (size_t i = 0; r == 0 && i < n; i++) {
                const tenant_def *td = &t->tenants[i];
                names[i] = td->name;
                q[i][QUOTA_SESSIONS] =
                    td->set[TENANT_MAX_SESSIONS]
                        ? clamp_u(td->value[TENANT_MAX_SESSIONS], s->max_sessions)
                        : QUOTA_UNSET;
                q[i][QUOTA_RUNS] = td->set[TENANT_MAX_RUNS]
                                       ? clamp_u(td->value[TENANT_MAX_RUNS], s->opt.max_runs)
                                       : QUOTA_UNSET;
                q[i][QUOTA_QUEUED] = td->set[TENANT_MAX_QUEUE]
                                         ? clamp_u(td->value[TENANT_MAX_QUEUE], s->opt.max_queue)
                                         : QUOTA_UNSET;
                w[i][0] = td->set[TENANT_MAX_FILES] ? td->value[TENANT_MAX_FILES] : WS_UNSET;
                w[i][1] = td->set[TENANT_MAX_BYTES] ? td->value[TENANT_MAX_BYTES] : WS_UNSET;
        }
        if (r == 0)
                r = quota_set_overrides(s->quotas, names, (const unsigned(*)[QUOTA_KINDS])q, n);
        if (r == 0 && s->workspaces)
                r = mcp_workspaces_set_overrides(s->workspaces, names, (const uint64_t(*)[2])w, n);
        free(names);
        free(q);
        free(w);
        return r;
}

/* SIGHUP: the tokens file again. A file that does not load keeps the old
 * table (one line on stderr). Tenants the new file no longer names are
 * removed: their calls in progress are cancelled, their queued calls
 * refused, their sessions closed and their runs' files dropped; their
 * workspace folders stay on disk (the operator's data). */
static void reload_tokens(server *s)
{
        if (!s->opt.tokens_file)
                return;
        tenant_table t;
        char why[512];
        int n = tenants_load(s->opt.tokens_file, &t, why, sizeof(why));
        if (n < 0) {
                fprintf(stderr, "airlock serve: SIGHUP: keeping the old tokens: %s\n", why);
                return;
        }
        if (apply_overrides(s, &t) < 0) {
                fprintf(stderr, "airlock serve: SIGHUP: keeping the old tokens: out of memory\n");
                tenants_free(&t);
                return;
        }
        pthread_rwlock_wrlock(&s->tokens_lock);
        tenant_table old = s->tt;
        s->tt = t;
        pthread_rwlock_unlock(&s->tokens_lock);
        unsigned removed = 0;
        for (size_t i = 0; i < old.n_tenants; i++) {
                if (tenants_find(&t, old.tenants[i].name))
                        continue;
                removed++;
                if (atomic_load(&s->core_ready))
                        mcp_core_forget_owner(s->core, old.tenants[i].name);
        }
        tenants_free(&old);
        /* Calls queued for a removed tenant wake up and are refused. */
        pthread_mutex_lock(&s->slot_lock);
        pthread_cond_broadcast(&s->slot_free);
        pthread_mutex_unlock(&s->slot_lock);
        fprintf(stderr,
                "airlock serve: SIGHUP: %d token%s of %zu tenant%s loaded from %s (%u tenant%s "
                "removed)\n",
                n, n == 1 ? "" : "s", t.n_tenants, t.n_tenants == 1 ? "" : "s", s->opt.tokens_file,
                removed, removed == 1 ? "" : "s");
}

/* ---- run slots ---------------------------------------------------------- */

typedef enum admit {
        ADMIT_OK,
        ADMIT_GONE, /* the caller's tenant was removed meanwhile */
        ADMIT_QUEUE_FULL,
        ADMIT_OWN_QUEUE_FULL, /* the caller's own runs and queue are full */
        ADMIT_TIMEOUT,
        ADMIT_DRAINING
} admit;

/* Under slot_lock: a run slot is free, and owner holds fewer runs than its
 * quota; then both are taken. */
static bool slot_fits_locked(server *s, const char *owner)
{
        return s->running < s->opt.max_runs &&
               quota_take(s->quotas, owner, QUOTA_RUNS, NULL, NULL) == 0;
}

/* Takes a run slot for owner, waiting in the queue when every slot is busy
 * or owner runs its quota already: at most max_queue requests wait (each
 * owner at most its own quota of them), each at most queue_wait_s seconds.
 * A refusal for the owner's own quota says, in why, only what that owner
 * holds and may hold. */
static admit slot_take(server *s, const char *owner, char *why, size_t why_len)
{
        pthread_mutex_lock(&s->slot_lock);
        if (!tenant_exists(s, owner)) {
                pthread_mutex_unlock(&s->slot_lock);
                return ADMIT_GONE;
        }
        /* Not behind the calls that wait: those may wait for their own
         * owner's quota, which is no reason for another owner to. */
        if (slot_fits_locked(s, owner)) {
                s->running++;
                pthread_mutex_unlock(&s->slot_lock);
                return ADMIT_OK;
        }
        unsigned queued = 0, queue_limit = 0;
        int q = quota_take(s->quotas, owner, QUOTA_QUEUED, &queued, &queue_limit);
        if (q < 0) {
                unsigned runs = quota_held(s->quotas, owner, QUOTA_RUNS);
                bool own_runs = false, own_queue = false;
                unsigned run_limit = quota_limit(s->quotas, owner, QUOTA_RUNS, &own_runs);
                (void)quota_limit(s->quotas, owner, QUOTA_QUEUED, &own_queue);
                pthread_mutex_unlock(&s->slot_lock);
                snprintf(why, why_len,
                         "too many calls: you have %u running and %u waiting, your limits "
                         "(%s %u, %s %u); retry when one of yours has finished",
                         runs, queued,
                         own_runs ? "max-runs of your tenant" : "--max-runs-per-token", run_limit,
                         own_queue ? "max-queue of your tenant" : "--max-queue-per-token",
                         queue_limit);
                return ADMIT_OWN_QUEUE_FULL;
        }
        if (s->waiting >= s->opt.max_queue) {
                quota_give(s->quotas, owner, QUOTA_QUEUED);
                pthread_mutex_unlock(&s->slot_lock);
                return ADMIT_QUEUE_FULL;
        }
        s->waiting++;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t at = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
                      (uint64_t)(s->opt.queue_wait_s * 1e9);
        ts.tv_sec = (time_t)(at / 1000000000ull);
        ts.tv_nsec = (long)(at % 1000000000ull);
        admit a = ADMIT_OK;
        int r = 0;
        /* The tenant is asked first: removing it cancels its running call,
         * whose slot then frees, and a queued call of it must not take
         * that slot. */
        for (;;) {
                if (!tenant_exists(s, owner)) {
                        a = ADMIT_GONE;
                        break;
                }
                if (slot_fits_locked(s, owner))
                        break;
                if (atomic_load(&s->draining)) {
                        a = ADMIT_DRAINING;
                        break;
                }
                if (r == ETIMEDOUT) {
                        a = ADMIT_TIMEOUT;
                        break;
                }
                r = pthread_cond_timedwait(&s->slot_free, &s->slot_lock, &ts);
        }
        s->waiting--;
        quota_give(s->quotas, owner, QUOTA_QUEUED);
        if (a == ADMIT_OK)
                s->running++;
        pthread_mutex_unlock(&s->slot_lock);
        return a;
}

/* Gives back a run slot that slot_take took for owner (internal: the
 * warm-up run's, which took no quota). */
static void slot_give(server *s, const char *owner, bool internal)
{
        pthread_mutex_lock(&s->slot_lock);
        s->running--;
        if (!internal)
                quota_give(s->quotas, owner, QUOTA_RUNS);
        pthread_cond_broadcast(&s->slot_free);
        pthread_mutex_unlock(&s->slot_lock);
}

/* ---- the sink of one request -------------------------------------------- */

typedef struct msg {
        char *text; /* compact JSON */
        bool response;
        struct msg *next;
} msg;

struct http_sink {
        mcp_sink base;
        server *srv;
        pthread_mutex_t lock;
        int efd; /* readable when a message or the end came */
        msg *head, **tail;
        bool done;     /* nothing more will come */
        bool pending;  /* a call was started: done comes with call_done */
        bool got_resp; /* the response was queued */
        enum call_status status;
};

static void sink_wake(http_sink *k)
{
        uint64_t one = 1;
        ssize_t n = write(k->efd, &one, sizeof(one));
        (void)n; /* an eventfd full of wake-ups is still readable */
}

static enum call_status status_of(const json_t *m)
{
        if (json_object_get(m, "error"))
                return ST_RPC_ERROR;
        if (json_is_true(json_object_get(json_object_get(m, "result"), "isError")))
                return ST_TOOL_ERROR;
        return ST_OK;
}

static void sink_send(mcp_sink *base, json_t *m)
{
        http_sink *k = (http_sink *)base;
        bool response = json_object_get(m, "id") && !json_object_get(m, "method");
        enum call_status st = response ? status_of(m) : ST_OK;
        char *text = json_dumps(m, JSON_COMPACT | AL_JSON_REALS);
        json_decref(m);
        msg *e = text ? malloc(sizeof(*e)) : NULL;
        if (!e) {
                free(text);
                return;
        }
        *e = (msg){.text = text, .response = response};
        pthread_mutex_lock(&k->lock);
        *k->tail = e;
        k->tail = &e->next;
        if (response) {
                k->got_resp = true;
                k->status = st;
        }
        pthread_mutex_unlock(&k->lock);
        sink_wake(k);
}

static void sink_call_done(mcp_sink *base)
{
        http_sink *k = (http_sink *)base;
        /* The run slot is free as soon as the run is over, before the
         * response is written to a client that may read it slowly. */
        slot_give(k->srv, k->base.owner, k->base.internal);
        /* Woken under the lock: the request's thread may free the sink as
         * soon as it sees done, which it reads under the lock. */
        pthread_mutex_lock(&k->lock);
        k->done = true;
        sink_wake(k);
        pthread_mutex_unlock(&k->lock);
}

static http_sink *sink_new(server *s, const char *owner)
{
        http_sink *k = calloc(1, sizeof(*k));
        if (!k)
                return NULL;
        k->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (k->efd < 0) {
                free(k);
                return NULL;
        }
        k->base.send = sink_send;
        k->base.call_done = sink_call_done;
        k->base.owner = owner;
        k->srv = s;
        k->tail = &k->head;
        pthread_mutex_init(&k->lock, NULL);
        return k;
}

static msg *sink_pop_locked(http_sink *k)
{
        msg *e = k->head;
        if (e) {
                k->head = e->next;
                if (!k->head)
                        k->tail = &k->head;
        }
        return e;
}

static void msg_free(msg *e)
{
        if (e) {
                free(e->text);
                free(e);
        }
}

/* Waits until the call started for k is over (after a cancel). */
static void sink_wait_done(http_sink *k)
{
        for (;;) {
                pthread_mutex_lock(&k->lock);
                bool done = k->done;
                pthread_mutex_unlock(&k->lock);
                if (done)
                        return;
                struct pollfd p = {.fd = k->efd, .events = POLLIN};
                (void)poll(&p, 1, 1000);
                uint64_t v;
                ssize_t n = read(k->efd, &v, sizeof(v));
                (void)n;
        }
}

static void sink_free(http_sink *k)
{
        if (!k)
                return;
        if (k->pending) {
                mcp_core_cancel_sink(k->srv->core, &k->base);
                sink_wait_done(k);
        }
        msg *e;
        while ((e = sink_pop_locked(k)))
                msg_free(e);
        close(k->efd);
        pthread_mutex_destroy(&k->lock);
        free(k);
}

/* ---- one HTTP request --------------------------------------------------- */

typedef struct request {
        server *srv;
        dynbuf body;
        bool too_large;
        bool over_budget; /* the bodies of all requests would pass --max-body-total */
        uint64_t held;    /* bytes of body counted in srv->body_bytes */
        uint64_t parsed;  /* the parsed message's estimated size, counted there too */
        http_sink *sink;
        int sock;
        bool sse;       /* the client accepts text/event-stream */
        bool streaming; /* the SSE response was started */
        char *out;      /* SSE: the event being written */
        size_t out_len, out_off;
        bool resp_sent; /* SSE: the response's event was formatted */
        uint64_t t0;
        char client[INET6_ADDRSTRLEN + 8];
        char forwarded[64];              /* X-Forwarded-For, as a proxy in front says (unchecked) */
        char owner[TENANT_NAME_MAX + 1]; /* the tenant of the token, "" without tokens */
        /* For the log line. */
        char method[48], tool[48];
        bool has_session;
        unsigned http_status;
        enum call_status status;
        bool logged;
        uint64_t call_t0; /* a tools/call: when it got its run slot */
} request;

static void json_log(request *rq)
{
        if (rq->logged || !rq->method[0])
                return;
        rq->logged = true;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        char when[40];
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        char stamp[64];
        snprintf(stamp, sizeof(stamp), "%s.%03ldZ", when, ts.tv_nsec / 1000000);
        double ms = (double)(mono_ns() - rq->t0) / 1e6;
        /* The names come from the client, cut to their buffers: kept valid
         * UTF-8 so that the line is always written. */
        _cleanup_free_ char *method = al_utf8_sanitize(rq->method, strlen(rq->method));
        _cleanup_free_ char *tool = al_utf8_sanitize(rq->tool, strlen(rq->tool));
        json_t *l = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:f, s:b}", "ts", stamp,
                              "instance", rq->srv->opt.instance, "client", rq->client, "method",
                              method ? method : "?", "tool", tool ? tool : "?", "status",
                              status_names[rq->status], "http", (int)rq->http_status, "duration_ms",
                              (double)(uint64_t)(ms * 1000) / 1000, "session", rq->has_session);
        if (!rq->tool[0])
                json_object_del(l, "tool");
        if (l && rq->forwarded[0])
                json_object_set_new(l, "forwarded_for", json_string(rq->forwarded));
        if (l && rq->owner[0])
                json_object_set_new(l, "tenant", json_string(rq->owner));
        char *text = l ? json_dumps(l, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
        json_decref(l);
        if (text) {
                /* One write per line, so lines of threads never mix. */
                size_t n = strlen(text);
                text[n] = '\n';
                (void)al_write_full(STDERR_FILENO, text, n + 1);
                free(text);
        }
        atomic_fetch_add(&rq->srv->m.calls[rq->status], 1);
        if (rq->call_t0)
                observe_latency(rq->srv, (double)(mono_ns() - rq->call_t0) / 1e9);
}

/* Queues the answer: body (copied) of type, the instance's header, one
 * more header (h1: v1, or none when h1 is NULL), and Connection: close
 * while the server drains. */
static enum MHD_Result queue_with(struct MHD_Connection *c, request *rq, unsigned code,
                                  const char *type, const char *body, size_t len, const char *h1,
                                  const char *v1)
{
        struct MHD_Response *r =
            MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
        if (!r)
                return MHD_NO;
        if (type)
                MHD_add_response_header(r, "Content-Type", type);
        MHD_add_response_header(r, "Airlock-Instance", rq->srv->opt.instance);
        if (h1)
                MHD_add_response_header(r, h1, v1);
        if (atomic_load(&rq->srv->draining))
                MHD_add_response_header(r, "Connection", "close");
        rq->http_status = code;
        json_log(rq); /* counted before the client can see the answer */
        enum MHD_Result ret = MHD_queue_response(c, code, r);
        MHD_destroy_response(r);
        return ret;
}

static enum MHD_Result queue(struct MHD_Connection *c, request *rq, unsigned code, const char *type,
                             const char *body, size_t len)
{
        return queue_with(c, rq, code, type, body, len, NULL, NULL);
}

static enum MHD_Result queue_text(struct MHD_Connection *c, request *rq, unsigned code,
                                  const char *text)
{
        return queue(c, rq, code, "text/plain; charset=utf-8", text, strlen(text));
}

/* An HTTP error with a JSON-RPC error body without id, as the transport
 * allows, plus one header h1: v1 (none when h1 is NULL). */
static enum MHD_Result queue_rpc_error(struct MHD_Connection *c, request *rq, unsigned code,
                                       int rpc_code, const char *message, const char *h1,
                                       const char *v1)
{
        json_t *e = json_pack("{s:s, s:n, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", "error", "code",
                              rpc_code, "message", message);
        _cleanup_free_ char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
        json_decref(e);
        if (!text)
                return MHD_NO;
        return queue_with(c, rq, code, "application/json", text, strlen(text), h1, v1);
}

static void refuse(request *rq, enum refusal why)
{
        atomic_fetch_add(&rq->srv->m.refusals[why], 1);
        rq->status = ST_REFUSED;
}

/* The public base URL of this server, for the metadata: --resource-url
 * without its path, else http:// and the Host header when it is a plain
 * host[:port], else the listening address. */
static void base_url(request *rq, struct MHD_Connection *c, char *out, size_t len)
{
        const serve_options *o = &rq->srv->opt;
        if (o->resource_url) {
                const char *p = strstr(o->resource_url, "://");
                p = p ? strchr(p + 3, '/') : NULL;
                size_t n = p ? (size_t)(p - o->resource_url) : strlen(o->resource_url);
                snprintf(out, len, "%.*s", (int)n, o->resource_url);
                return;
        }
        const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
        bool plain = host && *host && strlen(host) < 256;
        for (const char *p = host; plain && *p; p++)
                plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                        (*p >= '0' && *p <= '9') || strchr(".-:[]", *p);
        snprintf(out, len, "http://%s", plain ? host : o->listen);
}

/* What the header iteration found, for framing_ok. */
typedef struct framing {
        unsigned lengths, encodings;
        bool bad_name;
        bool folded;
} framing;

/* Whether the field (key, value) was read from one line "key:[ \t]*value".
 * libmicrohttpd (0.9.75) parses each line in its read buffer in place: it
 * ends the name at the colon and points the value past the blanks that
 * follow, so the value starts right there. A line folded onto it (obs-fold,
 * a next line that starts with a blank) is instead appended to the *name*
 * ("Transfer-Encoding:" CRLF " chunked" becomes the field
 * "Transfer-Encodingchunked" with an empty value), in a copy elsewhere in
 * the connection's pool or over the value: either way the value no longer
 * starts blanks away from the name's end. Both pointers are in the
 * connection's pool (at most MAX_HEADER_MEM bytes), so the bytes between
 * them may be read. */
static bool one_line(const char *key, const char *value)
{
        const char *p = key + strlen(key) + 1;
        if (value < p || (size_t)(value - p) > MAX_HEADER_MEM)
                return false;
        for (; p < value; p++)
                if (*p != ' ' && *p != '\t')
                        return false;
        return true;
}

static enum MHD_Result framing_count(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
        (void)kind;
        framing *f = cls;
        f->lengths += strcasecmp(key, "Content-Length") == 0;
        f->encodings += strcasecmp(key, "Transfer-Encoding") == 0;
        for (const char *p = key; *p; p++)
                f->bad_name |= *p == ' ' || *p == '\t';
        f->folded |= !value || !one_line(key, value);
        return MHD_YES;
}

/* False when the request's framing is ambiguous: two Content-Length
 * fields, Content-Length beside Transfer-Encoding, more than one
 * Transfer-Encoding, a field name with whitespace before its colon, or a
 * field folded over two lines (obsolete line folding, which RFC 9112 5.2
 * lets a server reject with 400, and which libmicrohttpd joins to the
 * field's name, so that a folded Transfer-Encoding escapes the count). A
 * proxy in front may read such a request's end elsewhere than
 * libmicrohttpd does (which takes the first length, keeps the connection
 * after both fields, and reads "Transfer-Encoding :" as some other field),
 * and what follows would be answered as a request of its own: request
 * smuggling. RFC 9112 (5.1, 6.1, 6.3) has the server reject these or close
 * the connection; such a request is refused with the connection closed. */
static bool framing_ok(struct MHD_Connection *c)
{
        framing f = {0};
        MHD_get_connection_values(c, MHD_HEADER_KIND, framing_count, &f);
        return !f.bad_name && !f.folded && f.lengths <= 1 && f.encodings <= 1 &&
               !(f.lengths && f.encodings);
}

static enum MHD_Result queue_unauthorized(struct MHD_Connection *c, request *rq, bool missing)
{
        char base[300], hdr[512];
        base_url(rq, c, base, sizeof(base));
        snprintf(hdr, sizeof(hdr),
                 "Bearer resource_metadata=\"%s/.well-known/oauth-protected-resource/mcp\"%s", base,
                 missing ? "" : ", error=\"invalid_token\"");
        atomic_fetch_add(missing ? &rq->srv->m.auth_missing : &rq->srv->m.auth_invalid, 1);
        rq->status = ST_REFUSED;
        snprintf(rq->method, sizeof(rq->method), "?"); /* logged, unread */
        return queue_rpc_error(c, rq, MHD_HTTP_UNAUTHORIZED, RPC_INVALID_REQUEST,
                               missing ? "authorization required: send Authorization: Bearer TOKEN"
                                       : "invalid token",
                               "WWW-Authenticate", hdr);
}

/* RFC 9728 protected-resource metadata. */
static enum MHD_Result queue_resource_metadata(struct MHD_Connection *c, request *rq)
{
        char base[300], resource[400];
        base_url(rq, c, base, sizeof(base));
        if (rq->srv->opt.resource_url)
                snprintf(resource, sizeof(resource), "%s", rq->srv->opt.resource_url);
        else
                snprintf(resource, sizeof(resource), "%s/mcp", base);
        json_t *m = json_pack("{s:s, s:[s], s:s}", "resource", resource, "bearer_methods_supported",
                              "header", "resource_name", "airlock");
        if (m && rq->srv->opt.auth_server)
                json_object_set_new(m, "authorization_servers",
                                    json_pack("[s]", rq->srv->opt.auth_server));
        char *text = m ? json_dumps(m, JSON_COMPACT) : NULL;
        json_decref(m);
        if (!text)
                return MHD_NO;
        enum MHD_Result r = queue(c, rq, MHD_HTTP_OK, "application/json", text, strlen(text));
        free(text);
        return r;
}

/* Origin, as the transport asks against DNS rebinding: a request without
 * one (not from a browser) or with one of --allow-origin. The server's own
 * name is not trusted by itself: a rebinding attack makes the page's origin
 * and the Host header name the same attacker's domain. */
static bool origin_ok(request *rq, struct MHD_Connection *c)
{
        const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
        if (!origin)
                return true;
        for (unsigned i = 0; i < rq->srv->opt.n_origins; i++)
                if (strcmp(origin, rq->srv->opt.origins[i]) == 0)
                        return true;
        return false;
}

/* Authorization: Bearer TOKEN, when tokens are configured. Returns 1 when
 * allowed (owner filled), 0 for no token, -1 for a bad one. */
static int authorize(request *rq, struct MHD_Connection *c)
{
        if (!rq->srv->opt.tokens_file)
                return 1;
        const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        if (!a)
                return 0;
        if (strncasecmp(a, "Bearer ", 7) != 0)
                return -1;
        const char *tok = a + 7;
        while (*tok == ' ')
                tok++;
        size_t n = strlen(tok);
        while (n && tok[n - 1] == ' ')
                n--;
        return check_token(rq->srv, tok, n, rq->owner, sizeof(rq->owner)) ? 1 : -1;
}

static bool version_ok(struct MHD_Connection *c)
{
        const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
        if (!v)
                return true;
        for (size_t i = 0; i < ARRAY_SIZE(http_versions); i++)
                if (strcmp(v, http_versions[i]) == 0)
                        return true;
        return false;
}

/* Waits for the next message of k or its end, watching the client's
 * socket. Returns the message (NULL at the end); *gone when the client went
 * away (its call is then cancelled and over). */
static msg *wait_message(request *rq, bool *gone)
{
        http_sink *k = rq->sink;
        *gone = false;
        for (;;) {
                pthread_mutex_lock(&k->lock);
                msg *e = sink_pop_locked(k);
                bool done = k->done || !k->pending;
                pthread_mutex_unlock(&k->lock);
                if (e || done)
                        return e;
                struct pollfd p[2] = {{.fd = k->efd, .events = POLLIN},
                                      {.fd = rq->sock, .events = POLLRDHUP}};
                int n = poll(p, rq->sock >= 0 ? 2 : 1, -1);
                if (n < 0 && errno != EINTR)
                        return NULL;
                if (p[0].revents & POLLIN) {
                        uint64_t v;
                        ssize_t r = read(k->efd, &v, sizeof(v));
                        (void)r;
                }
                if (rq->sock >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
                        *gone = true;
                        mcp_core_cancel_sink(rq->srv->core, &k->base);
                        sink_wait_done(k);
                        return NULL;
                }
        }
}

/* Formats e as one SSE event into rq->out (and frees e). */
static int sse_event(request *rq, msg *e)
{
        size_t n = strlen(e->text) + 32;
        free(rq->out);
        rq->out = malloc(n);
        rq->out_len = rq->out_off = 0;
        if (rq->out)
                rq->out_len = (size_t)snprintf(rq->out, n, "event: message\ndata: %s\n\n", e->text);
        if (e->response)
                rq->resp_sent = true;
        msg_free(e);
        return rq->out ? 0 : -ENOMEM;
}

/* The SSE stream: one event per message, the response last, then the end.
 * Blocks on the connection's thread. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        (void)pos;
        request *rq = cls;
        while (rq->out_off >= rq->out_len) {
                if (rq->resp_sent) {
                        json_log(rq); /* before the client sees the stream end */
                        return MHD_CONTENT_READER_END_OF_STREAM;
                }
                bool gone = false;
                msg *e = wait_message(rq, &gone);
                if (gone) {
                        rq->status = ST_CANCELLED;
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                if (!e) {
                        rq->status = ST_CANCELLED;
                        return MHD_CONTENT_READER_END_OF_STREAM;
                }
                if (e->response) {
                        pthread_mutex_lock(&rq->sink->lock);
                        rq->status = rq->sink->status;
                        pthread_mutex_unlock(&rq->sink->lock);
                }
                if (sse_event(rq, e) < 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        size_t n = rq->out_len - rq->out_off;
        if (n > max)
                n = max;
        memcpy(buf, rq->out + rq->out_off, n);
        rq->out_off += n;
        return (ssize_t)n;
}

static enum MHD_Result start_sse(struct MHD_Connection *c, request *rq, msg *first)
{
        /* The first message goes first. */
        if (sse_event(rq, first) < 0)
                return MHD_NO;
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10, sse_read, rq, NULL);
        if (!r)
                return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-store");
        MHD_add_response_header(r, "Airlock-Instance", rq->srv->opt.instance);
        rq->streaming = true;
        rq->http_status = MHD_HTTP_OK;
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
}

/* Answers with the response of the request (the last message): JSON, or
 * SSE when notifications came first and the client accepts it. */
static enum MHD_Result answer(struct MHD_Connection *c, request *rq)
{
        http_sink *k = rq->sink;
        for (;;) {
                bool gone = false;
                msg *e = wait_message(rq, &gone);
                if (gone) {
                        rq->status = ST_CANCELLED;
                        rq->http_status = 499; /* the log's name for "client went away" */
                        return MHD_NO;
                }
                if (!e) {
                        /* Over without a response: cancelled. */
                        rq->status = ST_CANCELLED;
                        return queue_rpc_error(c, rq, MHD_HTTP_OK, RPC_INTERNAL_ERROR,
                                               "request cancelled", NULL, NULL);
                }
                if (e->response) {
                        pthread_mutex_lock(&k->lock);
                        rq->status = k->status;
                        pthread_mutex_unlock(&k->lock);
                        enum MHD_Result r =
                            queue(c, rq, MHD_HTTP_OK, "application/json", e->text, strlen(e->text));
                        msg_free(e);
                        return r;
                }
                if (rq->sse)
                        return start_sse(c, rq, e);
                msg_free(e); /* a JSON response carries no notification */
        }
}

/* ---- hang-ups of calls run on their connection's thread ---------------- */

/* While a call runs on its connection's thread, nobody polls its socket:
 * one thread of the server watches those sockets in one epoll set (two
 * system calls a call, no thread per call) and cancels the call of a client
 * that hangs up. A registration is a slot of a table (one per connection),
 * named in the event with a generation, so that an event that comes after
 * its call ended is recognised and dropped. */
#define HUP_STOP UINT64_MAX

static void *hup_main(void *arg)
{
        server *s = arg;
        struct epoll_event ev[16];
        for (;;) {
                int n = epoll_wait(s->hup_ep, ev, (int)ARRAY_SIZE(ev), -1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return NULL;
                pthread_mutex_lock(&s->hup_lock);
                for (int i = 0; i < n; i++) {
                        if (ev[i].data.u64 == HUP_STOP) {
                                pthread_mutex_unlock(&s->hup_lock);
                                return NULL;
                        }
                        uint32_t slot = (uint32_t)ev[i].data.u64;
                        uint32_t gen = (uint32_t)(ev[i].data.u64 >> 32);
                        if (slot < s->n_hup && s->hup[slot].sink && s->hup[slot].gen == gen)
                                mcp_core_cancel_sink(s->core, &s->hup[slot].sink->base);
                }
                pthread_mutex_unlock(&s->hup_lock);
        }
}

static int hup_init(server *s)
{
        s->n_hup = s->opt.max_connections + 4;
        s->hup = calloc(s->n_hup, sizeof(*s->hup));
        s->hup_free = calloc(s->n_hup, sizeof(*s->hup_free));
        s->hup_ep = epoll_create1(EPOLL_CLOEXEC);
        s->hup_stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (!s->hup || !s->hup_free || s->hup_ep < 0 || s->hup_stop < 0)
                return -ENOMEM;
        for (unsigned i = 0; i < s->n_hup; i++)
                s->hup_free[s->n_free++] = s->n_hup - 1 - i;
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = HUP_STOP};
        if (epoll_ctl(s->hup_ep, EPOLL_CTL_ADD, s->hup_stop, &ev) < 0)
                return -errno;
        int r = pthread_create(&s->hup_thread, NULL, hup_main, s);
        if (r != 0)
                return -r;
        s->hup_started = true;
        return 0;
}

static void hup_fini(server *s)
{
        if (s->hup_started) {
                uint64_t one = 1;
                ssize_t n = write(s->hup_stop, &one, sizeof(one));
                (void)n;
                pthread_join(s->hup_thread, NULL);
        }
        if (s->hup_ep >= 0)
                close(s->hup_ep);
        if (s->hup_stop >= 0)
                close(s->hup_stop);
        free(s->hup);
        free(s->hup_free);
}

/* Watches rq's socket for a hang-up; returns the slot, or -1 (the call
 * then runs unwatched: its client's leaving is seen once it ends). */
static int hup_watch(request *rq)
{
        server *s = rq->srv;
        if (rq->sock < 0 || !s->hup_started)
                return -1;
        pthread_mutex_lock(&s->hup_lock);
        if (!s->n_free) {
                pthread_mutex_unlock(&s->hup_lock);
                return -1;
        }
        uint32_t slot = s->hup_free[--s->n_free];
        s->hup[slot].sink = rq->sink;
        uint32_t gen = ++s->hup[slot].gen;
        pthread_mutex_unlock(&s->hup_lock);
        /* One event is enough: the call is cancelled once. */
        struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLONESHOT,
                                 .data.u64 = ((uint64_t)gen << 32) | slot};
        if (epoll_ctl(s->hup_ep, EPOLL_CTL_ADD, rq->sock, &ev) == 0)
                return (int)slot;
        pthread_mutex_lock(&s->hup_lock);
        s->hup[slot].sink = NULL;
        s->hup_free[s->n_free++] = slot;
        pthread_mutex_unlock(&s->hup_lock);
        return -1;
}

static void hup_unwatch(request *rq, int slot)
{
        server *s = rq->srv;
        if (slot < 0)
                return;
        (void)epoll_ctl(s->hup_ep, EPOLL_CTL_DEL, rq->sock, NULL);
        /* Under the lock: the watcher is not using the sink, and a late
         * event finds the slot empty or of another generation. */
        pthread_mutex_lock(&s->hup_lock);
        s->hup[slot].sink = NULL;
        s->hup[slot].gen++;
        s->hup_free[s->n_free++] = (uint32_t)slot;
        pthread_mutex_unlock(&s->hup_lock);
}

/* Runs the call left for this thread, its socket watched meanwhile. */
static void run_here(request *rq)
{
        int slot = hup_watch(rq);
        mcp_core_run_here(rq->srv->core, &rq->sink->base, -1, NULL, NULL);
        hup_unwatch(rq, slot);
}

/* The body is parsed: its bytes leave the budget. */
static void release_body(request *rq)
{
        dynbuf_free(&rq->body);
        atomic_fetch_sub(&rq->srv->body_bytes, rq->held);
        rq->held = 0;
}

/* The parsed message is freed: its estimated size leaves the budget. */
static void drop_message(request *rq, jsonrpc_message *m)
{
        json_decref(m->root);
        m->root = NULL;
        atomic_fetch_sub(&rq->srv->body_bytes, rq->parsed);
        rq->parsed = 0;
}

/* Deepest nesting of arrays and objects in a request: no MCP message comes
 * near it, and jansson's parser recurses once a level on the connection's
 * thread, whose stack is 512 KiB. */
#define JSONRPC_MAX_DEPTH 64

/* Charges what parsing the body will hold (JSONRPC_VALUE_COST per JSON
 * value, found by a pass over the bytes that builds nothing, plus the
 * bytes themselves for the strings' copies) against --max-body-total,
 * beside the body until it is released: a body of 4 MiB of "[0,0,..."
 * parses into 2 million values, some 100 MB, which the count of bytes
 * alone let 16 such requests at once take past a gigabyte. Returns 0, or
 * answers the request: 400 nested too deeply, 413 a message that could
 * never fit, 503 one that does not fit now. */
static int charge_parse(struct MHD_Connection *c, request *rq, enum MHD_Result *ret)
{
        server *s = rq->srv;
        uint64_t values = 0;
        unsigned depth = 0;
        jsonrpc_measure(rq->body.data ? rq->body.data : "", rq->body.len, &values, &depth);
        uint64_t cost = values * JSONRPC_VALUE_COST + rq->body.len;
        if (depth > JSONRPC_MAX_DEPTH) {
                release_body(rq);
                refuse(rq, RF_BAD_REQUEST);
                snprintf(rq->method, sizeof(rq->method), "?");
                *ret = queue_rpc_error(c, rq, MHD_HTTP_BAD_REQUEST, RPC_INVALID_REQUEST,
                                       "JSON nested too deeply (more than 64 levels)", NULL, NULL);
                return -1;
        }
        if (cost > s->opt.max_body_total) {
                release_body(rq);
                refuse(rq, RF_BODY_TOO_LARGE);
                snprintf(rq->method, sizeof(rq->method), "?");
                *ret = queue_rpc_error(c, rq, MHD_HTTP_CONTENT_TOO_LARGE, RPC_INVALID_REQUEST,
                                       "request too large once parsed (too many JSON values)", NULL,
                                       NULL);
                return -1;
        }
        if (atomic_fetch_add(&s->body_bytes, cost) + cost > s->opt.max_body_total) {
                atomic_fetch_sub(&s->body_bytes, cost);
                release_body(rq);
                refuse(rq, RF_BODY_MEMORY);
                snprintf(rq->method, sizeof(rq->method), "?");
                *ret = queue_rpc_error(c, rq, MHD_HTTP_SERVICE_UNAVAILABLE, RPC_INTERNAL_ERROR,
                                       "too many request bodies held at once; retry later",
                                       "Retry-After", RETRY_AFTER_S);
                return -1;
        }
        rq->parsed = cost;
        return 0;
}

/* Holds a request that came before the core (the sandbox and the tool
 * description) is built, at most --queue-wait seconds, so that a client
 * that connects right after the server starts is served rather than told
 * to retry. Returns 0 once the core is built, -ETIMEDOUT when the wait
 * ran out, -ECANCELED when the build failed (the server then stops). The
 * request holds only its connection meanwhile (its body is in, within
 * --max-body-total), as a slow client does. */
static int hold_until_built(server *s)
{
        if (atomic_load(&s->core_ready))
                return 0;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t at = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
                      (uint64_t)(s->opt.queue_wait_s * 1e9);
        ts.tv_sec = (time_t)(at / 1000000000ull);
        ts.tv_nsec = (long)(at % 1000000000ull);
        int r = 0;
        pthread_mutex_lock(&s->slot_lock);
        s->held++;
        while (!atomic_load(&s->core_ready) && !atomic_load(&s->core_failed) && r != ETIMEDOUT)
                r = pthread_cond_timedwait(&s->built, &s->slot_lock, &ts);
        s->held--;
        pthread_mutex_unlock(&s->slot_lock);
        if (atomic_load(&s->core_ready))
                return 0;
        return atomic_load(&s->core_failed) ? -ECANCELED : -ETIMEDOUT;
}

/* Wakes the requests held by hold_until_built: the core is built, or
 * failed to be. */
static void announce_built(server *s, bool ok)
{
        pthread_mutex_lock(&s->slot_lock);
        atomic_store(ok ? &s->core_ready : &s->core_failed, true);
        pthread_cond_broadcast(&s->built);
        pthread_mutex_unlock(&s->slot_lock);
}

static enum MHD_Result handle_mcp(struct MHD_Connection *c, request *rq)
{
        server *s = rq->srv;
        int held = hold_until_built(s);
        if (held < 0) {
                refuse(rq, RF_WARMING_UP);
                snprintf(rq->method, sizeof(rq->method), "?");
                if (held == -ECANCELED)
                        return queue_rpc_error(
                            c, rq, MHD_HTTP_SERVICE_UNAVAILABLE, RPC_INTERNAL_ERROR,
                            "the server could not start (its log says why)", "Connection", "close");
                return queue_rpc_error(c, rq, MHD_HTTP_SERVICE_UNAVAILABLE, RPC_INTERNAL_ERROR,
                                       "the server is starting; retry shortly", "Retry-After",
                                       RETRY_AFTER_S);
        }
        if (!version_ok(c)) {
                refuse(rq, RF_BAD_VERSION);
                snprintf(rq->method, sizeof(rq->method), "?");
                return queue_rpc_error(c, rq, MHD_HTTP_BAD_REQUEST, RPC_INVALID_REQUEST,
                                       "unsupported MCP-Protocol-Version header (this server "
                                       "speaks 2026-07-28 and 2024-11-05 to 2025-11-25)",
                                       NULL, NULL);
        }
        enum MHD_Result refused;
        if (charge_parse(c, rq, &refused) < 0)
                return refused;
        jsonrpc_message m;
        char why[256];
        int code =
            jsonrpc_parse(rq->body.data ? rq->body.data : "", rq->body.len, &m, why, sizeof(why));
        release_body(rq);
        if (code != 0) {
                drop_message(rq, &m);
                refuse(rq, RF_BAD_REQUEST);
                snprintf(rq->method, sizeof(rq->method), "?");
                return queue_rpc_error(c, rq, MHD_HTTP_BAD_REQUEST, code, why, NULL, NULL);
        }
        const char *method = m.method ? m.method : "";
        snprintf(rq->method, sizeof(rq->method), "%s", m.method ? m.method : "response");
        const json_t *args = json_object_get(m.params, "arguments");
        if (strcmp(method, "tools/call") == 0) {
                snprintf(rq->tool, sizeof(rq->tool), "%s",
                         json_string_value(json_object_get(m.params, "name"))
                             ? json_string_value(json_object_get(m.params, "name"))
                             : "?");
                rq->has_session = json_object_get(args, "session") != NULL;
        }
        rq->sink = sink_new(s, rq->owner[0] ? rq->owner : NULL);
        if (!rq->sink) {
                drop_message(rq, &m);
                return MHD_NO;
        }
        if (!m.id || !m.method) { /* a notification, or the client's response */
                (void)mcp_core_handle(s->core, &rq->sink->base, &m);
                drop_message(rq, &m);
                rq->method[0] = '\0'; /* not a call: no log line */
                return queue(c, rq, MHD_HTTP_ACCEPTED, NULL, "", 0);
        }
        bool is_call = strcmp(method, "tools/call") == 0;
        if (is_call) {
                char own[300];
                admit a = slot_take(s, rq->sink->base.owner, own, sizeof(own));
                if (a == ADMIT_GONE) {
                        drop_message(rq, &m);
                        return queue_unauthorized(c, rq, false);
                }
                if (a != ADMIT_OK) {
                        drop_message(rq, &m);
                        bool full = a == ADMIT_QUEUE_FULL || a == ADMIT_OWN_QUEUE_FULL;
                        refuse(rq, full                 ? RF_QUEUE_FULL
                                   : a == ADMIT_TIMEOUT ? RF_QUEUE_TIMEOUT
                                                        : RF_DRAINING);
                        return queue_rpc_error(
                            c, rq, full ? MHD_HTTP_TOO_MANY_REQUESTS : MHD_HTTP_SERVICE_UNAVAILABLE,
                            RPC_INTERNAL_ERROR,
                            a == ADMIT_OWN_QUEUE_FULL ? own
                            : a == ADMIT_QUEUE_FULL ? "too many calls: every run slot is busy and "
                                                      "the queue is full; retry later"
                            : a == ADMIT_TIMEOUT    ? "no run slot came free in time; retry later"
                                                    : "the server is shutting down",
                            "Retry-After", RETRY_AFTER_S);
                }
        }
        uint64_t t0 = mono_ns();
        /* A call runs on this thread unless it streams progress over SSE,
         * which this thread writes while a worker runs the code. */
        const json_t *token = json_object_get(json_object_get(m.params, "_meta"), "progressToken");
        rq->sink->base.run_here = !(rq->sse && (json_is_string(token) || json_is_integer(token)));
        int started = mcp_core_handle(s->core, &rq->sink->base, &m);
        drop_message(rq, &m);
        if (started)
                rq->sink->pending = true;
        else if (is_call)
                slot_give(s, rq->sink->base.owner, false);
        if (started && rq->sink->base.here)
                run_here(rq);
        rq->call_t0 = is_call ? t0 : 0;
        return answer(c, rq);
}

static void format_metrics(server *s, dynbuf *b);

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
        server *s = cls;
        request *rq = *con_cls;
        if (!rq) {
                rq = calloc(1, sizeof(*rq));
                if (!rq)
                        return MHD_NO;
                rq->srv = s;
                rq->t0 = mono_ns();
                rq->sock = -1;
                dynbuf_init(&rq->body, s->opt.max_body);
                const union MHD_ConnectionInfo *ci =
                    MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
                if (ci)
                        rq->sock = ci->connect_fd;
                ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
                if (ci && ci->client_addr) {
                        const struct sockaddr *sa = ci->client_addr;
                        char ip[INET6_ADDRSTRLEN] = "?";
                        unsigned port = 0;
                        if (sa->sa_family == AF_INET) {
                                const struct sockaddr_in *in = (const void *)sa;
                                inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
                                port = ntohs(in->sin_port);
                                snprintf(rq->client, sizeof(rq->client), "%s:%u", ip, port);
                        } else if (sa->sa_family == AF_INET6) {
                                const struct sockaddr_in6 *in6 = (const void *)sa;
                                inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
                                port = ntohs(in6->sin6_port);
                                snprintf(rq->client, sizeof(rq->client), "[%s]:%u", ip, port);
                        }
                }
                /* The address a proxy in front names, for the log only:
                 * printable ASCII, cut to its buffer. */
                const char *xff =
                    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Forwarded-For");
                for (size_t i = 0; xff && xff[i] && i + 1 < sizeof(rq->forwarded); i++)
                        rq->forwarded[i] = xff[i] >= 0x20 && xff[i] < 0x7f ? xff[i] : '?';
                *con_cls = rq;
                atomic_fetch_add(&s->requests, 1);
                atomic_fetch_add(&s->m.http_requests, 1);
                if (!framing_ok(c)) {
                        refuse(rq, RF_BAD_REQUEST);
                        snprintf(rq->method, sizeof(rq->method), "?");
                        return queue_rpc_error(c, rq, MHD_HTTP_BAD_REQUEST, RPC_INVALID_REQUEST,
                                               "ambiguous message framing (Content-Length, "
                                               "Transfer-Encoding or a folded header line)",
                                               "Connection", "close");
                }
                bool is_mcp = strcmp(url, "/mcp") == 0;
                if (!is_mcp) {
                        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
                                return queue_text(c, rq, MHD_HTTP_METHOD_NOT_ALLOWED,
                                                  "method not allowed\n");
                        if (strcmp(url, "/healthz") == 0)
                                return queue_text(c, rq, MHD_HTTP_OK, "ok\n");
                        if (strcmp(url, "/readyz") == 0) {
                                bool ready = atomic_load(&s->ready) && !atomic_load(&s->draining);
                                return queue_text(
                                    c, rq, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
                                    atomic_load(&s->draining)      ? "draining\n"
                                    : ready                        ? "ready\n"
                                    : atomic_load(&s->unavailable) ? "sandbox unavailable\n"
                                                                   : "warming up\n");
                        }
                        if (strcmp(url, "/.well-known/oauth-protected-resource") == 0 ||
                            strcmp(url, "/.well-known/oauth-protected-resource/mcp") == 0)
                                return queue_resource_metadata(c, rq);
                        if (strcmp(url, "/metrics") == 0) {
                                /* Metrics name no secret, but they tell
                                 * load: behind the tokens when there are. */
                                int a = authorize(rq, c);
                                if (a <= 0)
                                        return queue_unauthorized(c, rq, a == 0);
                                dynbuf b;
                                dynbuf_init(&b, 1u << 20);
                                format_metrics(s, &b);
                                enum MHD_Result r =
                                    queue(c, rq, MHD_HTTP_OK, "text/plain; version=0.0.4",
                                          b.data ? b.data : "", b.len);
                                dynbuf_free(&b);
                                return r;
                        }
                        return queue_text(c, rq, MHD_HTTP_NOT_FOUND, "not found\n");
                }
                if (!origin_ok(rq, c)) {
                        refuse(rq, RF_BAD_ORIGIN);
                        snprintf(rq->method, sizeof(rq->method), "?");
                        return queue_rpc_error(c, rq, MHD_HTTP_FORBIDDEN, RPC_INVALID_REQUEST,
                                               "Origin not allowed", NULL, NULL);
                }
                int a = authorize(rq, c);
                if (a <= 0)
                        return queue_unauthorized(c, rq, a == 0);
                if (strcmp(method, "POST") != 0) {
                        /* No standalone SSE stream: the server sends nothing
                         * outside a request (2025-11-25 allows 405 for GET;
                         * 2026-07-28 has no GET stream). */
                        struct MHD_Response *r =
                            MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
                        if (!r)
                                return MHD_NO;
                        MHD_add_response_header(r, "Allow", "POST");
                        MHD_add_response_header(r, "Airlock-Instance", s->opt.instance);
                        rq->http_status = MHD_HTTP_METHOD_NOT_ALLOWED;
                        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_METHOD_NOT_ALLOWED, r);
                        MHD_destroy_response(r);
                        return ret;
                }
                if (atomic_load(&s->draining)) {
                        refuse(rq, RF_DRAINING);
                        snprintf(rq->method, sizeof(rq->method), "?");
                        return queue_rpc_error(c, rq, MHD_HTTP_SERVICE_UNAVAILABLE,
                                               RPC_INTERNAL_ERROR, "the server is shutting down",
                                               "Retry-After", RETRY_AFTER_S);
                }
                const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
                if (len && strtoull(len, NULL, 10) > s->opt.max_body) {
                        refuse(rq, RF_BODY_TOO_LARGE);
                        snprintf(rq->method, sizeof(rq->method), "?");
                        return queue_rpc_error(c, rq, MHD_HTTP_CONTENT_TOO_LARGE,
                                               RPC_INVALID_REQUEST, "request body too large", NULL,
                                               NULL);
                }
                const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
                rq->sse = accept && strstr(accept, "text/event-stream");
                return MHD_YES;
        }
        if (*upload_data_size) {
                size_t n = *upload_data_size;
                *upload_data_size = 0;
                /* A body that trickles in holds its connection's thread: it
                 * has twice the idle timeout to arrive in full. */
                if (mono_ns() - rq->t0 > 2ull * s->opt.http_timeout_s * 1000000000ull) {
                        refuse(rq, RF_SLOW_BODY);
                        snprintf(rq->method, sizeof(rq->method), "?");
                        rq->http_status = MHD_HTTP_REQUEST_TIMEOUT;
                        return MHD_NO;
                }
                if (rq->too_large || rq->over_budget)
                        return MHD_YES; /* read and dropped, then refused */
                if (atomic_fetch_add(&s->body_bytes, n) + n > s->opt.max_body_total) {
                        atomic_fetch_sub(&s->body_bytes, n);
                        rq->over_budget = true;
                        return MHD_YES;
                }
                rq->held += n;
                if (dynbuf_append(&rq->body, upload_data, n) < 0)
                        rq->too_large = true;
                return MHD_YES;
        }
        if (rq->http_status)
                return MHD_YES; /* answered already */
        /* A refused body is never used: its bytes leave the budget before
         * the answer goes, not when the connection is done, so that a
         * client that retries at once is not refused for bytes nobody
         * holds any more. */
        if (rq->over_budget || rq->too_large)
                release_body(rq);
        if (rq->over_budget && !rq->too_large) {
                refuse(rq, RF_BODY_MEMORY);
                snprintf(rq->method, sizeof(rq->method), "?");
                return queue_rpc_error(c, rq, MHD_HTTP_SERVICE_UNAVAILABLE, RPC_INTERNAL_ERROR,
                                       "too many request bodies held at once; retry later",
                                       "Retry-After", RETRY_AFTER_S);
        }
        if (rq->too_large) {
                refuse(rq, RF_BODY_TOO_LARGE);
                snprintf(rq->method, sizeof(rq->method), "?");
                return queue_rpc_error(c, rq, MHD_HTTP_CONTENT_TOO_LARGE, RPC_INVALID_REQUEST,
                                       "request body too large", NULL, NULL);
        }
        (void)version;
        return handle_mcp(c, rq);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
        (void)c;
        server *s = cls;
        request *rq = *con_cls;
        if (!rq)
                return;
        *con_cls = NULL;
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && rq->streaming && rq->status == ST_OK &&
            !(rq->sink && rq->sink->got_resp))
                rq->status = ST_CANCELLED;
        sink_free(rq->sink); /* cancels a call still running: its client is gone */
        json_log(rq);
        release_body(rq);
        atomic_fetch_sub(&s->body_bytes, rq->parsed);
        free(rq->out);
        free(rq);
        atomic_fetch_sub(&s->requests, 1);
}

/* ---- metrics text ------------------------------------------------------- */

static void put(dynbuf *b, const char *fmt, ...) _printf_(2, 3);
static void put(dynbuf *b, const char *fmt, ...)
{
        char line[2048];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        if (n > 0)
                (void)dynbuf_append(b, line,
                                    (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

static void format_metrics(server *s, dynbuf *b)
{
        bool core = atomic_load(&s->core_ready);
        put(b, "# HELP airlock_calls_total MCP requests answered, by outcome.\n"
               "# TYPE airlock_calls_total counter\n");
        for (int i = 0; i < ST_N; i++)
                put(b, "airlock_calls_total{status=\"%s\"} %lu\n", status_names[i],
                    atomic_load(&s->m.calls[i]));
        put(b, "# HELP airlock_refusals_total Requests refused before they ran, by reason.\n"
               "# TYPE airlock_refusals_total counter\n");
        for (int i = 0; i < RF_N; i++)
                put(b, "airlock_refusals_total{reason=\"%s\"} %lu\n", refusal_names[i],
                    atomic_load(&s->m.refusals[i]));
        put(b,
            "# HELP airlock_auth_failures_total Requests without a valid bearer token.\n"
            "# TYPE airlock_auth_failures_total counter\n"
            "airlock_auth_failures_total{reason=\"missing\"} %lu\n"
            "airlock_auth_failures_total{reason=\"invalid\"} %lu\n",
            atomic_load(&s->m.auth_missing), atomic_load(&s->m.auth_invalid));
        put(b,
            "# HELP airlock_http_requests_total HTTP requests received.\n"
            "# TYPE airlock_http_requests_total counter\n"
            "airlock_http_requests_total %lu\n",
            atomic_load(&s->m.http_requests));
        pthread_mutex_lock(&s->m.hist_lock);
        put(b, "# HELP airlock_run_duration_seconds tools/call latency, admission to response.\n"
               "# TYPE airlock_run_duration_seconds histogram\n");
        unsigned long cum = 0;
        for (size_t i = 0; i < N_BUCKETS; i++) {
                cum += s->m.hist[i];
                put(b, "airlock_run_duration_seconds_bucket{le=\"%g\"} %lu\n", latency_buckets[i],
                    cum);
        }
        cum += s->m.hist[N_BUCKETS];
        put(b,
            "airlock_run_duration_seconds_bucket{le=\"+Inf\"} %lu\n"
            "airlock_run_duration_seconds_sum %.6f\n"
            "airlock_run_duration_seconds_count %lu\n",
            cum, s->m.hist_sum, s->m.hist_count);
        pthread_mutex_unlock(&s->m.hist_lock);
        pthread_mutex_lock(&s->slot_lock);
        unsigned running = s->running, waiting = s->waiting, held = s->held;
        pthread_mutex_unlock(&s->slot_lock);
        put(b,
            "# HELP airlock_runs_in_flight tools/call holding a run slot.\n"
            "# TYPE airlock_runs_in_flight gauge\n"
            "airlock_runs_in_flight %u\n"
            "# HELP airlock_queue_depth tools/call waiting for a run slot.\n"
            "# TYPE airlock_queue_depth gauge\n"
            "airlock_queue_depth %u\n"
            "# HELP airlock_requests_held POSTs held until the server is built.\n"
            "# TYPE airlock_requests_held gauge\n"
            "airlock_requests_held %u\n"
            "# HELP airlock_run_slots Run slots (--max-runs).\n"
            "# TYPE airlock_run_slots gauge\n"
            "airlock_run_slots %u\n",
            running, waiting, held, s->opt.max_runs);
        put(b,
            "# HELP airlock_sandbox_runs Runs in progress in sandboxes (warm-up included).\n"
            "# TYPE airlock_sandbox_runs gauge\n"
            "airlock_sandbox_runs %u\n"
            "# HELP airlock_sessions_open Sessions open on this instance.\n"
            "# TYPE airlock_sessions_open gauge\n"
            "airlock_sessions_open %u\n"
            "# HELP airlock_ready 1 when ready for calls.\n"
            "# TYPE airlock_ready gauge\n"
            "airlock_ready %d\n",
            core ? mcp_core_calls(s->core) : 0, core ? mcp_core_sessions(s->core) : 0,
            atomic_load(&s->ready) && !atomic_load(&s->draining));
        const union MHD_DaemonInfo *di =
            s->d ? MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS) : NULL;
        put(b,
            "# HELP airlock_http_connections Open HTTP connections.\n"
            "# TYPE airlock_http_connections gauge\n"
            "airlock_http_connections %u\n"
            "# HELP airlock_http_connections_max The cap (--max-connections).\n"
            "# TYPE airlock_http_connections_max gauge\n"
            "airlock_http_connections_max %u\n",
            di ? di->num_connections : 0, s->opt.max_connections);
        put(b,
            "# HELP airlock_instance_info This instance's name.\n"
            "# TYPE airlock_instance_info gauge\n"
            "airlock_instance_info{instance=\"%s\",version=\"%s\"} 1\n",
            s->opt.instance, AIRLOCK_VERSION);
}

/* ---- signals ------------------------------------------------------------ */

static int sig_pipe[2] = {-1, -1};
static pid_t server_pid;

static void on_signal(int sig)
{
        int saved = errno;
        /* A child between fork and exec still has this handler: only the
         * server itself may act on it. */
        if (getpid() == server_pid && sig_pipe[1] >= 0) {
                char c = (char)sig;
                ssize_t n = write(sig_pipe[1], &c, 1);
                (void)n;
        }
        errno = saved;
}

static int install_signals(void)
{
        server_pid = getpid();
        if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                return -errno;
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        return 0;
}

/* Builds a new configuration from the same configuration options, as at
 * start (tools files, allow-list, limits, secrets: a file: secret is read
 * again, an env: one cannot change in a running process), and makes it the
 * configuration of the calls that start from now on (mcp_core_reload). A
 * configuration that does not parse or load leaves the old one in place,
 * with one line on stderr naming why: the library's errors never contain a
 * secret's value. The serve and session options (--listen, caps, --audit)
 * are not reloaded. */
static void reload_config(server *s)
{
        /* The parser permutes its argv: a fresh copy each time. */
        char **av = calloc((size_t)s->cfg_argc + 1, sizeof(*av));
        if (!av) {
                fprintf(stderr, "airlock serve: SIGHUP: keeping the old configuration: out of "
                                "memory\n");
                return;
        }
        memcpy(av, s->cfg_argv, (size_t)s->cfg_argc * sizeof(*av));
        cli_options o;
        airlock_error err = {0};
        int r = cli_parse_options(s->cfg_argc, av, CLI_SERVE, &o, &err);
        free(av);
        if (r == 0) {
                airlock_config *cfg = TAKE_PTR(o.cfg);
                cli_options_free(&o);
                r = mcp_core_reload(s->core, cfg, &err);
        }
        if (r < 0)
                fprintf(stderr, "airlock serve: SIGHUP: keeping the old configuration: %s\n",
                        err.message[0] ? err.message : strerror(-r));
        else
                fprintf(stderr, "airlock serve: SIGHUP: configuration reloaded\n");
}

/* ---- listening ---------------------------------------------------------- */

/* ADDR:PORT or [V6ADDR]:PORT into ss; *loopback tells whether only this
 * machine can connect. */
static int parse_listen(const char *text, struct sockaddr_storage *ss, socklen_t *sl,
                        bool *loopback, char *why, size_t why_len)
{
        char host[INET6_ADDRSTRLEN + 2];
        const char *colon;
        if (text[0] == '[') {
                const char *end = strchr(text, ']');
                if (!end || end[1] != ':' || (size_t)(end - text - 1) >= sizeof(host))
                        goto bad;
                snprintf(host, sizeof(host), "%.*s", (int)(end - text - 1), text + 1);
                colon = end + 1;
        } else {
                colon = strrchr(text, ':');
                if (!colon || (size_t)(colon - text) >= sizeof(host))
                        goto bad;
                snprintf(host, sizeof(host), "%.*s", (int)(colon - text), text);
        }
        char *end = NULL;
        unsigned long port = strtoul(colon + 1, &end, 10);
        if (!colon[1] || *end || port > 65535)
                goto bad;
        memset(ss, 0, sizeof(*ss));
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
                in->sin_family = AF_INET;
                in->sin_port = htons((uint16_t)port);
                *sl = sizeof(*in);
                *loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
                return 0;
        }
        if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons((uint16_t)port);
                *sl = sizeof(*in6);
                *loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
                return 0;
        }
bad:
        snprintf(why, why_len,
                 "--listen: '%.100s' is not ADDR:PORT or [V6ADDR]:PORT with a numeric address",
                 text);
        return -EINVAL;
}

/* How often a server whose warm-up failed tries again. */
#define WARM_UP_RETRY_S 5

/* Runs the warm-up call (the first copy of the sandbox) through the core
 * before /readyz says ready. Returns whether the run succeeded: a server
 * whose sandbox cannot start (a masked /proc in a container, no user
 * namespaces) must not say it is ready, or a load balancer sends it
 * traffic that can only fail. */
static bool warm_up(server *s)
{
        http_sink *k = sink_new(s, "airlock-warm-up");
        if (!k)
                return false;
        k->base.internal = true;
        json_t *root =
            json_pack("{s:s, s:i, s:s, s:{s:s, s:{s:s}}}", "jsonrpc", "2.0", "id", 0, "method",
                      "tools/call", "params", "name", "execute_code", "arguments", "code", "pass");
        jsonrpc_message m = {.root = root,
                             .id = json_object_get(root, "id"),
                             .method = "tools/call",
                             .params = json_object_get(root, "params")};
        pthread_mutex_lock(&s->slot_lock);
        s->running++;
        pthread_mutex_unlock(&s->slot_lock);
        if (root && mcp_core_handle(s->core, &k->base, &m) == 1) {
                k->pending = true;
                sink_wait_done(k);
                k->pending = false;
        } else {
                slot_give(s, NULL, true);
        }
        bool ok = k->got_resp && k->status == ST_OK;
        json_decref(root);
        sink_free(k);
        return ok;
}

int cmd_serve(int argc, char **argv)
{
        char why[512];
        /* Kept for the reloads, before the parser permutes argv: a reload
         * parses them all again and takes the configuration. */
        _cleanup_free_ char **cfg_argv = calloc((size_t)argc + 1, sizeof(*cfg_argv));
        if (!cfg_argv) {
                fprintf(stderr, "airlock serve: out of memory\n");
                return EXIT_SANDBOX;
        }
        memcpy(cfg_argv, argv, (size_t)argc * sizeof(*cfg_argv));
        cli_options o;
        airlock_error err = {0};
        int r = cli_parse_options(argc, argv, CLI_SERVE, &o, &err);
        if (r == 1) {
                cli_usage(CLI_SERVE, stdout);
                return EXIT_OK;
        }
        serve_options so = o.serve;
        mcp_session_caps caps = o.caps;
        if (r < 0) {
                fprintf(stderr, "airlock serve: %s\n", err.message);
                return EXIT_USAGE;
        }
        mcp_raise_fd_limit();
        struct sockaddr_storage ss;
        socklen_t sl;
        bool loopback;
        if (parse_listen(so.listen, &ss, &sl, &loopback, why, sizeof(why)) < 0) {
                fprintf(stderr, "airlock serve: %s\n", why);
                cli_options_free(&o);
                return EXIT_USAGE;
        }
        if (!loopback && !so.tokens_file && !so.insecure_no_auth) {
                fprintf(stderr,
                        "airlock serve: --listen %s is reachable from other machines: give "
                        "--tokens FILE (or --insecure-no-auth to serve without authentication)\n",
                        so.listen);
                cli_options_free(&o);
                return EXIT_USAGE;
        }
        static server srv;
        server *s = &srv;
        s->opt = so;
        s->cfg_argc = argc;
        s->cfg_argv = cfg_argv;
        pthread_rwlock_init(&s->tokens_lock, NULL);
        pthread_mutex_init(&s->slot_lock, NULL);
        pthread_mutex_init(&s->m.hist_lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&s->slot_free, &ca);
        pthread_cond_init(&s->built, &ca);
        pthread_condattr_destroy(&ca);
        pthread_mutex_init(&s->hup_lock, NULL);
        s->hup_ep = s->hup_stop = -1;
        serve_quota_defaults(&s->opt, caps.max_sessions);
        s->max_sessions = caps.max_sessions;
        unsigned limits[QUOTA_KINDS] = {[QUOTA_SESSIONS] = s->opt.max_sessions_per_token,
                                        [QUOTA_RUNS] = s->opt.max_runs_per_token,
                                        [QUOTA_QUEUED] = s->opt.max_queue_per_token};
        if (!(s->quotas = quota_new(limits))) {
                fprintf(stderr, "airlock serve: out of memory\n");
                cli_options_free(&o);
                return EXIT_SANDBOX;
        }
        if (hup_init(s) < 0) {
                fprintf(stderr, "airlock serve: cannot watch connections: %s\n", strerror(errno));
                hup_fini(s);
                cli_options_free(&o);
                return EXIT_SANDBOX;
        }
        if (o.tenants_dir && mcp_workspaces_open(o.tenants_dir, o.ws_max_files, o.ws_max_bytes,
                                                 &s->workspaces, &err) < 0) {
                fprintf(stderr, "airlock serve: %s\n", err.message);
                cli_options_free(&o);
                return EXIT_USAGE;
        }
        if (so.tokens_file) {
                int n = tenants_load(so.tokens_file, &s->tt, why, sizeof(why));
                if (n < 0) {
                        fprintf(stderr, "airlock serve: %s\n", why);
                        cli_options_free(&o);
                        return EXIT_USAGE;
                }
                if (apply_overrides(s, &s->tt) < 0) {
                        fprintf(stderr, "airlock serve: out of memory\n");
                        cli_options_free(&o);
                        return EXIT_SANDBOX;
                }
        }
        signal(SIGPIPE, SIG_IGN);
        if (install_signals() < 0) {
                fprintf(stderr, "airlock serve: cannot watch signals: %s\n", strerror(errno));
                cli_options_free(&o);
                return EXIT_SANDBOX;
        }
        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                         MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
        if (ss.ss_family == AF_INET6)
                flags |= MHD_USE_IPv6;
        s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                                (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
                                (unsigned)so.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
                                (unsigned)so.http_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                                (size_t)MAX_HEADER_MEM, MHD_OPTION_THREAD_STACK_SIZE,
                                (size_t)(512u << 10), MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
        if (!s->d) {
                fprintf(stderr, "airlock serve: cannot listen on %s: %s\n", so.listen,
                        strerror(errno));
                cli_options_free(&o);
                return EXIT_USAGE;
        }
        /* The port actually bound (--listen ...:0 picks one). */
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
        fprintf(stderr, "airlock serve: instance %s listening on %s (port %u)%s\n", s->opt.instance,
                so.listen, di ? (unsigned)di->port : 0,
                so.tokens_file ? "" : ", without authentication");
        /* The server is built while /healthz already answers (and /readyz
         * says warming up): the sandbox, the tool description, then one
         * warm-up run. */
        mcp_core_options co = {.stateless = true,
                               .instance = s->opt.instance,
                               .audit = o.audit,
                               .quotas = s->quotas,
                               .workspaces = s->workspaces,
                               .tenant = o.tenant};
        r = mcp_core_new(o.cfg, &caps, &co, &s->core, &err);
        if (r < 0) {
                fprintf(stderr, "airlock serve: %s\n", err.message);
                /* The requests held meanwhile are answered 503 before the
                 * connections close (a second at most). */
                announce_built(s, false);
                uint64_t until = mono_ns() + 1000000000ull;
                while (atomic_load(&s->requests) > 0 && mono_ns() < until) {
                        struct timespec pause = {0, 10 * 1000000L};
                        nanosleep(&pause, NULL);
                }
                MHD_stop_daemon(s->d);
                mcp_core_free(s->core);
                quota_free(s->quotas);
                mcp_workspaces_free(s->workspaces);
                cli_options_free(&o);
                return EXIT_USAGE;
        }
        announce_built(s, true);
        /* Until a warm-up run succeeds, /readyz says why not and the
         * warm-up is tried again every few seconds: calls still reach the
         * core meanwhile and report the sandbox's own error. */
        bool said = false;
        for (;;) {
                if (!atomic_load(&s->ready)) {
                        if (warm_up(s)) {
                                atomic_store(&s->ready, true);
                                fprintf(stderr, "airlock serve: ready\n");
                        } else if (!said) {
                                said = true;
                                atomic_store(&s->unavailable, true);
                                fprintf(stderr,
                                        "airlock serve: the sandbox could not run a warm-up call "
                                        "(see the error above); not ready, trying again every "
                                        "%d s\n",
                                        WARM_UP_RETRY_S);
                        }
                }
                char c;
                struct pollfd p = {.fd = sig_pipe[0], .events = POLLIN};
                int n = poll(&p, 1, atomic_load(&s->ready) ? -1 : WARM_UP_RETRY_S * 1000);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n == 0)
                        continue;
                if (read(sig_pipe[0], &c, 1) != 1)
                        continue;
                if (c == SIGHUP) {
                        reload_tokens(s);
                        reload_config(s);
                        continue;
                }
                break;
        }
        /* Drain: stop accepting, let the calls finish for the grace period,
         * cancel the rest, then close every session and sandbox. */
        atomic_store(&s->draining, true);
        fprintf(stderr, "airlock serve: draining (grace %.0f s)\n", s->opt.grace_s);
        pthread_mutex_lock(&s->slot_lock);
        pthread_cond_broadcast(&s->slot_free);
        pthread_mutex_unlock(&s->slot_lock);
        int lfd = MHD_quiesce_daemon(s->d);
        if (lfd >= 0)
                close(lfd);
        uint64_t deadline = mono_ns() + (uint64_t)(s->opt.grace_s * 1e9);
        if (!mcp_core_wait_calls(s->core, s->opt.grace_s)) {
                fprintf(stderr, "airlock serve: grace period over: cancelling %u call(s)\n",
                        mcp_core_calls(s->core));
                mcp_core_cancel_all(s->core);
        }
        /* The answers of the calls that finished are written before the
         * connections close (within the grace period, and a second more
         * for the cancelled ones' answers). */
        while (atomic_load(&s->requests) > 0 && mono_ns() < deadline + 1000000000ull) {
                struct timespec pause = {0, 10 * 1000000L};
                nanosleep(&pause, NULL);
        }
        MHD_stop_daemon(s->d);
        hup_fini(s);
        mcp_core_free(s->core);
        quota_free(s->quotas);
        tenants_free(&s->tt);
        mcp_workspaces_free(s->workspaces);
        cli_options_free(&o);
        fprintf(stderr, "airlock serve: stopped\n");
        return EXIT_OK;
}
