/* What the files of airlock serve (serve*.c) share: the server's state,
 * one HTTP request's, the sink of its messages, and the functions one file
 * calls in another. */
#ifndef AIRLOCK_SERVE_INTERNAL_H
#define AIRLOCK_SERVE_INTERNAL_H

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base.h"
#include "jsonrpc.h"
#include "mcp_core.h"
#include "quota.h"
#include "serve.h"
#include "tenant_workspace.h"
#include "tenants.h"

#define MAX_HEADER_MEM (64u << 10) /* headers of one request, libmicrohttpd's pool */
#define RETRY_AFTER_S  "1"

/* How a request ended, as its access log line and /metrics name it
 * (http_status_names), and why one was refused before it ran (refusal_names in
 * serve_metrics.c). */
enum call_status { ST_OK, ST_TOOL_ERROR, ST_RPC_ERROR, ST_CANCELLED, ST_REFUSED, ST_N };
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
        RF_PEER_AUTH, /* a peer request refused: unsigned, forged, replayed, expired */
        RF_N
};
#define N_BUCKETS 14 /* latency_buckets (serve_metrics.c) */

typedef struct http_metrics {
        atomic_ulong calls[ST_N];
        atomic_ulong refusals[RF_N];
        atomic_ulong auth_missing, auth_invalid;
        atomic_ulong http_requests;
        pthread_mutex_t hist_lock;
        unsigned long hist[N_BUCKETS + 1]; /* the last one is +Inf */
        double hist_sum;
        unsigned long hist_count;
} http_metrics;

typedef struct http_sink http_sink;

/* Peers (serve_peer.c). */
#define PEER_PATH    "/peer/mcp"
#define PEER_URL_MAX 320
#define PEERS_MAX    1024
#define PEER_KEY_MAX 8192  /* a secret's longest value */
#define PEER_KEY_MIN 16    /* a cluster secret's shortest */
#define PEER_SKEW_S  30    /* a peer request's time may be this far from ours */
#define PEER_NONCES  16384 /* nonces remembered; more in one window are refused */
/* One tenant's peer requests in one window of PEER_SKEW_S seconds: a
 * nonce lives at most three windows, so that a tenant holds at most 3/8 of
 * the nonces and cannot fill the cache for every other tenant. */
#define PEER_TENANT_MAX   (PEER_NONCES / 8)
#define PEER_TENANT_SLOTS 1024 /* tenants counted at once */
/* One tenant's notifications/cancelled that this instance sends round its
 * peers in one window of PEER_SKEW_S seconds: each is a peer request to
 * every peer, counted there in the tenant's PEER_TENANT_MAX, so that past
 * this a tenant's cancels would amplify its own requests by the number of
 * peers and use up its share everywhere. */
#define PEER_CANCEL_MAX (PEER_TENANT_MAX / 8)
/* The longest requestId (as JSON) of a cancel that goes round the peers:
 * the peers get the notification remade from it alone, never the client's
 * text (see http_cancel_body). */
#define PEER_CANCEL_ID_MAX 256

typedef struct http_peer {
        char name[MCP_INSTANCE_MAX + 1];
        char addr[INET6_ADDRSTRLEN + 8];
} http_peer;

typedef struct http_peer_table {
        http_peer *v;
        size_t n;
} http_peer_table;

typedef struct http_nonce {
        char nonce[32];
        long long until; /* forgotten after this time (seconds) */
} http_nonce;

/* A tenant's peer requests in one window (window = time / PEER_SKEW_S). */
typedef struct http_peer_rate {
        uint64_t tenant; /* the first bytes of the name's SHA-256 */
        long long window;
        unsigned count;
} http_peer_rate;

/* The signature headers of one forwarded request. */
typedef struct http_peer_headers {
        char tenant[TENANT_NAME_MAX + 1]; /* "-" for none */
        char ts[24];
        char nonce[33];
        char sig[65];
        char body[65]; /* SHA-256 of the body, hex: Airlock-Peer-Body-SHA256 */
} http_peer_headers;

typedef struct http_server {
        serve_options opt;
        mcp_server *core;
        struct MHD_Daemon *d;
        http_metrics m;
        atomic_bool core_ready;  /* core may be used (it is built) */
        atomic_bool core_failed; /* the core could not be built: the server stops */
        atomic_bool ready, draining;
        atomic_bool unavailable; /* a warm-up run failed (and is retried) */
        /* The front-end's source of a new configuration on SIGHUP
         * (mcp_service_run_http), and its signal pipe. */
        mcp_reload_fn reload;
        void *reload_arg;
        int sig_fd;
        /* Tokens and their tenants (tenants.h), swapped whole on SIGHUP
         * under the write lock. */
        pthread_rwlock_t tokens_lock;
        tenant_table tt;
        /* --metrics-token's token (NULL without), under tokens_lock too. */
        char *metrics_token;
        size_t metrics_token_len;
        /* Each tenant's sessions, runs and places in the queue (quota.h). */
        quota_table *quotas;
        unsigned max_sessions; /* --max-sessions, above every tenant's quota */
        /* --tenants-dir: the tenants' workspaces, or NULL. */
        mcp_workspaces *workspaces;
        /* Run slots and the bounded queue in front of them. */
        pthread_mutex_t slot_lock;
        pthread_cond_t slot_free;
        unsigned running, waiting;
        /* POSTs held until the core is built (http_hold_until_built), and the
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
        /* Peers (serve_peer.c): --peer-listen's daemon and port, the
         * peers file's table and the cluster secret (both under
         * tokens_lock, swapped on SIGHUP), the nonces of the window. */
        struct MHD_Daemon *peer_d;
        unsigned peer_port;
        http_peer_table peers;
        unsigned char peer_key[PEER_KEY_MAX];
        size_t peer_key_len;
        pthread_mutex_t nonce_lock;
        http_nonce *nonces;
        http_peer_rate *peer_rates;   /* under nonce_lock */
        http_peer_rate *cancel_rates; /* under nonce_lock: the cancel's round, per tenant */
        /* Set when the server stops listening: forwarded calls still
         * running end (serve_forward.c). */
        atomic_bool forward_stop;
} http_server;

typedef enum http_admit {
        ADMIT_OK,
        ADMIT_GONE, /* the caller's tenant was removed meanwhile */
        ADMIT_QUEUE_FULL,
        ADMIT_OWN_QUEUE_FULL, /* the caller's own runs and queue are full */
        ADMIT_TIMEOUT,
        ADMIT_DRAINING
} http_admit;

typedef struct http_msg {
        char *text; /* compact JSON */
        bool response;
        struct http_msg *next;
} http_msg;

struct http_sink {
        mcp_sink base;
        http_server *srv;
        pthread_mutex_t lock;
        int efd; /* readable when a message or the end came */
        http_msg *head, **tail;
        bool done;     /* nothing more will come */
        bool pending;  /* a call was started: done comes with call_done */
        bool got_resp; /* the response was queued */
        enum call_status status;
        /* The call is forwarded to a peer (serve_forward.c): it holds no run
         * slot here, and cancel stops its transfer. */
        bool forwarded;
        atomic_bool cancel;
};

typedef struct http_request {
        http_server *srv;
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
        bool peer;                          /* came on --peer-listen */
        char peer_body[65];                 /* the body's SHA-256 its signed headers named (peer) */
        char peer_to[MCP_INSTANCE_MAX + 1]; /* forwarded to this instance, or "" */
        /* The request's JSON-RPC id (a reference), for an answer this
         * transport makes itself ("request cancelled"), or NULL. */
        json_t *id;
        unsigned http_status;
        enum call_status status;
        bool logged;
        uint64_t call_t0; /* a tools/call: when it got its run slot */
} http_request;

/* ---- serve_metrics.c --------------------------------------------------- */

/* The names of enum call_status, as the access log and /metrics write them. */
extern const char *const http_status_names[ST_N];
/* Counts a tools/call's latency, admission to response, in the histogram. */
void http_observe_latency(http_server *s, double sec);
/* Counts a refusal of rq (before it ran) and marks its status refused. */
void http_refuse(http_request *rq, enum refusal why);
/* The Prometheus text of /metrics. */
void http_format_metrics(http_server *s, dynbuf *b);

/* ---- serve_tokens.c ----------------------------------------------------- */

/* Whether tok is one of the tokens file's (constant time); owner gets its
 * tenant's name. */
bool http_check_token(http_server *s, const char *tok, size_t len, char *owner, size_t size);
/* Whether owner (NULL without tokens) is still a tenant of the file. */
bool http_tenant_exists(http_server *s, const char *owner);
/* Hands the tenants' own limits of t to the quotas and the workspaces.
 * Returns 0 or -ENOMEM. */
int http_apply_overrides(http_server *s, const tenant_table *t);
/* SIGHUP: loads the tokens file again (see serve_tokens.c); what happened
 * goes into said, a clause of the reload's one line. */
void http_reload_tokens(http_server *s, char *said, size_t n_said);
/* Loads --metrics-token's file into s (at start, and again on SIGHUP).
 * Returns 0, or -errno with err naming the file (the old token stays). */
int http_load_metrics_token(http_server *s, airlock_error *err);
/* Who may read /metrics: 1 the operator (or anyone, without --tokens and
 * --metrics-token), 0 no token, -1 a bad one, -2 a tenant's token. */
int http_metrics_access(http_server *s, struct MHD_Connection *c);

/* ---- serve_slots.c ------------------------------------------------------ */

/* Takes a run slot for owner, waiting in the bounded queue; err says what
 * the owner holds when its own quota refuses. */
http_admit http_slot_take(http_server *s, const char *owner, airlock_error *err);
/* Gives back a slot http_slot_take took (internal: the warm-up's, no quota). */
void http_slot_give(http_server *s, const char *owner, bool internal);
/* Holds a request until the core is built: 0, -ETIMEDOUT or -ECANCELED. */
int http_hold_until_built(http_server *s);
/* The core is built (ok) or failed to be: wakes the requests held. */
void http_announce_built(http_server *s, bool ok);

/* ---- serve_sink.c ------------------------------------------------------- */

/* A sink for one request of owner (NULL without tokens), or NULL. */
http_sink *http_sink_new(http_server *s, const char *owner);
/* Frees k, cancelling and waiting for a call still running for it. */
void http_sink_free(http_sink *k);
/* Waits until the call started for k is over (after a cancel). */
void http_sink_wait_done(http_sink *k);
/* The next queued message of k, or NULL; caller holds k->lock. */
http_msg *http_sink_pop_locked(http_sink *k);
void http_msg_free(http_msg *e);

/* Queues text (taken) as the next message of k: the response when
 * response, with its status st. */
void http_sink_push(http_sink *k, char *text, bool response, enum call_status st);
/* What a response says: ok, a tool error or a JSON-RPC error. */
enum call_status http_message_status(const json_t *m);
/* A forwarded call is over: nothing more comes (k may be freed after). */
void http_sink_finish(http_sink *k);
/* Cancels the call of k (its client left) and waits until it is over. */
void http_sink_cancel(http_sink *k);

/* ---- serve_sse.c -------------------------------------------------------- */

/* Answers with the response of the request (the last message): JSON, or
 * SSE when notifications came first and the client accepts it. */
enum MHD_Result http_answer(struct MHD_Connection *c, http_request *rq);

/* ---- serve_answer.c ----------------------------------------------------- */

/* Writes rq's access log line (once) and counts its status. */
void http_json_log(http_request *rq);
/* Queues the answer: body (copied) of type, the instance's header, one
 * more header (h1: v1, or none when h1 is NULL), and Connection: close
 * while the server drains. */
enum MHD_Result http_queue_with(struct MHD_Connection *c, http_request *rq, unsigned code,
                                const char *type, const char *body, size_t len, const char *h1,
                                const char *v1);
enum MHD_Result http_queue(struct MHD_Connection *c, http_request *rq, unsigned code,
                           const char *type, const char *body, size_t len);
enum MHD_Result http_queue_text(struct MHD_Connection *c, http_request *rq, unsigned code,
                                const char *text);
/* An HTTP error with a JSON-RPC error body without id, plus one header
 * h1: v1 (none when h1 is NULL). */
enum MHD_Result http_queue_rpc_error(struct MHD_Connection *c, http_request *rq, unsigned code,
                                     int rpc_code, const char *message, const char *h1,
                                     const char *v1);
/* The same, without a header, naming the request id (NULL: none). */
enum MHD_Result http_queue_rpc_error_to(struct MHD_Connection *c, http_request *rq,
                                        const json_t *id, unsigned code, int rpc_code,
                                        const char *message);
/* 401 with the WWW-Authenticate challenge (missing: no token at all). */
enum MHD_Result http_queue_unauthorized(struct MHD_Connection *c, http_request *rq, bool missing);
/* RFC 9728 protected-resource metadata. */
enum MHD_Result http_queue_resource_metadata(struct MHD_Connection *c, http_request *rq);

/* ---- serve_checks.c ----------------------------------------------------- */

/* False when the request's framing is ambiguous (request smuggling). */
bool http_framing_ok(struct MHD_Connection *c);
/* No Origin, or one of --allow-origin. */
bool http_origin_ok(http_request *rq, struct MHD_Connection *c);
/* The token of a request's "Authorization: Bearer TOKEN", blanks around it
 * dropped, in place in the header: 1 with *ret_tok and *ret_len, 0 without
 * the header, -1 for another scheme. */
int http_bearer(struct MHD_Connection *c, const char **ret_tok, size_t *ret_len);
/* 1 allowed (rq->owner filled), 0 no token, -1 a bad one. */
int http_authorize(http_request *rq, struct MHD_Connection *c);
/* No MCP-Protocol-Version header, or one this server speaks. */
bool http_version_ok(struct MHD_Connection *c);
/* The body is parsed: its bytes leave the budget. */
void http_release_body(http_request *rq);
/* The parsed message is freed: its estimated size leaves the budget. */
void http_drop_message(http_request *rq, jsonrpc_message *m);
/* Charges what parsing the body will hold against --max-body-total.
 * Returns 0, or -1 with the request answered in *ret. */
int http_charge_parse(struct MHD_Connection *c, http_request *rq, enum MHD_Result *ret);

/* ---- serve_hangup.c ----------------------------------------------------- */

int http_hup_init(http_server *s);
void http_hup_fini(http_server *s);
/* Runs the call left for rq's thread, its socket watched meanwhile. */
void http_run_here(http_request *rq);

/* ---- serve_peer.c ------------------------------------------------------- */

/* Whether this instance has peers (--peer-listen, --peers or --peer-dns). */
bool http_peers_on(const http_server *s);
/* Loads the cluster secret of cfg and the peers file. 0 or -errno. */
int http_peers_setup(http_server *s, const airlock_config *cfg, airlock_error *err);
/* SIGHUP: the peers file again, and the cluster secret of cfg (the new
 * configuration, or NULL when it did not load); said gets the clause. */
void http_peers_reload(http_server *s, const airlock_config *cfg, char *said, size_t n_said);
void http_peers_free(http_server *s);
/* Whether tenant ("" for none) may send one more cancel round its peers
 * in this window (counted then): at most PEER_CANCEL_MAX. */
bool http_cancel_room(http_server *s, const char *tenant);
/* A copy of the peers file's peers in *ret (free it); their count. */
size_t http_peer_list(http_server *s, http_peer **ret);
/* The URL of instance's --peer-listen (the peers file, else DNS), or false. */
bool http_peer_url(http_server *s, const char *instance, char *url, size_t size);
/* Signs a request to the peer instance to, acting for tenant ("" for
 * none). 0 or -errno. */
int http_peer_sign(http_server *s, const char *to, const char *tenant, const char *accept,
                   const char *body, size_t len, http_peer_headers *h);
/* Signs the trace context ctx of a request signed into ph: its
 * traceparent into tp, the trace signature into sig (hex). False when ctx
 * is not valid or no secret is loaded: no trace header is sent then. */
bool http_peer_sign_trace(http_server *s, const http_peer_headers *ph, const al_trace_ctx *ctx,
                          char tp[AL_TRACEPARENT_LEN + 1], char sig[65]);
/* The trace context of a peer request whose signature held, when its trace
 * headers are signed too (serve_peer.c); false otherwise. */
bool http_peer_trace(const http_request *rq, struct MHD_Connection *c, al_trace_ctx *ret);
/* A peer request's headers: the checks before its body. */
enum MHD_Result http_peer_route(struct MHD_Connection *c, http_request *rq, const char *url,
                                const char *method);
/* A peer request's body is in: true when its signature holds (rq->owner
 * is its tenant), else false with the refusal queued in *ret and logged. */
bool http_peer_admit(struct MHD_Connection *c, http_request *rq, enum MHD_Result *ret);
/* Contract: true only when the body that came is the one whose SHA-256 the
 * request's signed headers named (http_peer_admit checked them before a
 * byte of it was read); otherwise *ret is the refusal. */
bool http_peer_body_ok(struct MHD_Connection *c, http_request *rq, enum MHD_Result *ret);
/* serve.c's parser of ADDR:PORT and [V6ADDR]:PORT. */
int http_parse_listen(const char *text, struct sockaddr_storage *ss, socklen_t *sl, bool *loopback,
                      airlock_error *err);

/* ---- serve_forward.c ---------------------------------------------------- */

/* Whether m is a call for another instance's session that a peer of this
 * one holds (peer gets its name). */
bool http_forward_target(http_server *s, const http_request *rq, const jsonrpc_message *m,
                         char peer[MCP_INSTANCE_MAX + 1]);
/* Forwards m, whose text is body (taken), to peer; its answer comes into
 * rq's sink, on a thread of its own when stream (the client takes SSE and
 * asked for progress), else before this returns. */
void http_forward(http_request *rq, struct MHD_Connection *c, const jsonrpc_message *m,
                  const char *peer, char *body, size_t len, bool stream);
/* Whether m is a client's notifications/cancelled that goes to the peers
 * too (an instance with a peers file). */
bool http_cancel_fans_out(http_server *s, const http_request *rq, const jsonrpc_message *m);
/* The text of a client's notifications/cancelled m as it goes round the
 * peers: its requestId alone (*ret_len bytes), or NULL when that is longer
 * than PEER_CANCEL_ID_MAX (a line on stderr says so). The caller frees it. */
char *http_cancel_body(const http_request *rq, const jsonrpc_message *m, size_t *ret_len);
/* Sends a client's notifications/cancelled, whose text is body (taken,
 * made by http_cancel_body), to every peer of the peers file, before this
 * returns (at most 5 s). */
void http_forward_cancel(http_request *rq, struct MHD_Connection *c, char *body, size_t len);

/* ---- serve_router.c ----------------------------------------------------- */

/* libmicrohttpd's request and completion callbacks (cls: the server): the
 * request callback of --listen, and that of --peer-listen. */
enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                const char *method, const char *version, const char *upload_data,
                                size_t *upload_data_size, void **con_cls);
enum MHD_Result http_on_peer_request(void *cls, struct MHD_Connection *c, const char *url,
                                     const char *method, const char *version,
                                     const char *upload_data, size_t *upload_data_size,
                                     void **con_cls);
void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                       enum MHD_RequestTerminationCode toe);
/* The last checks of a POST to /mcp or to the peer route, before its body
 * is read: a draining server refuses it (503, with Retry-After:
 * retry_after unless NULL), and so does a Content-Length over --max-body
 * (413); then rq->sse says whether the client accepts an SSE stream.
 * MHD_YES to go on reading. */
enum MHD_Result http_post_admit(struct MHD_Connection *c, http_request *rq,
                                const char *retry_after);

#endif
