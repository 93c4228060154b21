/* Forwarding a session's call, or a read of a run's file, to the instance
 * that holds it.
 *
 * A session lives in the memory of the instance that opened it, which its
 * handle names (sess_<instance>_...). A tools/call that names another
 * instance's handle (execute_code, session_fork, session_close: any tool
 * with a "session" argument) is sent, as its client sent it, to that
 * instance's --peer-listen; so is a resources/read whose URI's run id
 * names another instance (airlock://run/<instance>_<hex>/..., mcp.h), the
 * run's files being in that instance's memory too. Either goes signed with the cluster secret and
 * naming the tenant this instance authenticated (serve_peer.c). What the peer answers, its progress
 * notifications as they come and then its response, goes into the request's sink, each message
 * written again as compact JSON, so that the client gets the same JSON or SSE answer as from the
 * peer itself.
 *
 * The transfer runs on a thread of its own while the request's thread
 * writes the answer and watches the client's socket: a client that leaves
 * cancels the transfer (and so the peer's call, whose client this was). A
 * peer that does not answer, answers something that is not MCP, or passes
 * the caps (PEER_ANSWER_MAX bytes, --peer-timeout seconds, PEER_CONNECT_MS
 * to connect) fails this one call with a tool error that says which. A peer
 * that cannot be reached is taken as gone: its sessions were in its memory,
 * so the error says the session's state is lost.
 *
 * The forwarded call is a client span on this instance (mcp_trace_forward:
 * "tools/call {tool}", airlock.peer), under the client's params._meta
 * context; its context goes to the peer in traceparent, tracestate and
 * baggage headers, signed with the cluster secret in a header of their own
 * (serve_peer.c), so that the peer's server span is its child while the
 * body stays as the client wrote it.
 *
 * libcurl is opened on first use (src/common/curl_dl.h), so that no
 * process but a forwarding airlock serve loads it. */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "curl_dl.h"
#include "serve_internal.h"
#include "trace.h"

#define PEER_CONNECT_MS  3000L
#define PEER_ANSWER_MAX  (64u << 20)       /* bytes of one peer's answer */
#define PEER_HANDLES_MAX 32                /* idle easy handles kept, with their connections */
#define PEER_CANCEL_MS   5000L             /* a cancel's whole round of the peers */
#define WATCH_EVERY_NS   (20ull * 1000000) /* between looks at a client's socket */

/* Idle easy handles: a handle keeps its connections, so that the next
 * call to the same peer does not connect again. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static CURL *pool[PEER_HANDLES_MAX];
static unsigned pool_n;

static CURL *handle_get(void)
{
        CURL *h = NULL;
        pthread_mutex_lock(&pool_lock);
        if (pool_n)
                h = pool[--pool_n];
        pthread_mutex_unlock(&pool_lock);
        if (h)
                al_cu->easy_reset(h);
        return h ? h : al_cu->easy_init();
}

static void handle_put(CURL *h)
{
        pthread_mutex_lock(&pool_lock);
        if (pool_n < PEER_HANDLES_MAX) {
                pool[pool_n++] = h;
                h = NULL;
        }
        pthread_mutex_unlock(&pool_lock);
        if (h)
                al_cu->easy_cleanup(h);
}

typedef struct fwd_job {
        http_server *srv;
        http_sink *k;
        CURL *h;
        char url[PEER_URL_MAX];
        char instance[MCP_INSTANCE_MAX + 1];
        /* What is forwarded, for the errors: "session HANDLE", or
         * "resource URI" (a resources/read, whose errors are JSON-RPC
         * errors rather than tool errors). */
        char subject[360];
        bool read;
        char accept[64];
        char version[40]; /* the client's MCP-Protocol-Version, or "" */
        char tenant[TENANT_NAME_MAX + 1];
        char *body;
        size_t len;
        json_t *id;
        al_span *span; /* the client span of the forwarded call, or NULL */
        /* A transfer on the request's own thread watches its client's socket
         * (-1: the request's thread does, on a thread of its own). */
        int watch_fd;
        uint64_t watched; /* when it was last looked at (al_now_ns), or 0 */
        /* The answer: bytes not yet parsed, what kind it is, what came. */
        dynbuf in;
        size_t scanned; /* bytes of in known to hold no event's end */
        enum { ANSWER_UNKNOWN, ANSWER_JSON, ANSWER_SSE } kind;
        size_t total;
        double queue_s, run_s; /* the call's own bound: --queue-wait, --timeout */
        bool got_resp, bad;
        char bad_why[160];
} fwd_job;

static void job_free(fwd_job *j)
{
        if (!j)
                return;
        al_span_end(j->span);
        free(j->body);
        json_decref(j->id);
        dynbuf_free(&j->in);
        free(j);
}

static void bad(fwd_job *j, const char *why)
{
        if (!j->bad)
                snprintf(j->bad_why, sizeof(j->bad_why), "%s", why);
        j->bad = true;
}

/* One message of the peer's answer: a notification goes on, the response
 * must answer this request (its id) and ends the answer. Each goes on as
 * this server writes JSON (compact, on one line), never as the peer wrote
 * it: JSON allows line breaks between tokens, which in the client's SSE
 * stream would end the event's line, or the event, in mid-message. */
static void take_message(fwd_job *j, const char *text, size_t len)
{
        if (j->got_resp || j->bad)
                return;
        _cleanup_json_ json_t *m = json_loadb(text, len, 0, NULL);
        if (!json_is_object(m)) {
                bad(j, "a message that is not a JSON object");
                return;
        }
        bool has_id = json_object_get(m, "id") != NULL;
        bool has_method = json_object_get(m, "method") != NULL;
        if (has_id && !has_method && !json_equal(json_object_get(m, "id"), j->id)) {
                bad(j, "a response to another request");
                return;
        }
        if (has_id == has_method) {
                bad(j, "a message that is neither a response nor a notification");
                return;
        }
        char *copy = json_dumps(m, JSON_COMPACT | AL_JSON_REALS);
        if (!copy) {
                bad(j, "out of memory");
                return;
        }
        if (has_id) {
                j->got_resp = true;
                mcp_trace_status(j->span, m);
        }
        http_sink_push(j->k, copy, has_id, has_id ? http_message_status(m) : ST_OK);
}

/* The events of an SSE answer that are complete in j->in: the data of each
 * is one message. The search for an event's end starts where the last one
 * stopped, so that a long event that comes in many pieces is read once,
 * not once a piece (64 MiB in 16 KiB pieces took minutes of CPU). */
static void take_events(fwd_job *j)
{
        for (;;) {
                char *data = j->in.data;
                size_t from = j->scanned ? j->scanned - 1 : 0; /* a "\n" may end it */
                char *end = data ? memmem(data + from, j->in.len - from, "\n\n", 2) : NULL;
                if (!end) {
                        j->scanned = j->in.len;
                        return;
                }
                j->scanned = 0;
                dynbuf msg;
                dynbuf_init(&msg, PEER_ANSWER_MAX);
                for (char *line = data; line < end;) {
                        char *nl = memchr(line, '\n', (size_t)(end - line));
                        char *stop = nl ? nl : end;
                        if ((size_t)(stop - line) >= 5 && memcmp(line, "data:", 5) == 0) {
                                const char *v = line + 5 + (line[5] == ' ');
                                if (msg.len)
                                        (void)dynbuf_append(&msg, "\n", 1);
                                (void)dynbuf_append(&msg, v, (size_t)(stop - v));
                        }
                        line = stop + 1;
                }
                if (msg.len)
                        take_message(j, msg.data, msg.len);
                dynbuf_free(&msg);
                size_t used = (size_t)(end + 2 - data);
                memmove(data, data + used, j->in.len - used);
                j->in.len -= used;
        }
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *arg)
{
        fwd_job *j = arg;
        size_t n = size * nmemb;
        if (atomic_load(&j->k->cancel))
                return 0;
        if (j->kind == ANSWER_UNKNOWN) {
                char *type = NULL;
                (void)al_cu->easy_getinfo(j->h, CURLINFO_CONTENT_TYPE, &type);
                j->kind =
                    type && strncmp(type, "text/event-stream", 17) == 0 ? ANSWER_SSE : ANSWER_JSON;
        }
        j->total += n;
        if (j->total > PEER_ANSWER_MAX || dynbuf_append(&j->in, p, n) < 0) {
                bad(j, "an answer over 64 MiB (the cap on a peer's answer)");
                return 0;
        }
        if (j->kind == ANSWER_SSE)
                take_events(j);
        return n;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
        (void)a, (void)b, (void)c, (void)d;
        fwd_job *j = arg;
        /* libcurl calls this at every turn of its loop, several times a
         * call: the client's socket is looked at once in WATCH_EVERY_NS,
         * a system call a look, which a client that left waits for at most
         * that much longer (the callback comes at least once a second). */
        uint64_t now = j->watch_fd >= 0 ? al_now_ns() : 0;
        if (j->watch_fd >= 0 && (!j->watched || now - j->watched >= WATCH_EVERY_NS)) {
                j->watched = now;
                struct pollfd p = {.fd = j->watch_fd, .events = POLLRDHUP};
                if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
                        atomic_store(&j->k->cancel, true); /* the client left */
        }
        /* The server stops (its drain's grace is over): what it still
         * forwards ends now, its client told the call was cancelled. */
        if (atomic_load(&j->srv->forward_stop))
                atomic_store(&j->k->cancel, true);
        return atomic_load(&j->k->cancel) ? 1 : 0;
}

/* Answers the call with a tool error saying msg; a read, with the JSON-RPC
 * error code (RPC_RESOURCE_NOT_FOUND when the run's files are lost with
 * their host, else RPC_INTERNAL_ERROR). */
static void answer_error(fwd_job *j, const char *msg, int code)
{
        json_t *m = j->read ? json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", j->id,
                                        "error", "code", code, "message", msg)
                            : json_pack("{s:s, s:O, s:{s:[{s:s, s:s}], s:b}}", "jsonrpc", "2.0",
                                        "id", j->id, "result", "content", "type", "text", "text",
                                        msg, "isError", 1);
        char *text = m ? json_dumps(m, JSON_COMPACT) : NULL;
        int status = m ? http_message_status(m) : ST_TOOL_ERROR;
        json_decref(m);
        if (text)
                http_sink_push(j->k, text, true, status);
        /* The message names the session's handle: the span says only that
         * the peer gave no answer. */
        al_span_set_str(j->span, "error.type", "peer_failed");
        al_span_error(j->span, "the peer gave no MCP response");
}

/* What to tell the client when the peer gave no response: which of the
 * peer's failures this was, and what became of the session or run; returns
 * the JSON-RPC error code for a read (RPC_RESOURCE_NOT_FOUND: its host is
 * gone, and so are the run's files). */
static int explain(fwd_job *j, CURLcode rc, long code, double connect_s, char *msg, size_t n)
{
        const char *h = j->subject, *p = j->instance;
        const char *lost = j->read ? "the run's files were in that host's memory and are lost; "
                                     "run the code again for new ones"
                                   : "the session's state was in that host's memory and is lost. "
                                     "Open a new session with session_open";
        /* Not reached at all, or its connection broken before the answer
         * ended (the process or its host died mid-call): gone. */
        bool never = connect_s <= 0 && code == 0;
        bool broken = rc == CURLE_GOT_NOTHING || rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR ||
                      rc == CURLE_PARTIAL_FILE;
        if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
            (rc == CURLE_OPERATION_TIMEDOUT && never) || (broken && !j->bad)) {
                snprintf(msg, n, "%s: its host, instance %s, is gone (%s): %s", h, p,
                         al_cu->easy_strerror(rc), lost);
                return RPC_RESOURCE_NOT_FOUND;
        } else if (rc == CURLE_OPERATION_TIMEDOUT)
                snprintf(msg, n,
                         "%s: its host, instance %s, did not answer within %.0f s (the "
                         "call's own bound, --queue-wait %.0f s and --timeout %.0f s, and "
                         "--peer-timeout %.0f s for its answer); this call failed",
                         h, p, j->queue_s + j->run_s + j->srv->opt.peer_timeout_s, j->queue_s,
                         j->run_s, j->srv->opt.peer_timeout_s);
        else if (code == 503) {
                snprintf(msg, n, "%s: its host, instance %s, is shutting down: %s", h, p,
                         j->read ? "the run's files are lost with it"
                                 : "the session's state is lost with it. Open a new session "
                                   "with session_open");
                return RPC_RESOURCE_NOT_FOUND;
        } else if (code == 429)
                snprintf(msg, n,
                         "%s: its host, instance %s, refused the call: this tenant sent "
                         "it more than %d forwarded calls within %d s; this call failed, retry "
                         "later",
                         h, p, PEER_TENANT_MAX, PEER_SKEW_S);
        else if (code == 401)
                snprintf(msg, n,
                         "%s: its host, instance %s, refused this instance's peer request "
                         "(check that both have the same cluster secret, --secret NAME=...@peer, "
                         "and clocks within %d s); this call failed",
                         h, p, PEER_SKEW_S);
        else if (j->bad)
                snprintf(msg, n, "%s: its host, instance %s, answered %s; this call failed", h, p,
                         j->bad_why);
        else if (rc != CURLE_OK)
                snprintf(msg, n,
                         "%s: its host, instance %s, answered something that is not "
                         "HTTP (%s); this call failed",
                         h, p, al_cu->easy_strerror(rc));
        else
                snprintf(msg, n,
                         "%s: its host, instance %s, answered HTTP %ld without an MCP "
                         "response; this call failed",
                         h, p, code);
        return RPC_INTERNAL_ERROR;
}

/* The client span's context, as traceparent, tracestate and baggage
 * headers signed with the cluster secret (serve_peer.c): values of at most
 * AL_BAGGAGE_MAX printable bytes, which al_trace_parse checked. */
static struct curl_slist *trace_headers(fwd_job *j, const http_peer_headers *ph,
                                        struct curl_slist *l)
{
        al_trace_ctx ctx;
        char tp[AL_TRACEPARENT_LEN + 1], sig[65], line[AL_BAGGAGE_MAX + 64];
        if (!al_span_context(j->span, &ctx) || !http_peer_sign_trace(j->srv, ph, &ctx, tp, sig))
                return l;
        struct {
                const char *name, *value;
        } rows[] = {
            {"traceparent", tp},
            {"tracestate", ctx.tracestate},
            {"baggage", ctx.baggage},
            {"Airlock-Peer-Trace-Signature", sig},
        };
        for (size_t i = 0; l && i < ARRAY_SIZE(rows); i++) {
                if (!rows[i].value[0])
                        continue;
                snprintf(line, sizeof(line), "%s: %s", rows[i].name, rows[i].value);
                struct curl_slist *t = al_cu->slist_append(l, line);
                if (!t)
                        al_cu->slist_free_all(l);
                l = t;
        }
        return l;
}

static struct curl_slist *job_headers(fwd_job *j, const http_peer_headers *ph)
{
        char line[256];
        struct curl_slist *l = NULL, *t;
#define ADD(...)                                                                                   \
        do {                                                                                       \
                snprintf(line, sizeof(line), __VA_ARGS__);                                         \
                if (!(t = al_cu->slist_append(l, line))) {                                         \
                        al_cu->slist_free_all(l);                                                  \
                        return NULL;                                                               \
                }                                                                                  \
                l = t;                                                                             \
        } while (0)
        ADD("Content-Type: application/json");
        ADD("Accept: %s", j->accept);
        ADD("Expect:");
        ADD("Airlock-Peer-From: %s", j->srv->opt.instance);
        ADD("Airlock-Peer-To: %s", j->instance);
        ADD("Airlock-Peer-Tenant: %s", ph->tenant);
        ADD("Airlock-Peer-Time: %s", ph->ts);
        ADD("Airlock-Peer-Nonce: %s", ph->nonce);
        ADD("Airlock-Peer-Signature: %s", ph->sig);
        ADD("Airlock-Peer-Body-SHA256: %s", ph->body);
        if (j->version[0])
                ADD("MCP-Protocol-Version: %s", j->version);
#undef ADD
        return trace_headers(j, ph, l);
}

/* Sends the call and takes the answer; returns libcurl's code, the HTTP
 * status in *code and the connect time in *connect_s. */
static CURLcode transfer(fwd_job *j, long *code, double *connect_s)
{
        http_peer_headers ph;
        if (http_peer_sign(j->srv, j->instance, j->tenant, j->accept, j->body, j->len, &ph) < 0)
                return CURLE_FAILED_INIT;
        struct curl_slist *hdr = job_headers(j, &ph);
        if (!hdr || !(j->h = handle_get())) {
                al_cu->slist_free_all(hdr);
                return CURLE_OUT_OF_MEMORY;
        }
        CURL *h = j->h;
        al_cu->easy_setopt(h, CURLOPT_URL, j->url);
        al_cu->easy_setopt(h, CURLOPT_PROXY, ""); /* never a proxy of the environment */
        al_cu->easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        al_cu->easy_setopt(h, CURLOPT_POST, 1L);
        al_cu->easy_setopt(h, CURLOPT_POSTFIELDS, j->body ? j->body : "");
        al_cu->easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)j->len);
        al_cu->easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        al_cu->easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        al_cu->easy_setopt(h, CURLOPT_WRITEDATA, j);
        al_cu->easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        al_cu->easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        al_cu->easy_setopt(h, CURLOPT_XFERINFODATA, j);
        al_cu->easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, PEER_CONNECT_MS);
        /* The owner ends the call within its own bound (a run slot within
         * --queue-wait, the run or cell within --timeout, both configured
         * alike on every instance); --peer-timeout is the margin for its
         * answer to come back. A long cell within its bound is never cut
         * here, and a peer that hangs fails the call when the margin is
         * over too. */
        j->queue_s = j->srv->opt.queue_wait_s;
        j->run_s = mcp_core_run_timeout(j->srv->core);
        double wait_s = j->queue_s + j->run_s + j->srv->opt.peer_timeout_s;
        al_cu->easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(wait_s * 1000));
        al_cu->easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
        CURLcode rc = al_cu->easy_perform(h);
        *code = 0;
        *connect_s = 0;
        (void)al_cu->easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
        (void)al_cu->easy_getinfo(h, CURLINFO_CONNECT_TIME, connect_s);
        al_cu->slist_free_all(hdr);
        return rc;
}

static void *forward_main(void *arg)
{
        fwd_job *j = arg;
        long code = 0;
        double connect_s = 0;
        CURLcode rc = transfer(j, &code, &connect_s);
        if (code)
                al_span_set_int(j->span, "http.response.status_code", code);
        if (j->kind == ANSWER_JSON && code == 200 && rc == CURLE_OK && j->in.len)
                take_message(j, j->in.data, j->in.len);
        /* An SSE stream the peer ended whole without a response is its
         * call cancelled there (a notifications/cancelled it took): this
         * client's stream ends the same way. */
        bool ended =
            j->kind == ANSWER_SSE && code == 200 && rc == CURLE_OK && !j->bad && j->in.len == 0;
        if (!j->got_resp && !ended && !atomic_load(&j->k->cancel)) {
                char msg[900];
                int err = explain(j, rc, code, connect_s, msg, sizeof(msg));
                answer_error(j, msg, err);
        } else if (!j->got_resp) {
                al_span_set_str(j->span, "error.type", "cancelled");
                al_span_error(j->span, "the call was cancelled");
        }
        if (j->h) {
                /* A handle whose transfer failed may hold a broken
                 * connection: it is not kept. */
                if (rc == CURLE_OK)
                        handle_put(j->h);
                else
                        al_cu->easy_cleanup(j->h);
        }
        http_sink *k = j->k;
        job_free(j);
        http_sink_finish(k); /* k may be freed as soon as this returns */
        return NULL;
}

/* The session handle of a tools/call, or the URI of a resources/read (and
 * so *read), that m names; NULL for anything else. */
static const char *forward_subject(const jsonrpc_message *m, bool *read)
{
        *read = m->method && strcmp(m->method, "resources/read") == 0;
        if (*read && m->id)
                return json_string_value(json_object_get(m->params, "uri"));
        if (!m->method || strcmp(m->method, "tools/call") != 0)
                return NULL;
        return json_string_value(
            json_object_get(json_object_get(m->params, "arguments"), "session"));
}

bool http_forward_target(http_server *s, const http_request *rq, const jsonrpc_message *m,
                         char peer[MCP_INSTANCE_MAX + 1])
{
        if (rq->peer || !http_peers_on(s))
                return false;
        bool read;
        const char *h = forward_subject(m, &read);
        char url[PEER_URL_MAX];
        return h &&
               (read ? mcp_resource_uri_instance(h, peer) : mcp_session_handle_instance(h, peer)) &&
               strcmp(peer, s->opt.instance) != 0 && http_peer_url(s, peer, url, sizeof(url));
}

void http_forward(http_request *rq, struct MHD_Connection *c, const jsonrpc_message *m,
                  const char *peer, char *body, size_t len, bool stream)
{
        http_server *s = rq->srv;
        http_sink *k = rq->sink;
        k->forwarded = true;
        k->pending = true;
        fwd_job *j = calloc(1, sizeof(*j));
        if (!j) {
                free(body);
                http_sink_finish(k);
                return;
        }
        *j = (fwd_job){.srv = s,
                       .k = k,
                       .body = body,
                       .len = len,
                       .id = json_deep_copy(m->id),
                       .watch_fd = stream ? -1 : rq->sock};
        dynbuf_init(&j->in, PEER_ANSWER_MAX);
        snprintf(j->instance, sizeof(j->instance), "%s", peer);
        const char *subject = forward_subject(m, &j->read);
        snprintf(j->subject, sizeof(j->subject), "%s %.300s", j->read ? "resource" : "session",
                 subject ? subject : "?");
        snprintf(j->accept, sizeof(j->accept), "%s",
                 rq->sse ? "application/json, text/event-stream" : "application/json");
        snprintf(j->tenant, sizeof(j->tenant), "%s", rq->owner);
        const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
        snprintf(j->version, sizeof(j->version), "%s", v ? v : "");
        snprintf(rq->peer_to, sizeof(rq->peer_to), "%s", peer);
        j->span = mcp_trace_forward(m->method, m->id, m->params, peer);
        const char *why = !al_curl_load(NULL)
                              ? "this instance cannot forward to its peers: libcurl "
                                "(" AL_CURL_SONAME ") could not be loaded"
                          : !http_peer_url(s, peer, j->url, sizeof(j->url))
                              ? "its instance left this instance's peers (a reload of --peers)"
                              : NULL;
        if (why) {
                char msg[500];
                snprintf(msg, sizeof(msg), "%s: %s; this call failed", j->subject, why);
                answer_error(j, msg, RPC_INTERNAL_ERROR);
                job_free(j);
                http_sink_finish(k);
                return;
        }
        /* An answer without progress is one message: the transfer runs on
         * this thread (no thread to start, no hand-over), the client's
         * socket watched from libcurl's progress callback. */
        if (!stream) {
                (void)forward_main(j);
                return;
        }
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&a, 256u << 10);
        pthread_t t;
        int r = pthread_create(&t, &a, forward_main, j);
        pthread_attr_destroy(&a);
        if (r != 0) {
                answer_error(j,
                             "this instance could not start forwarding the call (out of "
                             "threads); retry",
                             RPC_INTERNAL_ERROR);
                job_free(j);
                http_sink_finish(k);
        }
}

bool http_cancel_fans_out(http_server *s, const http_request *rq, const jsonrpc_message *m)
{
        return !rq->peer && s->opt.peers_file && !m->id && m->method &&
               strcmp(m->method, "notifications/cancelled") == 0;
}

/* Contract: what goes round the peers for a client's cancel is a
 * notification this instance writes, naming the client's requestId and
 * nothing else, the id at most PEER_CANCEL_ID_MAX bytes as JSON. The
 * client's own text could be up to --max-body (4 MiB by default) with
 * whatever else it put in params (a "reason" of megabytes): sent to each
 * peer of the peers file, one request of the client's was that many times
 * its bytes on the cluster's network and in each peer's parse, and the
 * round cap (PEER_CANCEL_MAX) bounds requests, not bytes. A peer needs
 * the id alone (mcp_handle_notification). A longer id still stops this
 * instance's calls (the caller handles the notification itself). */
char *http_cancel_body(const http_request *rq, const jsonrpc_message *m, size_t *ret_len)
{
        *ret_len = 0;
        const json_t *id = json_object_get(m->params, "requestId");
        _cleanup_json_ json_t *note =
            json_pack("{s:s, s:s, s:{s:O?}}", "jsonrpc", "2.0", "method", "notifications/cancelled",
                      "params", "requestId", (json_t *)id);
        _cleanup_free_ char *id_text =
            id ? json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("null");
        if (!note || !id_text)
                return NULL;
        if (strlen(id_text) > PEER_CANCEL_ID_MAX) {
                fprintf(stderr,
                        "airlock serve: notifications/cancelled of tenant '%.64s' not sent to "
                        "the peers: its requestId is %zu bytes, more than %d "
                        "(PEER_CANCEL_ID_MAX); it stopped this instance's calls only\n",
                        rq->owner, strlen(id_text), PEER_CANCEL_ID_MAX);
                return NULL;
        }
        char *body = json_dumps(note, JSON_COMPACT);
        if (body)
                *ret_len = strlen(body);
        return body;
}

/* A peer's answer to a cancel: 202 without a body, or a refusal whose
 * reason is in the peer's log; read and dropped. */
static size_t discard(char *p, size_t size, size_t nmemb, void *arg)
{
        (void)p, (void)arg;
        return size * nmemb;
}

/* Sends the notification body to one peer at url, with at most ms
 * milliseconds left; returns why it did not take it, or NULL. */
static const char *cancel_one(http_server *s, const http_peer *to, const char *tenant,
                              const char *version, const char *body, size_t len, long ms, char *why,
                              size_t n)
{
        char url[PEER_URL_MAX];
        snprintf(url, sizeof(url), "http://%s" PEER_PATH, to->addr);
        http_peer_headers ph;
        if (http_peer_sign(s, to->name, tenant, "application/json", body, len, &ph) < 0)
                return "no cluster secret";
        const char *rows[][2] = {{"Content-Type", "application/json"},
                                 {"Accept", "application/json"},
                                 {"Expect", ""},
                                 {"Airlock-Peer-From", s->opt.instance},
                                 {"Airlock-Peer-To", to->name},
                                 {"Airlock-Peer-Tenant", ph.tenant},
                                 {"Airlock-Peer-Time", ph.ts},
                                 {"Airlock-Peer-Nonce", ph.nonce},
                                 {"Airlock-Peer-Signature", ph.sig},
                                 {"Airlock-Peer-Body-SHA256", ph.body},
                                 {"MCP-Protocol-Version", version}};
        struct curl_slist *hdr = NULL, *t = NULL;
        for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
                char line[128];
                if (i == ARRAY_SIZE(rows) - 1 && !*version)
                        break;
                snprintf(line, sizeof(line), "%s:%s%s", rows[i][0], *rows[i][1] ? " " : "",
                         rows[i][1]);
                if (!(t = al_cu->slist_append(hdr, line)))
                        break;
                hdr = t;
        }
        CURL *h = t ? handle_get() : NULL;
        if (!h) {
                al_cu->slist_free_all(hdr);
                return "out of memory";
        }
        al_cu->easy_setopt(h, CURLOPT_URL, url);
        al_cu->easy_setopt(h, CURLOPT_PROXY, "");
        al_cu->easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        al_cu->easy_setopt(h, CURLOPT_POST, 1L);
        al_cu->easy_setopt(h, CURLOPT_POSTFIELDS, body);
        al_cu->easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)len);
        al_cu->easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        al_cu->easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                           ms < PEER_CONNECT_MS ? ms : PEER_CONNECT_MS);
        al_cu->easy_setopt(h, CURLOPT_TIMEOUT_MS, ms);
        al_cu->easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
        al_cu->easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
        CURLcode rc = al_cu->easy_perform(h);
        long code = 0;
        (void)al_cu->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        al_cu->slist_free_all(hdr);
        if (rc == CURLE_OK)
                handle_put(h);
        else
                al_cu->easy_cleanup(h);
        if (rc != CURLE_OK)
                snprintf(why, n, "%s", al_cu->easy_strerror(rc));
        else if (code != 202)
                snprintf(why, n, "it answered HTTP %ld", code);
        return rc != CURLE_OK || code != 202 ? why : NULL;
}

/* Contract: the notification body (taken) goes to every peer of the peers
 * file but this instance, signed for the sender's tenant, one after the
 * other within PEER_CANCEL_MS in all; a peer that does not take it is one
 * line on stderr. The notification names only a request id, which its
 * client chose, and no session: no instance can tell which of them runs
 * the call (the owner of a session whose call another replica forwarded),
 * so each peer stops the calls of that tenant with that id, as this
 * instance does, and no more. Peers found only by DNS are not known
 * here: they get nothing. Past PEER_CANCEL_MAX rounds of the tenant in
 * PEER_SKEW_S seconds, a cancel stops this instance's calls only. */
void http_forward_cancel(http_request *rq, struct MHD_Connection *c, char *body, size_t len)
{
        http_server *s = rq->srv;
        if (!http_cancel_room(s, rq->owner)) {
                fprintf(stderr,
                        "airlock serve: notifications/cancelled of tenant '%.64s' not sent to the "
                        "peers: more than %d within %d s (PEER_CANCEL_MAX); it stopped this "
                        "instance's calls only\n",
                        rq->owner, PEER_CANCEL_MAX, PEER_SKEW_S);
                free(body);
                return;
        }
        const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
        char version[40];
        snprintf(version, sizeof(version), "%s", v && strlen(v) < sizeof(version) ? v : "");
        http_peer *peers = NULL;
        size_t n = al_curl_load(NULL) ? http_peer_list(s, &peers) : 0;
        uint64_t until = al_now_ns() + (uint64_t)PEER_CANCEL_MS * 1000000ull;
        for (size_t i = 0; i < n; i++) {
                if (strcmp(peers[i].name, s->opt.instance) == 0)
                        continue;
                char why[160];
                uint64_t now = al_now_ns();
                long ms = now < until ? (long)((until - now) / 1000000ull) : 0;
                const char *bad = ms > 0 ? cancel_one(s, &peers[i], rq->owner[0] ? rq->owner : "",
                                                      version, body, len, ms, why, sizeof(why))
                                         : "no time left of the cancel's 5 s";
                if (bad)
                        fprintf(stderr,
                                "airlock serve: notifications/cancelled not delivered to "
                                "instance %s: %s\n",
                                peers[i].name, bad);
        }
        free(peers);
        free(body);
}
