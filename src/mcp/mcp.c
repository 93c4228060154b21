/* airlock mcp: the execute_code tool served over the Model Context Protocol
 * on stdio (JSON-RPC 2.0, one message per line).
 *
 * Two eras of the protocol are served side by side, request by request. A
 * request whose params._meta names its protocol version
 * ("io.modelcontextprotocol/protocolVersion", revision 2026-07-28 and later)
 * is served statelessly as that revision asks: no handshake, its results
 * carry "resultType" and the server's identity in _meta, and server/discover
 * tells the versions, capabilities and identity. Any other request belongs to
 * the initialize handshake of 2025-11-25 and earlier, answered as those
 * revisions ask (and as this server always has).
 *
 * The main thread reads standard input and answers every request but
 * tools/call itself. Each tools/call runs on its own worker thread, so the
 * reader keeps reading and a notifications/cancelled can stop the run it
 * names (through the run's cancel eventfd). A call that carries a progress
 * token is reported on by one progress thread while it runs. Writes to
 * standard output are serialised by one mutex, one whole line at a time. The
 * server keeps serving after every error. End of input lets the calls in
 * progress finish and answers them, as long as someone still reads standard
 * output; SIGTERM, SIGINT or SIGHUP, or the loss of the reader of standard
 * output (the client went away), cancels them. Either way the sandbox cache
 * is closed and the server exits 0.
 *
 * The handling of one message does not depend on stdio: each request names
 * a sink (mcp_core.h) that receives what it produces, NULL for standard
 * output. `airlock serve` (serve.c) drives the same dispatcher, workers,
 * progress thread and sessions through the functions at the end of this
 * file, with a sink per HTTP request and no handshake state. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "audit.h"
#include "cli.h"
#include "base.h"
#include "mcp.h"
#include "mcp_core.h"
#include "mcp_session.h"
#include "tenants.h"
#include "tools.h"
#include "workspace.h"

#define MCP_MAX_LINE  (32u << 20) /* one message; longer lines are discarded */
#define MCP_MAX_CALLS 64          /* tools/call in progress at once */
#define MCP_CHUNK     (64u << 10)

/* Protocol revisions of the initialize handshake this server speaks, newest
 * first. The tool surface (tools/list, tools/call, ping, cancellation) is the
 * same in all of them. */
static const char *const protocol_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                                "2024-11-05"};

/* Revisions without a handshake (each request names its own), newest first. */
static const char *const modern_versions[] = {"2026-07-28"};

/* The per-request _meta keys of revision 2026-07-28 (basic/index, "_meta"). */
#define META_PROTOCOL_VERSION            "io.modelcontextprotocol/protocolVersion"
#define META_CLIENT_CAPS                 "io.modelcontextprotocol/clientCapabilities"
#define META_CLIENT_INFO                 "io.modelcontextprotocol/clientInfo"
#define META_SERVER_INFO                 "io.modelcontextprotocol/serverInfo"
#define META_SUBSCRIPTION_ID             "io.modelcontextprotocol/subscriptionId"
#define RPC_UNSUPPORTED_PROTOCOL_VERSION (-32022)

/* Progress of a tools/call that carries _meta.progressToken: a notification
 * at least every PROGRESS_EVERY_NS while it runs, and one within
 * PROGRESS_TICK_NS of new output, never two closer than that. */
#define PROGRESS_EVERY_NS (2000ull * 1000000)
#define PROGRESS_TICK_NS  (250ull * 1000000)
#define PROGRESS_LINE_MAX 200 /* bytes of the latest output line in "message" */

/* One version of the configuration and what the server made from it. A
 * request takes a reference on the current version at its start and drops
 * it at its end, so that a reload (airlock serve on SIGHUP) never changes
 * the configuration under a call in flight; the last reference frees it. */
typedef struct cfg_version {
        unsigned refs; /* under srv->cfg_lock */
        airlock_config *cfg;
        bool owns_cfg; /* the first version's belongs to the command's options */
        json_t *tools; /* every entry of tools/list (tools.c) */
        char *instructions;
        uint64_t max_stdout; /* the configured cap of stdout and stderr */
        /* With --tenants-dir: each tenant's copy of cfg, its workspace set
         * to the tenant's folder, made at the tenant's first call under
         * this version (under the server's cfg_lock), so that no tenant's
         * configuration object is another's. */
        struct tenant_cfg *tenants;
        unsigned n_tenants;
} cfg_version;

typedef struct tenant_cfg {
        char name[TENANT_NAME_MAX + 1];
        airlock_config *cfg;
        struct tenant_cfg *next;
} tenant_cfg;

/* Tenants' copies one configuration version holds at most: above the
 * tokens file's 1,024 tenants, with room for tenants that come and go
 * while a reload fails. */
#define MAX_TENANT_CFGS 4096

struct mcp_server {
        /* The current configuration: read and swapped under cfg_lock, which
         * is held for nothing else (never across a call into airlock). */
        pthread_mutex_t cfg_lock;
        cfg_version *cur;
        airlock_cache *cache;
        mcp_sessions *sessions;
        mcp_store *store; /* the files of recent runs, for resources/read */
        bool initialized;
        atomic_bool warmed_up;     /* the warm-up run was started */
        atomic_bool output_broken; /* standard output is gone: stop serving */
        pthread_mutex_t out_lock;
        pthread_mutex_t lock; /* everything below */
        pthread_cond_t calls_done;
        mcp_call *calls;
        unsigned n_calls;
        /* Cancel eventfds of finished calls that were never signalled, for
         * the next calls: two system calls fewer on each call's path. */
        int spare_fds[8];
        unsigned n_spare;
        /* Workers stay for the next call: a new thread per call cost a
         * stack's worth of page faults and a wake-up on another CPU. */
        pthread_cond_t work;
        mcp_call *queue, **queue_end; /* calls not yet taken by a worker */
        unsigned n_queued, n_workers, idle_workers;
        bool stopping;
        /* Reading standard input is a role that moves between threads: a
         * reader that gets a tools/call with nothing after it runs the call
         * itself, which saves the wake-up of a worker on the call's path,
         * and hands the role to another thread only once input comes or
         * the run has to wait (see run_call). Only the thread with the
         * role touches the reader state below. */
        bool reader_free;   /* the role waits for a thread to take it */
        bool input_done;    /* end of input or a stop signal: nobody reads */
        bool input_stopped; /* ... and it was a stop signal */
        bool may_inline;    /* the line being handled is the last one read */
        mcp_call *inline_call;
        int input_watch; /* epoll set of stdin, stdout's errors and the stop pipe, or -1 */
        int audit_fd;    /* --audit FILE, or -1 */
        /* The transport that audit lines name: "mcp" (stdio) or "http". */
        const char *transport;
        /* The command that stderr lines name: "airlock mcp" or "airlock serve". */
        const char *name;
        char *chunk;
        dynbuf line;
        bool discarding;
        /* Progress: the calls with a progress token, reported on by one
         * thread. Notifications are sent under prog_lock, and a call leaves
         * the list under it before its response is sent, so that no
         * notification ever follows the response. Lock order: srv->lock is
         * never held while prog_lock is taken. */
        pthread_mutex_t prog_lock;
        pthread_cond_t prog_wake;
        mcp_call *prog_calls;
        bool prog_started, prog_stop;
        pthread_t prog_thread;
        /* What the runs' output hooks write and the progress thread reads
         * (mcp_call.live): held only to copy a few bytes, never across I/O,
         * because the hook runs inside a run's loop. */
        pthread_mutex_t live_lock;
        /* The HTTP transport: no handshake state (mcp_core_options). */
        bool stateless;
        /* --tenants-dir: the tenants' workspaces, or NULL; tenant is the
         * tenant of a call without an owner (stdio, or a server without
         * tokens: --tenant). */
        mcp_workspaces *workspaces;
        char tenant[TENANT_NAME_MAX + 1];
        bool locks_ready; /* server_init got as far as its locks */
};

/* A tools/call in progress (or the warm-up run, which has no id). */
struct mcp_call {
        mcp_server *srv;
        mcp_sink *sink; /* where its messages go (NULL: standard output) */
        /* A transport's watch of its own input while the call runs on the
         * transport's thread (mcp_core_run_here), or on_watch NULL. */
        int watch_fd;
        void (*on_watch)(void *arg);
        void *watch_arg;
        json_t *id; /* NULL for the warm-up run */
        char *code;
        size_t len;
        mcp_session_use *session;  /* execute_code with a session handle, or NULL */
        cfg_version *ver;          /* the configuration it runs with (a reference) */
        const airlock_config *cfg; /* ver's, or its tenant's copy in ver */
        int cancel_fd;             /* eventfd handed to the run as airlock_run_options.cancel_fd */
        bool run_record;           /* the client asked for _meta[MCP_META_RUN] */
        bool usage_record;         /* ... or for _meta[MCP_META_USAGE] */
        bool cancelled;
        bool modern;      /* the request named revision 2026-07-28 or later in _meta */
        json_t *progress; /* its _meta.progressToken, or NULL */
        /* Read and written by the progress thread only, under prog_lock. */
        atomic_bool silenced; /* cancelled: no message may go out for it any more */
        uint64_t started_ns, sent_ns;
        unsigned long sent_seq;
        double sent_progress;
        mcp_call *pnext;
        /* The latest line of output, under live_lock: written by the run's
         * output hook, read by the progress thread. */
        struct {
                char cur[PROGRESS_LINE_MAX], last[PROGRESS_LINE_MAX];
                size_t cur_len, last_len;
                unsigned long seq; /* output events so far */
        } live;
        mcp_call *next;  /* in the list of calls in progress */
        mcp_call *qnext; /* in the queue */
};

/* ---- output ------------------------------------------------------------ */

static const char *server_name(const mcp_server *srv)
{
        return srv->name ? srv->name : "airlock mcp";
}

/* ---- the configuration's versions ------------------------------------- */

static void version_free(cfg_version *v)
{
        if (!v)
                return;
        for (tenant_cfg *t = v->tenants, *next; t; t = next) {
                next = t->next;
                airlock_config_free(t->cfg);
                free(t);
        }
        json_decref(v->tools);
        free(v->instructions);
        if (v->owns_cfg)
                airlock_config_free(v->cfg);
        free(v);
}

/* The current version, with a reference the caller drops with cfg_drop. */
static cfg_version *cfg_take(mcp_server *srv)
{
        pthread_mutex_lock(&srv->cfg_lock);
        cfg_version *v = srv->cur;
        if (v)
                v->refs++;
        pthread_mutex_unlock(&srv->cfg_lock);
        return v;
}

static void cfg_drop(mcp_server *srv, cfg_version *v)
{
        if (!v)
                return;
        pthread_mutex_lock(&srv->cfg_lock);
        bool last = --v->refs == 0;
        pthread_mutex_unlock(&srv->cfg_lock);
        if (last)
                version_free(v);
}

/* The tenant whose workspace a call of owner uses. */
static const char *tenant_of(const mcp_server *srv, const char *owner)
{
        return owner ? owner : srv->tenant;
}

/* The configuration a call of owner runs with under version v: v's own, or
 * with --tenants-dir the tenant's copy of it, whose workspace is the
 * tenant's folder (made on first use, then kept by v). The folder is
 * checked (and made again if the operator removed it) at every call.
 * Returns NULL with err filled when the folder or the copy cannot be
 * made. */
static const airlock_config *version_cfg(mcp_server *srv, cfg_version *v, const char *owner,
                                         airlock_error *err)
{
        if (!srv->workspaces)
                return v->cfg;
        const char *tenant = tenant_of(srv, owner);
        char path[64 + TENANT_NAME_MAX];
        if (mcp_workspace_path(srv->workspaces, tenant, path, sizeof(path), err) < 0)
                return NULL;
        pthread_mutex_lock(&srv->cfg_lock);
        for (tenant_cfg *t = v->tenants; t; t = t->next)
                if (strcmp(t->name, tenant) == 0) {
                        pthread_mutex_unlock(&srv->cfg_lock);
                        return t->cfg;
                }
        bool full = v->n_tenants >= MAX_TENANT_CFGS;
        pthread_mutex_unlock(&srv->cfg_lock);
        if (full) {
                al_error(err, -EUSERS, NULL,
                         "this server holds configurations for %d tenants already; retry after "
                         "its next reload",
                         MAX_TENANT_CFGS);
                return NULL;
        }
        tenant_cfg *t = calloc(1, sizeof(*t));
        if (!t) {
                al_error(err, -ENOMEM, NULL, "out of memory");
                return NULL;
        }
        snprintf(t->name, sizeof(t->name), "%s", tenant);
        if (airlock_config_copy(v->cfg, &t->cfg, err) < 0 ||
            airlock_config_set_workspace(t->cfg, path, err) < 0) {
                airlock_config_free(t->cfg);
                free(t);
                return NULL;
        }
        pthread_mutex_lock(&srv->cfg_lock);
        for (tenant_cfg *o = v->tenants; o; o = o->next)
                if (strcmp(o->name, tenant) == 0) {
                        /* Another call of the tenant made it meanwhile. */
                        pthread_mutex_unlock(&srv->cfg_lock);
                        airlock_config_free(t->cfg);
                        free(t);
                        return o->cfg;
                }
        t->next = v->tenants;
        v->tenants = t;
        v->n_tenants++;
        pthread_mutex_unlock(&srv->cfg_lock);
        return t->cfg;
}

/* The session table's view of the same (mcp_sessions_set_config_source). */
static const airlock_config *sessions_cfg_get(void *arg, const char *owner, void **ref,
                                              airlock_error *err)
{
        mcp_server *srv = arg;
        cfg_version *v = cfg_take(srv);
        *ref = v;
        if (!v)
                return NULL;
        const airlock_config *cfg = version_cfg(srv, v, owner, err);
        if (!cfg) {
                cfg_drop(srv, v);
                *ref = NULL;
        }
        return cfg;
}

static void sessions_cfg_put(void *arg, void *ref)
{
        cfg_drop(arg, ref);
}

/* Writes one message as one line. Thread-safe; after a failed write the
 * server stops reading. */
static void send_message(mcp_server *srv, mcp_sink *sink, json_t *msg)
{
        if (sink) {
                /* Another transport: the sink takes the message. */
                if (msg)
                        sink->send(sink, msg);
                return;
        }
        char *text = json_dumps(msg, JSON_COMPACT | AL_JSON_REALS);
        json_decref(msg);
        if (!text) {
                fprintf(stderr, "%s: cannot encode a response\n", server_name(srv));
                return;
        }
        size_t n = strlen(text);
        text[n] = '\n'; /* replaces the NUL; written with its length */
        pthread_mutex_lock(&srv->out_lock);
        if (!srv->output_broken && al_write_full(STDOUT_FILENO, text, n + 1) < 0)
                srv->output_broken = true;
        pthread_mutex_unlock(&srv->out_lock);
        free(text);
}

static void send_result(mcp_server *srv, mcp_sink *sink, const json_t *id, json_t *result)
{
        if (!result) {
                send_message(srv, sink,
                             json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id,
                                       "error", "code", RPC_INTERNAL_ERROR, "message",
                                       "out of memory"));
                return;
        }
        send_message(srv, sink,
                     json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

static void send_error_va(mcp_server *srv, mcp_sink *sink, const json_t *id, int code, json_t *data,
                          const char *fmt, va_list ap)
{
        char msg[512];
        vsnprintf(msg, sizeof(msg), fmt, ap);
        /* The message may quote client input: keep it valid UTF-8. */
        _cleanup_free_ char *clean = al_utf8_sanitize(msg, strlen(msg));
        json_t *jid = id ? json_incref((json_t *)id) : json_null();
        json_t *err = json_pack("{s:i, s:s}", "code", code, "message", clean ? clean : msg);
        if (err && data)
                json_object_set_new(err, "data", data);
        else
                json_decref(data);
        send_message(srv, sink,
                     json_pack("{s:s, s:o, s:o}", "jsonrpc", "2.0", "id", jid, "error", err));
}

/* id NULL answers with "id": null (the request's id could not be read). */
static void send_error(mcp_server *srv, mcp_sink *sink, const json_t *id, int code, const char *fmt,
                       ...) _printf_(5, 6);
static void send_error(mcp_server *srv, mcp_sink *sink, const json_t *id, int code, const char *fmt,
                       ...)
{
        va_list ap;
        va_start(ap, fmt);
        send_error_va(srv, sink, id, code, NULL, fmt, ap);
        va_end(ap);
}

/* The same with the error's "data" member (taken, may be NULL). */
static void send_error_data(mcp_server *srv, mcp_sink *sink, const json_t *id, int code,
                            json_t *data, const char *fmt, ...) _printf_(6, 7);
static void send_error_data(mcp_server *srv, mcp_sink *sink, const json_t *id, int code,
                            json_t *data, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        send_error_va(srv, sink, id, code, data, fmt, ap);
        va_end(ap);
}

/* A result as revision 2026-07-28 asks for it: "resultType", the server's
 * identity in _meta (beside whatever _meta the result already has) and, for
 * the results a client may cache, "ttlMs" and "cacheScope". The hints are the
 * official SDK's defaults: 0 (fetch again when needed) and "private" (the tool
 * description names this configuration's workspace and tools). Takes and
 * returns result; NULL stays NULL. */
static json_t *modern_result(json_t *result, bool cacheable)
{
        if (!result)
                return NULL;
        if (!json_object_get(result, "resultType"))
                json_object_set_new(result, "resultType", json_string("complete"));
        json_t *meta = json_object_get(result, "_meta");
        if (!json_is_object(meta)) {
                meta = json_object();
                json_object_set_new(result, "_meta", meta);
        }
        if (meta && !json_object_get(meta, META_SERVER_INFO))
                json_object_set_new(
                    meta, META_SERVER_INFO,
                    json_pack("{s:s, s:s}", "name", "airlock", "version", AIRLOCK_VERSION));
        if (cacheable) {
                if (!json_object_get(result, "ttlMs"))
                        json_object_set_new(result, "ttlMs", json_integer(0));
                if (!json_object_get(result, "cacheScope"))
                        json_object_set_new(result, "cacheScope", json_string("private"));
        }
        return result;
}

/* A request as the dispatcher sees it: its id, params and era. */
typedef struct mcp_request {
        mcp_sink *sink; /* where its messages go; NULL: standard output */
        const json_t *id;
        const json_t *params;
        bool modern; /* params._meta named a revision without handshake */
} mcp_request;

/* Answers rq with result (taken), in the form of the request's era. */
static void reply(mcp_server *srv, const mcp_request *rq, json_t *result, bool cacheable)
{
        send_result(srv, rq->sink, rq->id, rq->modern ? modern_result(result, cacheable) : result);
}

/* ---- progress ---------------------------------------------------------- */

static uint64_t mono_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The run's output hook (airlock_run_options.on_output), on the run's thread: keeps
 * the latest line of output, stdout and stderr alike, for the progress
 * thread. A line ends at "\n" or "\r" (a progress bar redraws its line after
 * "\r"); blank lines are skipped; a line longer than PROGRESS_LINE_MAX keeps
 * its start; control characters become spaces. */
static void on_output(void *arg, int stream, const char *data, size_t len)
{
        (void)stream;
        mcp_call *c = arg;
        pthread_mutex_lock(&c->srv->live_lock);
        for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char)data[i];
                if (ch == '\n' || ch == '\r') {
                        bool blank = true;
                        for (size_t k = 0; k < c->live.cur_len && blank; k++)
                                blank = c->live.cur[k] == ' ';
                        if (!blank) {
                                memcpy(c->live.last, c->live.cur, c->live.cur_len);
                                c->live.last_len = c->live.cur_len;
                        }
                        c->live.cur_len = 0;
                } else if (c->live.cur_len < sizeof(c->live.cur)) {
                        c->live.cur[c->live.cur_len++] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
                }
        }
        c->live.seq++;
        pthread_mutex_unlock(&c->srv->live_lock);
}

/* Sends c's next notifications/progress if one is due at now: on new output
 * (at most one per PROGRESS_TICK_NS) and at least every PROGRESS_EVERY_NS.
 * "progress" is the seconds the call has run, which only grows; "message" the
 * latest line of output (the line being written when it has not ended), or
 * how long the code has run while it has printed nothing. Caller holds
 * prog_lock. */
static void progress_tick(mcp_server *srv, mcp_call *c, uint64_t now)
{
        if (atomic_load(&c->silenced))
                return;
        char text[PROGRESS_LINE_MAX + 1];
        size_t n;
        pthread_mutex_lock(&srv->live_lock);
        unsigned long seq = c->live.seq;
        if (c->live.cur_len) {
                n = c->live.cur_len;
                memcpy(text, c->live.cur, n);
        } else {
                n = c->live.last_len;
                memcpy(text, c->live.last, n);
        }
        pthread_mutex_unlock(&srv->live_lock);
        uint64_t since = now - c->sent_ns;
        if (since < PROGRESS_EVERY_NS && (seq == c->sent_seq || since < PROGRESS_TICK_NS))
                return;
        /* Trimmed; a character cut at the end becomes U+FFFD. */
        size_t start = 0;
        while (start < n && text[start] == ' ')
                start++;
        while (n > start && text[n - 1] == ' ')
                n--;
        text[n] = '\0';
        double elapsed = (double)(now - c->started_ns) / 1e9;
        double progress = (double)(uint64_t)(elapsed * 1000) / 1000;
        if (progress <= c->sent_progress)
                progress = c->sent_progress + 0.001;
        char status[64];
        snprintf(status, sizeof(status), "running for %.0f s", elapsed);
        _cleanup_free_ char *line = n > start ? al_utf8_sanitize(text + start, n - start) : NULL;
        c->sent_ns = now;
        c->sent_seq = seq;
        c->sent_progress = progress;
        send_message(srv, c->sink,
                     json_pack("{s:s, s:s, s:{s:O, s:f, s:s}}", "jsonrpc", "2.0", "method",
                               "notifications/progress", "params", "progressToken", c->progress,
                               "progress", progress, "message", line ? line : status));
}

/* The progress thread: wakes every PROGRESS_TICK_NS while some call with a
 * progress token runs, sleeps otherwise. */
static void *progress_main(void *arg)
{
        mcp_server *srv = arg;
        pthread_mutex_lock(&srv->prog_lock);
        while (!srv->prog_stop) {
                if (!srv->prog_calls) {
                        pthread_cond_wait(&srv->prog_wake, &srv->prog_lock);
                        continue;
                }
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t at =
                    (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + PROGRESS_TICK_NS;
                ts.tv_sec = (time_t)(at / 1000000000ull);
                ts.tv_nsec = (long)(at % 1000000000ull);
                pthread_cond_timedwait(&srv->prog_wake, &srv->prog_lock, &ts);
                uint64_t now = mono_ns();
                for (mcp_call *c = srv->prog_calls; c && !srv->prog_stop; c = c->pnext)
                        progress_tick(srv, c, now);
        }
        pthread_mutex_unlock(&srv->prog_lock);
        return NULL;
}

/* c's run starts: the progress thread reports on it from now on (starting
 * the thread with the first such call). Returns false when there is no
 * progress thread; the call then runs without progress. */
static bool progress_add(mcp_server *srv, mcp_call *c)
{
        pthread_mutex_lock(&srv->prog_lock);
        if (!srv->prog_started) {
                int r = pthread_create(&srv->prog_thread, NULL, progress_main, srv);
                if (r != 0) {
                        pthread_mutex_unlock(&srv->prog_lock);
                        fprintf(stderr, "%s: no progress notifications: %s\n", server_name(srv),
                                strerror(r));
                        return false;
                }
                srv->prog_started = true;
        }
        c->started_ns = c->sent_ns = mono_ns();
        c->pnext = srv->prog_calls;
        srv->prog_calls = c;
        pthread_cond_signal(&srv->prog_wake);
        pthread_mutex_unlock(&srv->prog_lock);
        return true;
}

/* c's run is over: after this no notification for it is sent, so its
 * response may go out. */
static void progress_remove(mcp_server *srv, mcp_call *c)
{
        pthread_mutex_lock(&srv->prog_lock);
        for (mcp_call **p = &srv->prog_calls; *p; p = &(*p)->pnext)
                if (*p == c) {
                        *p = c->pnext;
                        break;
                }
        pthread_mutex_unlock(&srv->prog_lock);
}

/* ---- tools/call workers ------------------------------------------------ */

static void call_free(mcp_call *c)
{
        if (!c)
                return;
        json_decref(c->id);
        json_decref(c->progress);
        free(c->code);
        if (c->session) /* never run: the session is free again */
                json_decref(mcp_sessions_end(c->session, NULL, NULL));
        if (c->ver)
                cfg_drop(c->srv, c->ver);
        if (c->cancel_fd >= 0 && c->srv && !c->cancelled) {
                mcp_server *srv = c->srv;
                pthread_mutex_lock(&srv->lock);
                if (srv->n_spare < ARRAY_SIZE(srv->spare_fds)) {
                        srv->spare_fds[srv->n_spare++] = c->cancel_fd;
                        c->cancel_fd = -1;
                }
                pthread_mutex_unlock(&srv->lock);
        }
        if (c->cancel_fd >= 0)
                close(c->cancel_fd);
        free(c);
}

/* Takes c off the list of calls in progress. Returns whether it had been
 * cancelled: a cancelled request gets no response. */
static bool call_unlist(mcp_server *srv, mcp_call *c)
{
        pthread_mutex_lock(&srv->lock);
        for (mcp_call **p = &srv->calls; *p; p = &(*p)->next)
                if (*p == c) {
                        *p = c->next;
                        break;
                }
        bool cancelled = c->cancelled;
        pthread_mutex_unlock(&srv->lock);
        return cancelled;
}

/* The call is over: the server may stop once no call is left. */
static void call_done(mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        srv->n_calls--;
        pthread_cond_broadcast(&srv->calls_done);
        pthread_mutex_unlock(&srv->lock);
}

/* The reader running a call on its own thread: it keeps the role until
 * input arrives or the run has to wait, and hands it on only then. */
typedef struct reader_watch {
        mcp_server *srv;
        bool handed_off;
} reader_watch;

static void hand_off_reader(mcp_server *srv);

static void on_input(void *arg)
{
        reader_watch *w = arg;
        w->handed_off = true;
        hand_off_reader(w->srv);
}

/* Runs a call; with w, on the reader's thread, watching for input. */
static void run_call(mcp_call *c, reader_watch *w)
{
        mcp_server *srv = c->srv;
        airlock_run_options opts = AIRLOCK_RUN_OPTIONS_INIT;
        opts.cancel_fd = c->cancel_fd;
        if (w) {
                opts.watch_fd = srv->input_watch;
                opts.on_watch = on_input;
                opts.watch_arg = w;
        } else if (c->on_watch) {
                opts.watch_fd = c->watch_fd;
                opts.on_watch = c->on_watch;
                opts.watch_arg = c->watch_arg;
        }
        airlock_result *res = NULL;
        airlock_error err = {0};
        /* Only a call with a progress token pays for watching the output. */
        bool live = c->progress && progress_add(srv, c);
        if (live) {
                opts.on_output = on_output;
                opts.output_arg = c;
        }
        int r = c->session ? mcp_sessions_run(c->session, c->code, c->len, &opts, &res, &err)
                           : airlock_cache_run(srv->cache, c->cfg ? c->cfg : c->ver->cfg, c->code,
                                               c->len, &opts, &res, &err);
        if (live)
                progress_remove(srv, c);
        json_t *result = NULL;
        char run_id[MCP_RUN_ID_LEN + 1];
        if (c->id && r >= 0 && mcp_run_id(run_id) < 0) {
                airlock_result_free(res);
                res = NULL;
                r = al_error(&err, -EIO, NULL, "no random bytes for the run's id");
        }
        if (c->id) {
                if (r < 0) {
                        char msg[AIRLOCK_MESSAGE_MAX + 64];
                        snprintf(msg, sizeof(msg), "airlock could not run the code: %s",
                                 err.message[0] ? err.message : strerror(-r));
                        result = mcp_tool_error(msg);
                } else {
                        result = mcp_tool_result(res, run_id, c->ver->max_stdout, c->run_record);
                        if (c->usage_record)
                                mcp_result_add_usage(result, res);
                        if (!result)
                                result = mcp_tool_error("airlock could not encode the result");
                }
        } else if (r < 0) {
                /* The warm-up failed; the first call reports why. */
                fprintf(stderr, "%s: could not prepare the sandbox: %s\n", server_name(srv),
                        err.message);
        }
        if (c->id && !(c->sink && c->sink->internal))
                cli_audit_write(srv->audit_fd, srv->transport ? srv->transport : "mcp",
                                r >= 0 ? run_id : NULL, NULL, r >= 0 ? res : NULL);
        if (c->session) {
                /* Taken off c under srv->lock, so that cancel_locked never
                 * sees a session use that has ended. */
                pthread_mutex_lock(&srv->lock);
                mcp_session_use *use = c->session;
                c->session = NULL;
                pthread_mutex_unlock(&srv->lock);
                result = mcp_sessions_end(use, result, r < 0 ? NULL : res);
        }
        const char *status = r < 0 ? "not run" : airlock_status_name(res->status);
        /* Decide and answer under the list lock's verdict: once the call is off
         * the list a cancellation can no longer find it. */
        json_t *id = c->id ? json_incref(c->id) : NULL;
        bool cancelled = call_unlist(srv, c);
        if (id && !cancelled) {
                /* The files stay readable by the URIs the result names, from
                 * before the client can have read them. */
                if (r >= 0) {
                        mcp_store_keep(srv->store, run_id, c->sink ? c->sink->owner : NULL, res);
                        res = NULL;
                }
                send_result(srv, c->sink, id, c->modern ? modern_result(result, false) : result);
        } else {
                json_decref(result);
                /* A cancelled request gets no response; the log says how its
                 * run ended (stderr is the server's log on stdio). */
                if (id) {
                        _cleanup_free_ char *idtext = json_dumps(id, JSON_ENCODE_ANY);
                        fprintf(stderr, "%s: request %s cancelled; the run ended as %s\n",
                                server_name(srv), idtext ? idtext : "?", status);
                }
        }
        airlock_result_free(res);
        json_decref(id);
        mcp_sink *sink = c->sink;
        call_free(c);
        /* The transport may free the sink from here on. */
        if (sink && sink->call_done)
                sink->call_done(sink);
        call_done(srv);
}

static void reader_loop(mcp_server *srv);

static bool reader_wanted_locked(const mcp_server *srv)
{
        return srv->reader_free && !srv->input_done;
}

/* Does one piece of work, with srv->lock held on entry and on return: a
 * queued call, or the reader role if it is free. Returns false when there
 * is neither. */
static bool take_work_locked(mcp_server *srv)
{
        mcp_call *c = srv->queue;
        if (c) {
                srv->queue = c->qnext;
                if (!srv->queue)
                        srv->queue_end = &srv->queue;
                srv->n_queued--;
                pthread_mutex_unlock(&srv->lock);
                run_call(c, NULL);
                pthread_mutex_lock(&srv->lock);
                return true;
        }
        if (reader_wanted_locked(srv)) {
                srv->reader_free = false;
                pthread_mutex_unlock(&srv->lock);
                reader_loop(srv);
                pthread_mutex_lock(&srv->lock);
                return true;
        }
        return false;
}

/* A worker: takes queued calls and the reader role until the server stops.
 * Its last touch of the server is the unlock after it has counted itself
 * out, so that stop_workers may tear the server down after that. */
static void *worker_main(void *arg)
{
        mcp_server *srv = arg;
        pthread_mutex_lock(&srv->lock);
        for (;;) {
                if (take_work_locked(srv))
                        continue;
                if (srv->stopping)
                        break;
                srv->idle_workers++;
                pthread_cond_wait(&srv->work, &srv->lock);
                srv->idle_workers--;
        }
        srv->n_workers--;
        pthread_cond_broadcast(&srv->calls_done);
        pthread_mutex_unlock(&srv->lock);
        return NULL;
}

/* Wakes an idle worker for new work, or starts one. Caller holds
 * srv->lock. Returns 0 or a positive error number. */
static int wake_worker_locked(mcp_server *srv, unsigned wanted)
{
        if (srv->idle_workers >= wanted) {
                pthread_cond_signal(&srv->work);
                return 0;
        }
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_t t;
        int r = pthread_create(&t, &attr, worker_main, srv);
        pthread_attr_destroy(&attr);
        if (r == 0)
                srv->n_workers++;
        return r;
}

/* The reader hands its role on, to run a call itself. */
static void hand_off_reader(mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        srv->reader_free = true;
        /* Without another thread, this one takes the role back after its
         * call (see take_work_locked). */
        (void)wake_worker_locked(srv, srv->n_queued + 1);
        pthread_mutex_unlock(&srv->lock);
}

static void cancel_locked(mcp_call *c);

/* Input ended, or a stop signal came or the client went away (stopped):
 * wakes whoever waits for it. When stopped, the calls in progress are
 * cancelled here and now, by the thread that saw it: the main thread may be
 * the one running a call (it lends itself to the calls it reads), and could
 * not cancel it before the run ends. */
static void finish_input(mcp_server *srv, bool stopped)
{
        pthread_mutex_lock(&srv->lock);
        srv->input_done = true;
        srv->input_stopped = stopped;
        if (stopped)
                for (mcp_call *c = srv->calls; c; c = c->next)
                        cancel_locked(c);
        pthread_cond_broadcast(&srv->work);
        pthread_mutex_unlock(&srv->lock);
}

/* Ends the workers once no call is left. */
static void stop_workers(mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        srv->stopping = true;
        pthread_cond_broadcast(&srv->work);
        while (srv->n_workers > 0)
                pthread_cond_wait(&srv->calls_done, &srv->lock);
        pthread_mutex_unlock(&srv->lock);
}

/* Queues the call for an idle worker, or starts a worker for it. Returns
 * < 0 (and frees c) when the call cannot be started. */
static int call_start(mcp_server *srv, mcp_call *c)
{
        c->srv = srv;
        c->cancel_fd = -1;
        /* The configuration is fixed for the whole call from here. */
        if (!c->ver && !(c->ver = cfg_take(srv))) {
                call_free(c);
                return -ENOMEM;
        }
        pthread_mutex_lock(&srv->lock);
        if (srv->n_spare)
                c->cancel_fd = srv->spare_fds[--srv->n_spare];
        pthread_mutex_unlock(&srv->lock);
        if (c->cancel_fd < 0)
                c->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (c->cancel_fd < 0) {
                int e = errno;
                call_free(c);
                return -e;
        }
        pthread_mutex_lock(&srv->lock);
        if (srv->n_calls >= MCP_MAX_CALLS) {
                pthread_mutex_unlock(&srv->lock);
                call_free(c);
                return -EBUSY;
        }
        c->next = srv->calls;
        srv->calls = c;
        srv->n_calls++;
        if (c->sink && c->sink->run_here && !c->sink->here) {
                /* The transport runs it on its own thread (mcp_core_run_here). */
                c->sink->here = c;
                pthread_mutex_unlock(&srv->lock);
                return 0;
        }
        if (srv->may_inline && !srv->inline_call) {
                /* The reader runs it on its own thread. */
                srv->inline_call = c;
                pthread_mutex_unlock(&srv->lock);
                return 0;
        }
        c->qnext = NULL;
        *srv->queue_end = c;
        srv->queue_end = &c->qnext;
        srv->n_queued++;
        /* Idle workers take queued calls in order: one more is needed only
         * when there are more queued calls than idle workers. */
        int r = wake_worker_locked(srv, srv->n_queued);
        if (r != 0 && srv->n_workers == 0) {
                /* Nobody could ever take it: take it back. */
                srv->queue = NULL;
                srv->queue_end = &srv->queue;
                srv->n_queued = 0;
                srv->calls = c->next;
                srv->n_calls--;
                pthread_mutex_unlock(&srv->lock);
                call_free(c);
                return -r;
        }
        /* Without a new worker, a busy one takes it when it is free. */
        pthread_mutex_unlock(&srv->lock);
        return 0;
}

static void cancel_locked(mcp_call *c)
{
        if (c->cancelled)
                return;
        c->cancelled = true;
        atomic_store(&c->silenced, true);
        /* Under srv->lock, which the end of the call takes to clear
         * c->session: the session is still in use here. */
        if (c->session)
                mcp_sessions_cancelled(c->session);
        uint64_t one = 1;
        ssize_t n = write(c->cancel_fd, &one, sizeof(one));
        (void)n; /* an eventfd write fails only on overflow, which is still readable */
}

static bool same_owner(const mcp_call *c, const char *owner)
{
        const char *o = c->sink ? c->sink->owner : NULL;
        return (!o && !owner) || (o && owner && strcmp(o, owner) == 0);
}

/* notifications/cancelled: stops the run of the request it names, among
 * the calls of the same owner (over HTTP, request ids are chosen by each
 * client: one client must not stop another's call). Unknown or finished
 * requests are ignored, as the protocol asks. */
static void cancel_request(mcp_server *srv, const char *owner, const json_t *request_id)
{
        if (!request_id)
                return;
        pthread_mutex_lock(&srv->lock);
        for (mcp_call *c = srv->calls; c; c = c->next)
                if (c->id && same_owner(c, owner) && json_equal(c->id, (json_t *)request_id))
                        cancel_locked(c);
        pthread_mutex_unlock(&srv->lock);
        /* A notification for the call that the progress thread was sending
         * goes out before this returns; none after: the request is done with. */
        pthread_mutex_lock(&srv->prog_lock);
        pthread_mutex_unlock(&srv->prog_lock);
}

static void cancel_all_and_wait(mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        for (mcp_call *c = srv->calls; c; c = c->next)
                cancel_locked(c);
        while (srv->n_calls > 0)
                pthread_cond_wait(&srv->calls_done, &srv->lock);
        pthread_mutex_unlock(&srv->lock);
}

/* After end of input: calls in progress finish and are answered (a script
 * may write its requests and close its end at once), unless a stop signal
 * comes while waiting or standard output loses its reader, which cancel
 * them. */
static bool stop_requested(void);
static bool output_gone(mcp_server *srv);

static void finish_calls(mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        while (srv->n_calls > 0) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 200 * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&srv->calls_done, &srv->lock, &ts);
                if (srv->n_calls > 0 && (stop_requested() || output_gone(srv)))
                        for (mcp_call *c = srv->calls; c; c = c->next)
                                cancel_locked(c);
        }
        pthread_mutex_unlock(&srv->lock);
}

/* Builds the sandbox's next copy in the background once a client shows up
 * (initialize, or its first request of revision 2026-07-28), so that the
 * first call does not wait for staging and the interpreter start. */
static void warm_up(mcp_server *srv)
{
        if (atomic_exchange(&srv->warmed_up, true))
                return;
        mcp_call *c = calloc(1, sizeof(*c));
        if (!c || !(c->code = strdup("pass"))) {
                free(c);
                return;
        }
        c->len = 4;
        call_start(srv, c);
}

/* ---- requests ---------------------------------------------------------- */

/* What this server offers, the same in initialize and server/discover. */
static json_t *server_capabilities(void)
{
        return json_pack("{s:{s:b}, s:{s:b, s:b}}", "tools", "listChanged", 0, "resources",
                         "subscribe", 0, "listChanged", 0);
}

/* Reads the era of a request from its params._meta (basic/index, "_meta";
 * basic/versioning). A request whose _meta names
 * "io.modelcontextprotocol/protocolVersion" is of revision 2026-07-28 or
 * later and must carry the whole envelope: a malformed one is -32602 with the
 * key at fault in data.envelope, a revision this server does not speak is
 * -32022 with the revisions it does (the modern ones: the older need the
 * handshake). Any other request is of the handshake era. Returns false when
 * it answered the request with an error. */
static bool read_envelope(mcp_server *srv, mcp_request *rq)
{
        const json_t *meta = json_object_get(rq->params, "_meta");
        const json_t *version = json_object_get(meta, META_PROTOCOL_VERSION);
        rq->modern = false;
        if (!json_is_object(meta) || !version)
                return true;
        const char *key = NULL, *problem = NULL;
        const json_t *caps = json_object_get(meta, META_CLIENT_CAPS);
        const json_t *info = json_object_get(meta, META_CLIENT_INFO);
        const json_t *token = json_object_get(meta, "progressToken");
        if (!json_is_string(version)) {
                key = META_PROTOCOL_VERSION;
                problem = "expected a string";
        } else if (!caps) {
                key = META_CLIENT_CAPS;
                problem = "missing";
        } else if (!json_is_object(caps)) {
                key = META_CLIENT_CAPS;
                problem = "expected an object";
        } else if (info &&
                   (!json_is_object(info) || !json_is_string(json_object_get(info, "name")) ||
                    !json_is_string(json_object_get(info, "version")))) {
                key = META_CLIENT_INFO;
                problem = "expected an object with string name and version";
        } else if (token && !json_is_string(token) && !json_is_integer(token)) {
                key = "progressToken";
                problem = "expected a string or an integer";
        }
        if (key) {
                send_error_data(
                    srv, rq->sink, rq->id, RPC_INVALID_PARAMS,
                    json_pack("{s:{s:s, s:s}}", "envelope", "key", key, "problem", problem),
                    "Invalid _meta envelope: %s: %s", key, problem);
                return false;
        }
        const char *asked = json_string_value(version);
        for (size_t i = 0; i < ARRAY_SIZE(modern_versions); i++)
                if (strcmp(asked, modern_versions[i]) == 0) {
                        rq->modern = true;
                        return true;
                }
        json_t *supported = json_array();
        for (size_t i = 0; i < ARRAY_SIZE(modern_versions); i++)
                json_array_append_new(supported, json_string(modern_versions[i]));
        send_error_data(srv, rq->sink, rq->id, RPC_UNSUPPORTED_PROTOCOL_VERSION,
                        json_pack("{s:o, s:s}", "supported", supported, "requested", asked),
                        "Unsupported protocol version: %.100s (this server speaks %s in _meta, "
                        "and %s to %s through initialize)",
                        asked, modern_versions[0],
                        protocol_versions[ARRAY_SIZE(protocol_versions) - 1], protocol_versions[0]);
        return false;
}

static void handle_initialize(mcp_server *srv, const mcp_request *rq)
{
        const json_t *id = rq->id, *params = rq->params;
        if (srv->initialized && !srv->stateless) {
                send_error(srv, rq->sink, id, RPC_INVALID_REQUEST, "already initialized");
                return;
        }
        const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
        if (!asked) {
                send_error(srv, rq->sink, id, RPC_INVALID_PARAMS,
                           "initialize: params.protocolVersion must be a string");
                return;
        }
        /* The client's revision when we speak it, else the newest we do; the
         * client then decides whether it can go on. */
        const char *version = protocol_versions[0];
        for (size_t i = 0; i < ARRAY_SIZE(protocol_versions); i++)
                if (strcmp(asked, protocol_versions[i]) == 0)
                        version = protocol_versions[i];
        if (!srv->stateless)
                srv->initialized = true;
        cfg_version *v = cfg_take(srv);
        send_result(srv, rq->sink, id,
                    json_pack("{s:s, s:o, s:{s:s, s:s}, s:s}", "protocolVersion", version,
                              "capabilities", server_capabilities(), "serverInfo", "name",
                              "airlock", "version", AIRLOCK_VERSION, "instructions",
                              v->instructions));
        cfg_drop(srv, v);
        warm_up(srv);
}

/* server/discover (server/discover.mdx): the revisions without handshake,
 * the capabilities, the instructions and, in _meta, the server's identity. */
static void handle_discover(mcp_server *srv, const mcp_request *rq)
{
        json_t *versions = json_array();
        for (size_t i = 0; i < ARRAY_SIZE(modern_versions); i++)
                json_array_append_new(versions, json_string(modern_versions[i]));
        cfg_version *v = cfg_take(srv);
        reply(srv, rq,
              json_pack("{s:o, s:o, s:s}", "supportedVersions", versions, "capabilities",
                        server_capabilities(), "instructions", v->instructions),
              true);
        cfg_drop(srv, v);
}

/* subscriptions/listen (basic/patterns/subscriptions.mdx): this server has
 * no change to tell (listChanged false: a reload of airlock serve changes
 * the description that the next tools/list returns, unannounced), so it
 * honours none of the requested notification types: the acknowledgment says
 * so, and the stream closes at once, gracefully, with the listen request's
 * result, as the official SDK does for an empty filter. */
static void handle_listen(mcp_server *srv, const mcp_request *rq)
{
        if (!json_is_object(json_object_get(rq->params, "notifications"))) {
                send_error(srv, rq->sink, rq->id, RPC_INVALID_PARAMS,
                           "subscriptions/listen: params.notifications must be an object");
                return;
        }
        send_message(srv, rq->sink,
                     json_pack("{s:s, s:s, s:{s:{s:O}, s:{}}}", "jsonrpc", "2.0", "method",
                               "notifications/subscriptions/acknowledged", "params", "_meta",
                               META_SUBSCRIPTION_ID, rq->id, "notifications"));
        reply(srv, rq, json_pack("{s:{s:O}}", "_meta", META_SUBSCRIPTION_ID, rq->id), false);
}

/* Returns whether a call was started (it answers later). */
static bool handle_tools_call(mcp_server *srv, const mcp_request *rq)
{
        const json_t *id = rq->id, *params = rq->params;
        const char *name = json_string_value(json_object_get(params, "name"));
        if (!name) {
                send_error(srv, rq->sink, id, RPC_INVALID_PARAMS,
                           "tools/call: params.name must be a string");
                return false;
        }
        const mcp_tool *t = mcp_tool_find(name, srv->workspaces != NULL);
        if (!t) {
                char msg[512];
                mcp_tool_unknown(name, srv->workspaces != NULL, msg, sizeof(msg));
                send_error(srv, rq->sink, id, RPC_INVALID_PARAMS, "%s", msg);
                return false;
        }
        if (t->call) {
                const char *owner = rq->sink ? rq->sink->owner : NULL;
                mcp_tool_ctx ctx = {.sessions = srv->sessions,
                                    .workspaces = srv->workspaces,
                                    .owner = owner,
                                    .tenant = tenant_of(srv, owner)};
                reply(srv, rq, mcp_tool_call(t, &ctx, json_object_get(params, "arguments")), false);
                return false;
        }
        /* Bad arguments are a tool error, not a protocol error, so the model
         * sees what to fix. */
        const json_t *args = json_object_get(params, "arguments");
        const json_t *code = json_object_get(args, "code");
        if (!json_is_string(code)) {
                reply(srv, rq,
                      mcp_tool_error("execute_code needs the argument \"code\": a string "
                                     "of Python source"),
                      false);
                return false;
        }
        const char *key;
        const json_t *v;
        json_object_foreach ((json_t *)args, key, v) {
                if (strcmp(key, "code") != 0 && strcmp(key, "session") != 0) {
                        char msg[300];
                        snprintf(msg, sizeof(msg),
                                 "execute_code has no argument \"%.200s\"; it takes only "
                                 "\"code\" and \"session\"",
                                 key);
                        _cleanup_free_ char *clean = al_utf8_sanitize(msg, strlen(msg));
                        reply(srv, rq, mcp_tool_error(clean ? clean : msg), false);
                        return false;
                }
        }
        /* A progress token of another type is not one (the handshake era
         * does not check _meta; the envelope check refused it already). */
        const json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
        if (!json_is_string(token) && !json_is_integer(token))
                token = NULL;
        mcp_call *c = calloc(1, sizeof(*c));
        if (c) {
                c->cancel_fd = -1;
                c->sink = rq->sink;
                c->modern = rq->modern;
                c->len = json_string_length(code);
                c->code = malloc(c->len + 1);
                /* Copies of its own: the worker never shares a JSON value
                 * with the reader thread. */
                c->id = json_deep_copy(id);
                c->progress = token ? json_deep_copy(token) : NULL;
        }
        if (!c || !c->code || !c->id || (token && !c->progress)) {
                call_free(c);
                send_error(srv, rq->sink, id, RPC_INTERNAL_ERROR, "out of memory");
                return false;
        }
        memcpy(c->code, json_string_value(code), c->len + 1);
        const json_t *handle = json_object_get(args, "session");
        if (!handle && srv->workspaces && !(rq->sink && rq->sink->internal)) {
                /* The tenant's configuration, fixed for the whole call: its
                 * workspace is the tenant's folder. */
                airlock_error err = {0};
                c->srv = srv;
                if (!(c->ver = cfg_take(srv)) ||
                    !(c->cfg = version_cfg(srv, c->ver,
                                           rq->sink && !rq->sink->internal ? rq->sink->owner : NULL,
                                           &err))) {
                        call_free(c);
                        char msg[AIRLOCK_MESSAGE_MAX + 64];
                        snprintf(msg, sizeof(msg), "airlock could not run the code: %s",
                                 err.message[0] ? err.message : "out of memory");
                        reply(srv, rq, mcp_tool_error(msg), false);
                        return false;
                }
        }
        if (handle) {
                json_t *e = mcp_sessions_begin(srv->sessions, handle,
                                               rq->sink ? rq->sink->owner : NULL, &c->session);
                if (e) {
                        call_free(c);
                        reply(srv, rq, e, false);
                        return false;
                }
        }
        srv->warmed_up = true; /* the call prepares the sandbox itself */
        /* The run record is for programs, on request: LangChain's adapter
         * puts a result's _meta into the text its model reads. */
        c->run_record =
            json_is_true(json_object_get(json_object_get(params, "_meta"), MCP_META_RUN));
        c->usage_record =
            c->run_record ||
            json_is_true(json_object_get(json_object_get(params, "_meta"), MCP_META_USAGE));
        int r = call_start(srv, c);
        if (r == 0)
                return true;
        if (r == -EBUSY)
                reply(srv, rq,
                      mcp_tool_error("too many execute_code calls in progress; wait for "
                                     "one to finish"),
                      false);
        else if (r < 0)
                send_error(srv, rq->sink, id, RPC_INTERNAL_ERROR, "cannot start the call: %s",
                           strerror(-r));
        return false;
}

/* resources/list and resources/read: the files of recent runs, by the URIs
 * their results named (see mcp_resources.c). A URI this process does not
 * hold is the error -32002, which says so. */
static void handle_resources(mcp_server *srv, const char *method, const mcp_request *rq)
{
        const json_t *id = rq->id, *params = rq->params;
        int code = 0;
        char why[1024];
        json_t *result;
        if (strcmp(method, "resources/read") == 0) {
                const char *uri = json_string_value(json_object_get(params, "uri"));
                if (!uri) {
                        send_error(srv, rq->sink, id, RPC_INVALID_PARAMS,
                                   "resources/read: params.uri must be a string");
                        return;
                }
                result = mcp_store_read(srv->store, rq->sink ? rq->sink->owner : NULL, uri, &code,
                                        why, sizeof(why));
        } else {
                const json_t *cursor = json_object_get(params, "cursor");
                if (cursor && !json_is_string(cursor)) {
                        send_error(srv, rq->sink, id, RPC_INVALID_PARAMS,
                                   "resources/list: params.cursor must be a string");
                        return;
                }
                result = mcp_store_list(srv->store, rq->sink ? rq->sink->owner : NULL,
                                        json_string_value(cursor), &code, why, sizeof(why));
        }
        if (result)
                reply(srv, rq, result, false);
        else
                send_error(srv, rq->sink, id, code, "%s", why);
}

/* The dispatcher. A request of revision 2026-07-28 (see read_envelope) needs
 * no handshake and is answered in that revision's form; initialize, even
 * after such requests, starts the handshake era, whose requests other than
 * ping wait for it. The two eras may share one connection, as
 * basic/versioning allows a dual-era server. */
static bool handle_request(mcp_server *srv, mcp_sink *sink, const char *method, const json_t *id,
                           const json_t *params)
{
        mcp_request rq_ = {.sink = sink, .id = id, .params = params};
        mcp_request *const rq = &rq_;
        if (!read_envelope(srv, rq))
                return false;
        if (!rq->modern && strcmp(method, "initialize") == 0) {
                handle_initialize(srv, rq);
                return false;
        }
        /* ping is allowed before initialize; everything else is not. */
        if (strcmp(method, "ping") == 0) {
                reply(srv, rq, json_object(), false);
                return false;
        }
        if (strcmp(method, "server/discover") == 0) {
                /* Part of revision 2026-07-28 only, whose requests must
                 * carry the envelope. */
                if (!rq->modern) {
                        send_error(srv, rq->sink, id, RPC_INVALID_PARAMS,
                                   "server/discover needs params._meta with \"%s\" (%s) and "
                                   "\"%s\"",
                                   META_PROTOCOL_VERSION, modern_versions[0], META_CLIENT_CAPS);
                        return false;
                }
                warm_up(srv);
                handle_discover(srv, rq);
                return false;
        }
        if (rq->modern) {
                if (strcmp(method, "tools/call") != 0)
                        warm_up(srv);
                if (strcmp(method, "subscriptions/listen") == 0) {
                        handle_listen(srv, rq);
                        return false;
                }
        } else if (!srv->initialized && !srv->stateless) {
                send_error(srv, rq->sink, id, RPC_INVALID_REQUEST,
                           "server not initialized: send initialize first, or name the protocol "
                           "version %s in params._meta (got %.100s)",
                           modern_versions[0], method);
                return false;
        }
        if (strcmp(method, "tools/list") == 0) {
                /* The list of the current configuration: a reload that
                 * changed the tools file shows in the next tools/list. */
                cfg_version *v = cfg_take(srv);
                reply(srv, rq, json_pack("{s:O}", "tools", v->tools), true);
                cfg_drop(srv, v);
        } else if (strcmp(method, "tools/call") == 0)
                return handle_tools_call(srv, rq);
        else if (strcmp(method, "resources/list") == 0 || strcmp(method, "resources/read") == 0)
                handle_resources(srv, method, rq);
        else
                send_error(srv, rq->sink, id, RPC_METHOD_NOT_FOUND, "method not found: %.100s",
                           method);
        return false;
}

static void handle_notification(mcp_server *srv, mcp_sink *sink, const char *method,
                                const json_t *params)
{
        if (strcmp(method, "notifications/cancelled") == 0)
                cancel_request(srv, sink ? sink->owner : NULL,
                               json_object_get(params, "requestId"));
        /* notifications/initialized and every other notification need no
         * action; notifications are never answered. */
}

static void handle_line(mcp_server *srv, const char *line, size_t len)
{
        mcp_message m;
        char why[256];
        int code = mcp_parse_message(line, len, &m, why, sizeof(why));
        if (code != 0)
                send_error(srv, NULL, m.id, code, "%s", why);
        else if (m.method && m.id)
                (void)handle_request(srv, NULL, m.method, m.id, m.params);
        else if (m.method)
                handle_notification(srv, NULL, m.method, m.params);
        /* else: a response from the client; this server sends no requests,
         * so there is nothing to match it with. */
        json_decref(m.root);
}

/* ---- input ------------------------------------------------------------- */

/* ---- shutdown on signals ----------------------------------------------- */

/* SIGTERM, SIGINT and SIGHUP end the server as end of input does: runs are
 * stopped and every sandbox is closed, so nothing is left behind. The handler
 * only writes a byte to a pipe that the reader polls beside standard input. */
static int stop_pipe[2] = {-1, -1};
static pid_t server_pid;

static void on_stop_signal(int sig)
{
        int saved = errno;
        /* A child between fork and exec still has this handler: only the
         * server itself may ask the server to stop. */
        if (getpid() == server_pid && stop_pipe[1] >= 0) {
                char c = (char)sig;
                ssize_t n = write(stop_pipe[1], &c, 1);
                (void)n; /* a full pipe already holds a stop request */
        }
        errno = saved;
}

static void install_stop_signals(void)
{
        server_pid = getpid();
        if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                return; /* signals then keep their default action */
        struct sigaction sa = {.sa_handler = on_stop_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
}

/* True when nobody reads standard output any more: the client went away
 * (a pipe whose reading end is closed reports POLLERR, a terminal that hung
 * up POLLHUP), or a write to it failed. Standard output that cannot tell
 * (a regular file) is never gone. */
static bool output_gone(mcp_server *srv)
{
        if (srv->output_broken)
                return true;
        struct pollfd p = {.fd = STDOUT_FILENO, .events = 0};
        return poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL));
}

typedef enum wait_outcome {
        INPUT_READY,
        INPUT_STOP,        /* a stop signal came */
        INPUT_CLIENT_GONE, /* standard output lost its reader */
} wait_outcome;

/* Waits until standard input is readable, a stop signal comes or standard
 * output loses its reader, whichever is first. */
static wait_outcome wait_input(mcp_server *srv)
{
        struct pollfd fds[3] = {
            {.fd = STDIN_FILENO, .events = POLLIN},
            /* No events asked: only its errors and hang-up are reported. */
            {.fd = STDOUT_FILENO, .events = 0},
            {.fd = stop_pipe[0], .events = POLLIN},
        };
        for (;;) {
                if (srv->output_broken)
                        return INPUT_CLIENT_GONE;
                int n = poll(fds, stop_pipe[0] >= 0 ? 3 : 2, -1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return INPUT_READY; /* let read() report the problem */
                if (stop_pipe[0] >= 0 && (fds[2].revents & POLLIN))
                        return INPUT_STOP;
                if (fds[1].revents & (POLLERR | POLLHUP | POLLNVAL))
                        return INPUT_CLIENT_GONE;
                if (fds[0].revents)
                        return INPUT_READY;
        }
}

/* True once a stop signal has come. */
static bool stop_requested(void)
{
        if (stop_pipe[0] < 0)
                return false;
        struct pollfd p = {.fd = stop_pipe[0], .events = POLLIN};
        return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

/* The client went away: nobody can read the answers, so the calls in
 * progress are cancelled as a stop signal cancels them. */
static void client_gone(mcp_server *srv)
{
        srv->output_broken = true;
        fprintf(stderr, "airlock mcp: the client closed its end of standard output; stopping "
                        "the calls in progress\n");
        finish_input(srv, true);
}

/* After the end of input, while calls still run: a client that closes its
 * two ends one after the other (input first) has gone all the same, and so
 * its calls are stopped when standard output loses its reader, as at once
 * (client_gone), or at a stop signal. The thread that read the end of input
 * watches, holding no call: the main thread may be running one itself, and
 * the run watches the input only until it has handed the reader role on. */
static void watch_output_while_calls(mcp_server *srv)
{
        for (;;) {
                pthread_mutex_lock(&srv->lock);
                unsigned left = srv->n_calls;
                pthread_mutex_unlock(&srv->lock);
                if (!left)
                        return;
                struct pollfd fds[2] = {{.fd = STDOUT_FILENO, .events = 0},
                                        {.fd = stop_pipe[0], .events = POLLIN}};
                int n = poll(fds, stop_pipe[0] >= 0 ? 2 : 1, 200);
                if (n > 0 && (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL))) {
                        client_gone(srv);
                        return;
                }
                if (n > 0 && stop_pipe[0] >= 0 && (fds[1].revents & POLLIN)) {
                        finish_input(srv, true);
                        return;
                }
        }
}

/* Holds the reader role: handles messages until end of input, a stop
 * signal or the loss of standard output (then marks the input done), or
 * until it hands the role on to run a call on this thread. */
static void reader_loop(mcp_server *srv)
{
        dynbuf *line = &srv->line;
        for (;;) {
                wait_outcome waited = wait_input(srv);
                if (waited == INPUT_STOP) {
                        finish_input(srv, true);
                        return;
                }
                if (waited == INPUT_CLIENT_GONE) {
                        client_gone(srv);
                        return;
                }
                ssize_t n = read(STDIN_FILENO, srv->chunk, MCP_CHUNK);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                const char *p = srv->chunk, *end = srv->chunk + n;
                while (p < end) {
                        const char *nl = memchr(p, '\n', (size_t)(end - p));
                        const char *stop = nl ? nl : end;
                        if (!srv->discarding && dynbuf_append(line, p, (size_t)(stop - p)) < 0) {
                                dynbuf_free(line);
                                dynbuf_init(line, MCP_MAX_LINE);
                                srv->discarding = true;
                        }
                        p = stop;
                        if (!nl)
                                break;
                        p++;
                        if (srv->discarding) {
                                send_error(srv, NULL, NULL, RPC_INVALID_REQUEST,
                                           "message longer than %u MiB: discarded",
                                           MCP_MAX_LINE >> 20);
                                srv->discarding = false;
                                continue;
                        }
                        size_t len = line->len;
                        while (len && (line->data[len - 1] == '\r' || line->data[len - 1] == ' ' ||
                                       line->data[len - 1] == '\t'))
                                len--;
                        /* Only a call with nothing read after it may run on
                         * this thread: anything after it is still to be
                         * handled by the next reader, from this chunk. */
                        srv->may_inline = p == end;
                        if (len)
                                handle_line(srv, line->data, len);
                        srv->may_inline = false;
                        line->len = 0;
                        mcp_call *c = srv->inline_call;
                        if (c) {
                                srv->inline_call = NULL;
                                /* Waking another thread to read costs the
                                 * waker about 0.1 ms here: do it only once
                                 * input comes or the run has to wait, or
                                 * at once when nothing can watch the input. */
                                reader_watch w = {.srv = srv};
                                if (srv->input_watch < 0)
                                        on_input(&w);
                                run_call(c, w.handed_off ? NULL : &w);
                                if (w.handed_off)
                                        return;
                        }
                }
                if (srv->output_broken) {
                        client_gone(srv);
                        return;
                }
        }
        /* A last message without a newline still counts. */
        if (!srv->discarding && line->len && !srv->output_broken)
                handle_line(srv, line->data, line->len);
        /* End of input with nobody reading the answers either: a client
         * that died closes both at once. */
        if (output_gone(srv)) {
                client_gone(srv);
                return;
        }
        finish_input(srv, false);
        watch_output_while_calls(srv);
}

/* An epoll set that is readable when standard input or the stop pipe is,
 * or standard output lost its reader, for a run to watch while the reader
 * runs a call (-1 when standard input cannot be watched that way, a regular
 * file say). Standard output joins only where it can (a pipe, a socket, a
 * terminal); with no events asked, only its errors and hang-up wake. */
static int make_input_watch(void)
{
        int ep = epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0)
                return -1;
        struct epoll_event in = {.events = EPOLLIN, .data.fd = STDIN_FILENO};
        struct epoll_event out = {.events = 0, .data.fd = STDOUT_FILENO};
        struct epoll_event stop = {.events = EPOLLIN, .data.fd = stop_pipe[0]};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, STDIN_FILENO, &in) < 0 ||
            (stop_pipe[0] >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, stop_pipe[0], &stop) < 0)) {
                close(ep);
                return -1;
        }
        (void)epoll_ctl(ep, EPOLL_CTL_ADD, STDOUT_FILENO, &out);
        return ep;
}

/* Serves standard input on the calling (main) thread and on the workers
 * until end of input or a stop signal; returns true for a stop signal.
 * Standard input is read line by line; a line longer than MCP_MAX_LINE is
 * discarded up to its newline, without being held in memory, and answered
 * with an error. */
static bool serve(mcp_server *srv)
{
        srv->chunk = malloc(MCP_CHUNK);
        if (!srv->chunk)
                return false;
        dynbuf_init(&srv->line, MCP_MAX_LINE);
        srv->input_watch = make_input_watch();
        reader_loop(srv);
        /* Between calls the main thread works as a worker until nobody
         * reads any more. */
        pthread_mutex_lock(&srv->lock);
        while (!srv->input_done) {
                if (!take_work_locked(srv))
                        pthread_cond_wait(&srv->work, &srv->lock);
        }
        bool stopped = srv->input_stopped;
        pthread_mutex_unlock(&srv->lock);
        return stopped;
}

/* ---- the command ------------------------------------------------------- */

/* Makes the version of cfg: the tool description (from the sandbox, built
 * now through the cache the calls use, so that it names the packages found
 * inside), the instructions, the caps the results need. A configured path
 * at fault is a configuration error; a sandbox that cannot start (a kernel
 * feature) leaves the description without the packages, and each call
 * reports the failure. With owns, the version owns cfg from here on, and
 * frees it on failure too. Returns 0 with *ret holding one reference. */
static int version_new(mcp_server *srv, airlock_config *cfg, bool owns, cfg_version **ret,
                       airlock_error *err)
{
        *ret = NULL;
        cfg_version *v = calloc(1, sizeof(*v));
        if (!v) {
                if (owns)
                        airlock_config_free(cfg);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        v->refs = 1;
        v->cfg = cfg;
        v->owns_cfg = owns;
        airlock_error berr = {0};
        _cleanup_free_ char *desc_json = airlock_cache_describe_json(srv->cache, cfg, &berr);
        if (!desc_json && berr.kind == AIRLOCK_ERROR_INPUT && berr.path[0]) {
                *err = berr;
                version_free(v);
                return berr.code < 0 ? berr.code : -EINVAL;
        }
        if (!desc_json) {
                fprintf(stderr,
                        "%s: warning: %s; the tool description does not list "
                        "the packages\n",
                        server_name(srv), berr.message);
                desc_json = airlock_describe_json(cfg, err);
        }
        if (!desc_json) {
                version_free(v);
                return -EINVAL;
        }
        json_t *d = json_loads(desc_json, 0, NULL);
        if (!d) {
                version_free(v);
                return al_error(err, -ENOMEM, NULL, "cannot read the tool description");
        }
        size_t i;
        json_t *w;
        json_array_foreach (json_object_get(d, "warnings"), i, w)
                fprintf(stderr, "%s: warning: %s\n", server_name(srv), json_string_value(w));
        v->instructions = strdup(json_string_value(json_object_get(d, "instructions")));
        v->tools = mcp_tools_list(srv->sessions, d, airlock_config_allow_count(cfg) > 0,
                                  srv->workspaces != NULL);
        json_decref(d);
        airlock_limits lim;
        airlock_config_get_limits(cfg, &lim);
        v->max_stdout = lim.max_stdout;
        if (!v->instructions || !v->tools) {
                version_free(v);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        *ret = v;
        return 0;
}

static int server_init(mcp_server *srv, airlock_config *cfg, const mcp_session_caps *caps,
                       airlock_error *err)
{
        pthread_mutex_init(&srv->cfg_lock, NULL);
        int r = airlock_cache_new(0, 0, &srv->cache, err);
        if (r < 0)
                return r;
        if (mcp_sessions_new(srv->cache, cfg, caps, &srv->sessions) < 0)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        mcp_sessions_set_config_source(srv->sessions, sessions_cfg_get, sessions_cfg_put, srv);
        r = version_new(srv, cfg, false, &srv->cur, err);
        if (r < 0)
                return r;
        if (mcp_store_new(&srv->store) < 0)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        pthread_mutex_init(&srv->out_lock, NULL);
        pthread_mutex_init(&srv->lock, NULL);
        pthread_cond_init(&srv->calls_done, NULL);
        pthread_cond_init(&srv->work, NULL);
        pthread_mutex_init(&srv->prog_lock, NULL);
        pthread_mutex_init(&srv->live_lock, NULL);
        /* The progress thread's waits are timed on the monotonic clock. */
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&srv->prog_wake, &ca);
        pthread_condattr_destroy(&ca);
        srv->queue_end = &srv->queue;
        srv->locks_ready = true;
        return 0;
}

/* Ends the progress thread (every call is over by now). */
static void stop_progress(mcp_server *srv)
{
        pthread_mutex_lock(&srv->prog_lock);
        srv->prog_stop = true;
        bool started = srv->prog_started;
        pthread_cond_signal(&srv->prog_wake);
        pthread_mutex_unlock(&srv->prog_lock);
        if (started)
                pthread_join(srv->prog_thread, NULL);
}

/* Frees everything server_init made, once no call is left. */
static void server_teardown(mcp_server *srv)
{
        if (srv->locks_ready) {
                stop_workers(srv);
                stop_progress(srv);
        }
        if (srv->input_watch >= 0)
                close(srv->input_watch);
        if (srv->audit_fd >= 0)
                close(srv->audit_fd);
        for (unsigned i = 0; i < srv->n_spare; i++)
                close(srv->spare_fds[i]);
        dynbuf_free(&srv->line);
        free(srv->chunk);
        /* Every session closed cleanly before the sandboxes they run in. */
        mcp_sessions_free(srv->sessions);
        airlock_cache_close(srv->cache);
        mcp_store_free(srv->store);
        /* Every call is over: the server's own reference is the last. */
        cfg_drop(srv, srv->cur);
        srv->cur = NULL;
        if (srv->locks_ready) {
                pthread_cond_destroy(&srv->work);
                pthread_cond_destroy(&srv->calls_done);
                pthread_cond_destroy(&srv->prog_wake);
                pthread_mutex_destroy(&srv->prog_lock);
                pthread_mutex_destroy(&srv->live_lock);
                pthread_mutex_destroy(&srv->lock);
                pthread_mutex_destroy(&srv->out_lock);
        }
}

int cmd_mcp(int argc, char **argv)
{
        cli_options o;
        airlock_error err = {0};
        int r = cli_parse_options(argc, argv, CLI_MCP, &o, &err);
        if (r == 1) {
                cli_usage(CLI_MCP, stdout);
                return EXIT_OK;
        }
        if (r < 0) {
                fprintf(stderr, "airlock mcp: %s\n", err.message);
                return EXIT_USAGE;
        }
        /* A client that goes away must not kill the server in the middle of
         * closing its sandboxes: writes then fail with EPIPE instead. */
        signal(SIGPIPE, SIG_IGN);
        install_stop_signals();
        mcp_server srv = {.input_watch = -1, .audit_fd = -1};
        if (o.audit && (srv.audit_fd = cli_audit_open(o.audit, &err)) < 0) {
                fprintf(stderr, "airlock mcp: %s\n", err.message);
                cli_options_free(&o);
                return EXIT_USAGE;
        }
        /* --tenants-dir: the one tenant's workspace is DIR/--tenant. */
        snprintf(srv.tenant, sizeof(srv.tenant), "%s", o.tenant);
        if (o.tenants_dir && mcp_workspaces_open(o.tenants_dir, o.ws_max_files, o.ws_max_bytes,
                                                 &srv.workspaces, &err) < 0) {
                fprintf(stderr, "airlock mcp: %s\n", err.message);
                cli_options_free(&o);
                return EXIT_USAGE;
        }
        r = server_init(&srv, o.cfg, &o.caps, &err);
        if (r < 0) {
                fprintf(stderr, "airlock mcp: %s\n", err.message);
                mcp_sessions_free(srv.sessions);
                airlock_cache_close(srv.cache);
                mcp_store_free(srv.store);
                version_free(srv.cur);
                mcp_workspaces_free(srv.workspaces);
                cli_options_free(&o);
                return EXIT_USAGE;
        }
        if (serve(&srv))
                cancel_all_and_wait(&srv);
        else
                finish_calls(&srv);
        server_teardown(&srv);
        mcp_workspaces_free(srv.workspaces);
        cli_options_free(&o);
        return EXIT_OK;
}

/* ---- the core, for other transports (mcp_core.h) ------------------------ */

int mcp_core_new(airlock_config *cfg, const mcp_session_caps *caps, const mcp_core_options *o,
                 mcp_server **ret, airlock_error *err)
{
        mcp_server *srv = calloc(1, sizeof(*srv));
        *ret = srv;
        if (!srv)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        srv->input_watch = -1;
        srv->audit_fd = -1;
        srv->transport = "http";
        srv->name = "airlock serve";
        srv->stateless = o && o->stateless;
        if (o && o->audit) {
                int fd = cli_audit_open(o->audit, err);
                if (fd < 0)
                        return fd;
                srv->audit_fd = fd;
        }
        /* No reader thread: nothing may run on one. */
        srv->input_done = true;
        srv->workspaces = o ? o->workspaces : NULL;
        snprintf(srv->tenant, sizeof(srv->tenant), "%s", o && o->tenant ? o->tenant : "default");
        int r = server_init(srv, cfg, caps, err);
        if (r >= 0 && o && o->instance)
                mcp_sessions_set_instance(srv->sessions, o->instance);
        if (r >= 0 && o && o->quotas)
                mcp_sessions_set_quotas(srv->sessions, o->quotas);
        return r;
}

int mcp_core_reload(mcp_server *srv, airlock_config *cfg, airlock_error *err)
{
        cfg_version *v;
        int r = version_new(srv, cfg, true, &v, err);
        if (r < 0)
                return r;
        /* Calls that start from now on take the new version; those in
         * flight keep theirs, and the last of them frees the old one. */
        pthread_mutex_lock(&srv->cfg_lock);
        cfg_version *old = srv->cur;
        srv->cur = v;
        pthread_mutex_unlock(&srv->cfg_lock);
        cfg_drop(srv, old);
        return 0;
}

int mcp_core_handle(mcp_server *srv, mcp_sink *sink, const mcp_message *m)
{
        if (m->method && m->id)
                return handle_request(srv, sink, m->method, m->id, m->params) ? 1 : 0;
        if (m->method)
                handle_notification(srv, sink, m->method, m->params);
        return 0;
}

void mcp_core_run_here(mcp_server *srv, mcp_sink *sink, int watch_fd, void (*on_watch)(void *),
                       void *watch_arg)
{
        (void)srv;
        mcp_call *c = sink->here;
        if (!c)
                return;
        sink->here = NULL;
        c->watch_fd = watch_fd;
        c->on_watch = on_watch;
        c->watch_arg = watch_arg;
        run_call(c, NULL);
}

void mcp_core_cancel_sink(mcp_server *srv, mcp_sink *sink)
{
        pthread_mutex_lock(&srv->lock);
        for (mcp_call *c = srv->calls; c; c = c->next)
                if (c->sink == sink)
                        cancel_locked(c);
        pthread_mutex_unlock(&srv->lock);
        /* As cancel_request: no progress notification for it after this. */
        pthread_mutex_lock(&srv->prog_lock);
        pthread_mutex_unlock(&srv->prog_lock);
}

void mcp_core_forget_owner(mcp_server *srv, const char *owner)
{
        pthread_mutex_lock(&srv->lock);
        for (mcp_call *c = srv->calls; c; c = c->next)
                if (c->id && same_owner(c, owner))
                        cancel_locked(c);
        pthread_mutex_unlock(&srv->lock);
        pthread_mutex_lock(&srv->prog_lock);
        pthread_mutex_unlock(&srv->prog_lock);
        mcp_sessions_close_owner(srv->sessions, owner,
                                 "closed: its tenant was removed from this server");
        mcp_store_forget(srv->store, owner);
}

void mcp_core_cancel_all(mcp_server *srv)
{
        cancel_all_and_wait(srv);
}

bool mcp_core_wait_calls(mcp_server *srv, double timeout_s)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t at = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
                      (uint64_t)(timeout_s * 1e9);
        ts.tv_sec = (time_t)(at / 1000000000ull);
        ts.tv_nsec = (long)(at % 1000000000ull);
        pthread_mutex_lock(&srv->lock);
        int r = 0;
        while (srv->n_calls > 0 && r != ETIMEDOUT)
                r = pthread_cond_timedwait(&srv->calls_done, &srv->lock, &ts);
        bool none = srv->n_calls == 0;
        pthread_mutex_unlock(&srv->lock);
        return none;
}

unsigned mcp_core_calls(mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        unsigned n = srv->n_calls;
        pthread_mutex_unlock(&srv->lock);
        return n;
}

unsigned mcp_core_sessions(mcp_server *srv)
{
        return mcp_sessions_count(srv->sessions);
}

void mcp_core_free(mcp_server *srv)
{
        if (!srv)
                return;
        server_teardown(srv);
        free(srv);
}
