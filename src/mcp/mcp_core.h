/* The MCP server without its transport: what `airlock mcp` (stdio, in
 * mcp_stdio.c) and `airlock serve` (Streamable HTTP, serve*.c) share. One parsed
 * JSON-RPC message is handed to mcp_core_handle with a sink; every message
 * the request produces (progress notifications, then its response) goes to
 * that sink, in order, from whichever thread produces it. */
#ifndef AIRLOCK_CLI_MCP_CORE_H
#define AIRLOCK_CLI_MCP_CORE_H

#include <jansson.h>
#include <stdbool.h>

#include "airlock.h"
#include "base.h"
#include "mcp.h"
#include "mcp_service.h"
#include "mcp_session.h"
#include "trace.h"

typedef struct mcp_server mcp_server;
typedef struct mcp_call mcp_call;

/* Where the messages of one request go. The transport owns it and keeps it
 * alive until the request is over: at once when mcp_core_handle returns 0,
 * else once call_done has been called. */
typedef struct mcp_sink mcp_sink;
struct mcp_sink {
        /* Takes msg (a notification, or the response, which is the last
         * message). Called under the server's progress lock or from a worker:
         * it must queue and return, never wait for the client. */
        void (*send)(mcp_sink *sink, json_t *msg);
        /* The tools/call started for this request is over, answered or not
         * (a cancelled request gets no response). The last touch of the sink
         * by the server. */
        void (*call_done)(mcp_sink *sink);
        /* Who sent it (the HTTP transport: the bearer token's line), or
         * NULL: notifications/cancelled stops only calls of the same owner. */
        const char *owner;
        /* Set by the transport: a tools/call started for this request is
         * not queued for a worker but left in here, for the transport to
         * run on its own thread with mcp_core_run_here (one wake-up of
         * another thread fewer each way). */
        bool run_here;
        mcp_call *here;
        /* The server's own request (the warm-up run): no audit line. */
        bool internal;
        /* The trace context the transport vouches for (a signed peer
         * request's headers, serve_peer.c), the parent of the request's
         * server span over its params._meta, or NULL. Read only while
         * mcp_core_handle runs. */
        const al_trace_ctx *trace_parent;
};

typedef struct mcp_core_options {
        /* No handshake state: every initialize is answered and no request
         * waits for one (HTTP, where each POST may reach another instance
         * and the connection is not the client's session). */
        bool stateless;
        /* Session handles name this instance (NULL: the stdio form). */
        const char *instance;
        /* Run ids, and so the URIs of runs' files, name it too (airlock
         * serve with peers, which forward a read of them to it). */
        bool name_runs;
        /* --audit FILE: one JSON line per call (audit.h), or NULL. */
        const char *audit;
        /* Per-owner quotas (quota.h) that sessions count against, or NULL;
         * the transport frees them after mcp_core_free. */
        struct quota_table *quotas;
        /* --tenants-dir: the tenants' workspaces (tenant_workspace.h), which the
         * transport frees after mcp_core_free, or NULL. A call's owner is
         * its tenant; a call without one is tenant's (NULL: "default"). */
        struct mcp_workspaces *workspaces;
        const char *tenant;
} mcp_core_options;

/* Builds the server (the sandbox cache, the tool description, sessions).
 * Returns 0 or -errno with err filled; *ret is set either way and needs
 * mcp_core_free. */
int mcp_core_new(airlock_config *cfg, const mcp_session_caps *caps, const mcp_core_options *o,
                 mcp_server **ret, airlock_error *err);
/* Makes cfg the configuration of every request that starts from now on
 * (airlock serve on SIGHUP): its tool description is built first (a sandbox
 * for cfg, through the cache), and tools/list, initialize and
 * server/discover answer with it. A call in flight finishes with the
 * configuration it started with; an open session keeps the sandbox it was
 * opened in. Takes cfg, freed on failure too. Returns 0, or -errno with err
 * filled and the old configuration still current. */
int mcp_core_reload(mcp_server *srv, airlock_config *cfg, airlock_error *err);
/* Handles one message (a request, a notification or a client's response).
 * Returns 1 when a tools/call was started for it (its response comes later,
 * then call_done), 0 when everything it produces has been sent already. */
int mcp_core_handle(mcp_server *srv, mcp_sink *sink, const jsonrpc_message *m);
/* Runs the call left in sink->here on the calling thread; the run calls
 * on_watch(watch_arg) at most once, when watch_fd becomes readable or
 * before a step that may take long (airlock_run_options), on this thread:
 * it must return promptly and not call into airlock. call_done follows
 * before this returns. */
void mcp_core_run_here(mcp_server *srv, mcp_sink *sink, int watch_fd, void (*on_watch)(void *),
                       void *watch_arg);
/* Cancels the call started for sink, if any (its client went away); the
 * call ends soon and call_done follows. */
void mcp_core_cancel_sink(mcp_server *srv, mcp_sink *sink);
/* A tenant removed (airlock serve on SIGHUP): cancels owner's calls in
 * progress, closes its sessions (its handles then say so, to owner only)
 * and drops its runs' files. Its workspace folder stays on disk. */
void mcp_core_forget_owner(mcp_server *srv, const char *owner);
/* Cancels every call and waits until none is left. */
void mcp_core_cancel_all(mcp_server *srv);
/* Waits until no call is left, at most timeout_s seconds; returns whether
 * none is left. */
bool mcp_core_wait_calls(mcp_server *srv, double timeout_s);
/* The wall-clock limit of one run under the current configuration
 * (--timeout, the config's limits), in seconds: the bound the core puts on
 * a call's run or cell, which a forwarding instance adds to its wait. */
double mcp_core_run_timeout(mcp_server *srv);
/* Calls in progress (the warm-up run included) and open sessions. */
unsigned mcp_core_calls(mcp_server *srv);
unsigned mcp_core_sessions(mcp_server *srv);
/* Stops the workers, closes every session and the sandbox cache, frees. */
void mcp_core_free(mcp_server *srv);
/* The metric mcp.server.operation.duration (a histogram by method, of every
 * server of the process) and the count of spans not exported, in Prometheus
 * text (mcp_trace.c). */
int mcp_trace_metrics(dynbuf *out);
/* The client span of a request forwarded to the peer instance that holds
 * its session (NULL when tracing is off): named as the request's server
 * span would be, with airlock.peer, under its params._meta context. */
al_span *mcp_trace_forward(const char *method, const json_t *id, const json_t *params,
                           const char *peer);
/* A response (msg) that is a JSON-RPC error, or a result with isError,
 * sets span's error status (the message says only which). */
void mcp_trace_status(al_span *span, const json_t *msg);

/* What a front-end handed the server's face (mcp_service.h), for the
 * transport that runs it: the options, and the configuration, which stays
 * the service's (a transport builds its server from it, never frees it). */
const mcp_service_options *mcp_service_opts(const mcp_service *svc);
airlock_config *mcp_service_config(const mcp_service *svc);

#endif
