/* What the files of the MCP server core (mcp_*.c) share: the server's and
 * a call's state, and the functions one file calls in another. Nothing here
 * is for a transport: those use mcp_core.h. */
#ifndef AIRLOCK_MCP_INTERNAL_H
#define AIRLOCK_MCP_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "airlock.h"
#include "base.h"
#include "jsonrpc.h"
#include "mcp.h"
#include "mcp_core.h"
#include "mcp_session.h"
#include "tenant_workspace.h"
#include "tenants.h"
#include "trace.h"

/* The per-request _meta keys of revision 2026-07-28 (basic/index, "_meta"),
 * and its error for a revision the server does not speak. */
#define META_PROTOCOL_VERSION            "io.modelcontextprotocol/protocolVersion"
#define META_CLIENT_CAPS                 "io.modelcontextprotocol/clientCapabilities"
#define META_CLIENT_INFO                 "io.modelcontextprotocol/clientInfo"
#define META_SERVER_INFO                 "io.modelcontextprotocol/serverInfo"
#define META_SUBSCRIPTION_ID             "io.modelcontextprotocol/subscriptionId"
#define RPC_UNSUPPORTED_PROTOCOL_VERSION (-32022)

#define MCP_MAX_CALLS     64  /* tools/call in progress at once */
#define PROGRESS_LINE_MAX 200 /* bytes of the latest output line in "message" */
/* Bytes of a call's _meta.progressToken as JSON: every progress
 * notification carries it, four a second while the run prints, so a token
 * of --max-body's size made one request that many times its bytes of
 * answer a second (held in memory for a client that reads slowly). */
#define PROGRESS_TOKEN_MAX 256

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
         * is held for nothing else but the first build's state below (never
         * across a call into airlock). */
        pthread_mutex_t cfg_lock;
        cfg_version *cur;
        /* airlock mcp builds its first version on a thread of its own
         * (mcp_version_build_start) while it reads its input: ping and
         * server/discover, which the configuration alone answers, are
         * answered meanwhile; every other request waits for the build
         * (mcp_version_wait). Under cfg_lock but for the fields set before the
         * thread starts. cur stays NULL while building, and when the build
         * failed (build_err says why). */
        bool building;
        bool warm_when_built; /* a warm-up was asked for while building */
        pthread_cond_t built;
        bool build_joinable;
        pthread_t build_thread;
        airlock_config *build_cfg;
        int build_result;
        airlock_error build_err;
        atomic_bool build_failed;
        int build_failed_fd;      /* an eventfd written when the build failed, or -1 */
        char *first_instructions; /* the instructions of build_cfg, or NULL */
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
         * the run has to wait (see mcp_run_call). Only the thread with the
         * role touches the reader state below. The core knows the role
         * only as this hook, which the transport that reads registers
         * (mcp_stdio.c: its reader loop), or NULL when no transport reads
         * on the core's threads: a worker that takes the role calls it. */
        void (*reader)(mcp_server *srv);
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
        bool locks_ready; /* mcp_server_init got as far as its locks */
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
        bool off_reader;  /* started by another thread than the reader: for a worker */
        bool modern;      /* the request named revision 2026-07-28 or later in _meta */
        json_t *progress; /* its _meta.progressToken, or NULL */
        al_span *span;    /* its request's server span (mcp_trace.c), or NULL */
        uint64_t t0;      /* when its request came, for the duration metric */
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

/* A request as the dispatcher sees it: its id, params and era. */
typedef struct mcp_request {
        mcp_sink *sink; /* where its messages go; NULL: standard output */
        const json_t *id;
        const json_t *params;
        bool modern; /* params._meta named a revision without handshake */
        uint64_t t0; /* when it came (the duration metric) */
} mcp_request;

/* The reader running a call on its own thread: it keeps the role until
 * input arrives or the run has to wait, and hands it on only then. */
typedef struct reader_watch {
        mcp_server *srv;
        bool handed_off;
} reader_watch;

/* ---- mcp_reply.c: replies --------------------------------------------- */

/* The command that stderr lines name: "airlock mcp" or "airlock serve". */
const char *mcp_server_name(const mcp_server *srv);
/* Sends msg (taken; NULL sends nothing) to sink, or with sink NULL writes
 * it as one line of standard output. Thread-safe; after a failed write the
 * stdio server stops reading. */
void mcp_send_message(mcp_server *srv, mcp_sink *sink, json_t *msg);
/* The response to id with result (taken; NULL: an "out of memory" error). */
void mcp_send_result(mcp_server *srv, mcp_sink *sink, const json_t *id, json_t *result);
/* An error response (jsonrpc_error); id NULL answers with "id": null. */
void mcp_send_error(mcp_server *srv, mcp_sink *sink, const json_t *id, int code, const char *fmt,
                    ...) _printf_(5, 6);
/* The same with the error's "data" member (taken, may be NULL). */
void mcp_send_error_data(mcp_server *srv, mcp_sink *sink, const json_t *id, int code, json_t *data,
                         const char *fmt, ...) _printf_(6, 7);
/* result (taken and returned) in the form revision 2026-07-28 asks for. */
json_t *mcp_modern_result(json_t *result, bool cacheable);
/* Answers rq with result (taken), in the form of the request's era. */
void mcp_reply(mcp_server *srv, const mcp_request *rq, json_t *result, bool cacheable);

/* ---- mcp_versions.c: the configuration's versions --------------------- */

/* Makes the version of cfg (owns: the version frees cfg, on failure too).
 * Returns 0 with *ret holding one reference, or -errno with err filled. */
int mcp_version_new(mcp_server *srv, airlock_config *cfg, bool owns, cfg_version **ret,
                    airlock_error *err);
void mcp_version_free(cfg_version *v);
/* The current version, with a reference the caller drops with mcp_cfg_drop. */
cfg_version *mcp_cfg_take(mcp_server *srv);
void mcp_cfg_drop(mcp_server *srv, cfg_version *v);
/* The tenant whose workspace a call of owner uses. */
const char *tenant_of(const mcp_server *srv, const char *owner);
/* The configuration a call of owner runs with under v (with --tenants-dir
 * the tenant's copy), or NULL with err filled. */
const airlock_config *mcp_version_cfg(mcp_server *srv, cfg_version *v, const char *owner,
                                      airlock_error *err);
/* Makes the session table take its configurations from the versions. */
void mcp_version_source_sessions(mcp_server *srv);
/* Starts the build of the first version of cfg (not owned) on a thread of
 * its own. Returns 0 or -errno with err filled. */
int mcp_version_build_start(mcp_server *srv, airlock_config *cfg, airlock_error *err);
/* Waits until the first version is built; false when its build failed. */
bool mcp_version_wait(mcp_server *srv);
/* Waits for the end of the build thread, if one was started: 0, or the
 * build's error (-errno, with err filled). */
int mcp_version_build_join(mcp_server *srv, airlock_error *err);

/* ---- mcp_progress.c: progress notifications --------------------------- */

/* The run's output hook (airlock_run_options.on_output; arg: the call). */
void mcp_on_output(void *arg, int stream, const char *data, size_t len);
/* c's run starts / is over (see mcp_progress.c). */
bool mcp_progress_add(mcp_server *srv, mcp_call *c);
void mcp_progress_remove(mcp_server *srv, mcp_call *c);
/* Ends the progress thread (every call is over by now). */
void mcp_stop_progress(mcp_server *srv);

/* ---- mcp_calls.c: the tools/call workers ------------------------------- */

/* Queues c for a worker, or leaves it for the transport or the reader.
 * Returns < 0 (and frees c) when the call cannot be started; -EBUSY past
 * MCP_MAX_CALLS. */
int mcp_call_start(mcp_server *srv, mcp_call *c);
void mcp_call_free(mcp_call *c);
/* Runs a call; with w, on the reader's thread, watching for input. */
void mcp_run_call(mcp_call *c, reader_watch *w);
/* The run's watch of the input fired (arg: a reader_watch): the reader
 * hands its role on. */
void mcp_on_input(void *arg);
/* Does one piece of work, srv->lock held on entry and on return: a queued
 * call, or the reader role if it is free. False when there is neither. */
bool mcp_take_work_locked(mcp_server *srv);
/* Input ended (stopped: by a stop signal or the client's leaving, which
 * cancels the calls in progress). */
void mcp_finish_input(mcp_server *srv, bool stopped);
/* Ends the workers once no call is left. */
void mcp_stop_workers(mcp_server *srv);
/* Cancels c; caller holds srv->lock. */
void mcp_cancel_locked(mcp_call *c);
/* Whether c was made by owner (NULL: stdio, or a server without tokens). */
bool mcp_same_owner(const mcp_call *c, const char *owner);
/* notifications/cancelled of owner for request_id. */
void mcp_cancel_request(mcp_server *srv, const char *owner, const json_t *request_id);
void mcp_cancel_all_and_wait(mcp_server *srv);
/* Starts the warm-up run once a client shows up (once); while the first
 * version is being built, the build starts it when it is done. */
void mcp_warm_up(mcp_server *srv);
/* The warm-up asked for during the build, started by the build's thread. */
void mcp_warm_up_after_build(mcp_server *srv);

/* ---- mcp_trace.c: spans and the operation-duration metric -------------- */

/* The server span of a request (NULL when tracing is off), under over when
 * it is valid (a signed peer request's context) and else under its
 * params._meta context; tenant goes in only with --trace-tenants. */
al_span *mcp_trace_begin(const char *method, const json_t *id, const json_t *params,
                         const char *tenant, const al_trace_ctx *over);
/* An answer about to go out: an error, or a result with isError, sets the
 * error status of the thread's current span. */
void mcp_trace_answer(const json_t *msg);
/* Records the request's duration in the metric and ends its span. */
void mcp_trace_end(al_span *span, const char *method, uint64_t t0);

/* ---- mcp_dispatch.c: requests and notifications ------------------------ */

/* Handles a request; returns whether a tools/call was started for it (it
 * answers later). */
bool mcp_handle_request(mcp_server *srv, mcp_sink *sink, const char *method, const json_t *id,
                        const json_t *params);
void mcp_handle_notification(mcp_server *srv, mcp_sink *sink, const char *method,
                             const json_t *params);

/* ---- mcp_core.c: the server's making and unmaking ---------------------- */

/* Makes the server; its first version is built now, or with in_background
 * on a thread of its own (mcp_version_build_start). */
int mcp_server_init(mcp_server *srv, airlock_config *cfg, const mcp_session_caps *caps,
                    bool in_background, airlock_error *err);
/* Frees everything mcp_server_init made, once no call is left. */
void mcp_server_teardown(mcp_server *srv);

#endif
