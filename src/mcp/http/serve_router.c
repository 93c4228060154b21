/* airlock serve's router: each HTTP request is matched against a table of
 * (path, methods, handler), then /mcp's POST is read, checked and handed to
 * the MCP core. */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base.h"
#include "serve_internal.h"

/* Contract: hands m to the core; a peer's signed trace context is the
 * parent of the request's server span (serve_peer.c), read while
 * mcp_core_handle runs. A call started for a tenant that a reload of the
 * tokens file removed meanwhile is cancelled before it runs. The reload
 * swaps the table, then cancels the calls the core holds for the tenant
 * (http_reload_tokens); a call admitted before the swap but not yet in
 * the core when that happened would run to its end. So the tenant is
 * asked again once the call is in the core: either the answer is before
 * the swap, and the reload's cancel finds the call, or it is after, and
 * the call is cancelled here. */
static int core_handle(struct MHD_Connection *c, http_request *rq, const jsonrpc_message *m)
{
        al_trace_ctx trace;
        if (rq->peer && al_trace_on() && http_peer_trace(rq, c, &trace))
                rq->sink->base.trace_parent = &trace;
        int started = mcp_core_handle(rq->srv->core, &rq->sink->base, m);
        rq->sink->base.trace_parent = NULL;
        if (started == 1 && !http_tenant_exists(rq->srv, rq->sink->base.owner))
                mcp_core_cancel_sink(rq->srv->core, &rq->sink->base);
        return started;
}

/* A notification, or a client's response: handled, answered 202. raw
 * (taken) is its text when it is a cancel that goes to the peers too. */
static enum MHD_Result take_notification(struct MHD_Connection *c, http_request *rq,
                                         jsonrpc_message *m, char *raw, size_t raw_len)
{
        (void)mcp_core_handle(rq->srv->core, &rq->sink->base, m);
        /* A cancel names no session: its call may run on any peer. */
        if (raw)
                http_forward_cancel(rq, c, raw, raw_len);
        http_drop_message(rq, m);
        rq->method[0] = '\0'; /* not a call: no log line */
        return http_queue(c, rq, MHD_HTTP_ACCEPTED, NULL, "", 0);
}

static enum MHD_Result handle_mcp(struct MHD_Connection *c, http_request *rq)
{
        http_server *s = rq->srv;
        int held = http_hold_until_built(s);
        if (held < 0) {
                http_refuse(rq, RF_WARMING_UP);
                snprintf(rq->method, sizeof(rq->method), "?");
                if (held == -ECANCELED)
                        return http_queue_rpc_error(
                            c, rq, MHD_HTTP_SERVICE_UNAVAILABLE, RPC_INTERNAL_ERROR,
                            "the server could not start (its log says why)", "Connection", "close");
                return http_queue_rpc_error(c, rq, MHD_HTTP_SERVICE_UNAVAILABLE, RPC_INTERNAL_ERROR,
                                            "the server is starting; retry shortly", "Retry-After",
                                            RETRY_AFTER_S);
        }
        if (!http_version_ok(c)) {
                http_refuse(rq, RF_BAD_VERSION);
                snprintf(rq->method, sizeof(rq->method), "?");
                return http_queue_rpc_error(c, rq, MHD_HTTP_BAD_REQUEST, RPC_INVALID_REQUEST,
                                            "unsupported MCP-Protocol-Version header (this server "
                                            "speaks 2026-07-28 and 2024-11-05 to 2025-11-25)",
                                            NULL, NULL);
        }
        enum MHD_Result refused;
        if (http_charge_parse(c, rq, &refused) < 0)
                return refused;
        jsonrpc_message m;
        airlock_error err;
        int code = jsonrpc_parse(rq->body.data ? rq->body.data : "", rq->body.len, &m, &err);
        /* A call of another instance's session goes to that peer as its
         * client wrote it (serve_forward.c). */
        char peer[MCP_INSTANCE_MAX + 1];
        bool fwd = code == 0 && http_forward_target(s, rq, &m, peer);
        bool fan = code == 0 && http_cancel_fans_out(s, rq, &m);
        size_t raw_len = 0;
        /* A cancel goes round as this instance writes it, never as its
         * client did (http_cancel_body). */
        char *raw = fwd   ? dynbuf_take(&rq->body, &raw_len)
                    : fan ? http_cancel_body(rq, &m, &raw_len)
                          : NULL;
        http_release_body(rq);
        if (code != 0) {
                http_drop_message(rq, &m);
                http_refuse(rq, RF_BAD_REQUEST);
                snprintf(rq->method, sizeof(rq->method), "?");
                return http_queue_rpc_error(c, rq, MHD_HTTP_BAD_REQUEST, code, err.message, NULL,
                                            NULL);
        }
        const char *method = m.method ? m.method : "";
        if (m.id && m.method)
                rq->id = json_incref((json_t *)m.id);
        snprintf(rq->method, sizeof(rq->method), "%s", m.method ? m.method : "response");
        const json_t *args = json_object_get(m.params, "arguments");
        if (strcmp(method, "tools/call") == 0) {
                snprintf(rq->tool, sizeof(rq->tool), "%s",
                         json_string_value(json_object_get(m.params, "name"))
                             ? json_string_value(json_object_get(m.params, "name"))
                             : "?");
                rq->has_session = json_object_get(args, "session") != NULL;
        }
        rq->sink = http_sink_new(s, rq->owner[0] ? rq->owner : NULL);
        if (!rq->sink) {
                free(raw);
                http_drop_message(rq, &m);
                return MHD_NO;
        }
        if (fwd) {
                /* No run slot here: the peer takes one of its own. */
                const json_t *tok =
                    json_object_get(json_object_get(m.params, "_meta"), "progressToken");
                http_forward(rq, c, &m, peer, raw, raw_len,
                             rq->sse && (json_is_string(tok) || json_is_integer(tok)));
                http_drop_message(rq, &m);
                return http_answer(c, rq);
        }
        if (!m.id || !m.method) /* a notification, or the client's response */
                return take_notification(c, rq, &m, raw, raw_len);
        bool is_call = strcmp(method, "tools/call") == 0;
        if (is_call) {
                airlock_error own;
                http_admit a = http_slot_take(s, rq->sink->base.owner, &own);
                if (a == ADMIT_GONE) {
                        http_drop_message(rq, &m);
                        return http_queue_unauthorized(c, rq, false);
                }
                if (a != ADMIT_OK) {
                        http_drop_message(rq, &m);
                        bool full = a == ADMIT_QUEUE_FULL || a == ADMIT_OWN_QUEUE_FULL;
                        http_refuse(rq, full                 ? RF_QUEUE_FULL
                                        : a == ADMIT_TIMEOUT ? RF_QUEUE_TIMEOUT
                                                             : RF_DRAINING);
                        return http_queue_rpc_error(
                            c, rq, full ? MHD_HTTP_TOO_MANY_REQUESTS : MHD_HTTP_SERVICE_UNAVAILABLE,
                            RPC_INTERNAL_ERROR,
                            a == ADMIT_OWN_QUEUE_FULL ? own.message
                            : a == ADMIT_QUEUE_FULL ? "too many calls: every run slot is busy and "
                                                      "the queue is full; retry later"
                            : a == ADMIT_TIMEOUT    ? "no run slot came free in time; retry later"
                                                    : "the server is shutting down",
                            "Retry-After", RETRY_AFTER_S);
                }
        }
        uint64_t t0 = al_now_ns();
        /* A call runs on this thread unless it streams progress over SSE,
         * which this thread writes while a worker runs the code. */
        const json_t *token = json_object_get(json_object_get(m.params, "_meta"), "progressToken");
        rq->sink->base.run_here = !(rq->sse && (json_is_string(token) || json_is_integer(token)));
        int started = core_handle(c, rq, &m);
        http_drop_message(rq, &m);
        if (started)
                rq->sink->pending = true;
        else if (is_call)
                http_slot_give(s, rq->sink->base.owner, false);
        if (started && rq->sink->base.here)
                http_run_here(rq);
        rq->call_t0 = is_call ? t0 : 0;
        return http_answer(c, rq);
}

/* ---- the routes ---------------------------------------------------------- */

static enum MHD_Result route_healthz(struct MHD_Connection *c, http_request *rq, const char *method)
{
        return http_queue_text(c, rq, MHD_HTTP_OK, "ok\n");
}

static enum MHD_Result route_readyz(struct MHD_Connection *c, http_request *rq, const char *method)
{
        http_server *s = rq->srv;
        bool ready = atomic_load(&s->ready) && !atomic_load(&s->draining);
        return http_queue_text(c, rq, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
                               atomic_load(&s->draining)      ? "draining\n"
                               : ready                        ? "ready\n"
                               : atomic_load(&s->unavailable) ? "sandbox unavailable\n"
                                                              : "warming up\n");
}

static enum MHD_Result route_metadata(struct MHD_Connection *c, http_request *rq,
                                      const char *method)
{
        return http_queue_resource_metadata(c, rq);
}

static enum MHD_Result route_metrics(struct MHD_Connection *c, http_request *rq, const char *method)
{
        /* Metrics name no secret, but they tell the load of every tenant:
         * they are the operator's, behind --metrics-token's token, and
         * never read with a tenant's token. */
        int a = http_metrics_access(rq->srv, c);
        if (a == -2) {
                rq->status = ST_REFUSED;
                return http_queue_rpc_error(c, rq, MHD_HTTP_FORBIDDEN, RPC_INVALID_REQUEST,
                                            "/metrics is the operator's: it takes the token of "
                                            "--metrics-token, not a tenant's",
                                            NULL, NULL);
        }
        if (a <= 0)
                return http_queue_unauthorized(c, rq, a == 0);
        dynbuf b;
        dynbuf_init(&b, 1u << 20);
        http_format_metrics(rq->srv, &b);
        enum MHD_Result r = http_queue(c, rq, MHD_HTTP_OK, "text/plain; version=0.0.4",
                                       b.data ? b.data : "", b.len);
        dynbuf_free(&b);
        return r;
}

/* /mcp, at its headers: the checks that need no body, then MHD_YES to read
 * the body (handle_mcp runs once it is in). */
static enum MHD_Result route_mcp(struct MHD_Connection *c, http_request *rq, const char *method)
{
        http_server *s = rq->srv;
        if (!http_origin_ok(rq, c)) {
                http_refuse(rq, RF_BAD_ORIGIN);
                snprintf(rq->method, sizeof(rq->method), "?");
                return http_queue_rpc_error(c, rq, MHD_HTTP_FORBIDDEN, RPC_INVALID_REQUEST,
                                            "Origin not allowed", NULL, NULL);
        }
        int a = http_authorize(rq, c);
        if (a <= 0)
                return http_queue_unauthorized(c, rq, a == 0);
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
        return http_post_admit(c, rq, RETRY_AFTER_S);
}

enum MHD_Result http_post_admit(struct MHD_Connection *c, http_request *rq, const char *retry_after)
{
        http_server *s = rq->srv;
        if (atomic_load(&s->draining)) {
                http_refuse(rq, RF_DRAINING);
                snprintf(rq->method, sizeof(rq->method), "?");
                return http_queue_rpc_error(c, rq, MHD_HTTP_SERVICE_UNAVAILABLE, RPC_INTERNAL_ERROR,
                                            "the server is shutting down",
                                            retry_after ? "Retry-After" : NULL, retry_after);
        }
        const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (len && strtoull(len, NULL, 10) > s->opt.max_body) {
                http_refuse(rq, RF_BODY_TOO_LARGE);
                snprintf(rq->method, sizeof(rq->method), "?");
                return http_queue_rpc_error(c, rq, MHD_HTTP_CONTENT_TOO_LARGE, RPC_INVALID_REQUEST,
                                            "request body too large", NULL, NULL);
        }
        const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
        rq->sse = accept && strstr(accept, "text/event-stream");
        return MHD_YES;
}

/* The routes: an HTTP request's path names its handler. Every path but
 * /mcp answers GET and HEAD only (405 otherwise, as for a path that is not
 * here); /mcp checks its own method, after authorization. */
typedef struct route {
        const char *path;
        bool get_only;
        enum MHD_Result (*handler)(struct MHD_Connection *c, http_request *rq, const char *method);
} route;

static const route routes[] = {
    {"/mcp", false, route_mcp},
    {"/healthz", true, route_healthz},
    {"/readyz", true, route_readyz},
    {"/.well-known/oauth-protected-resource", true, route_metadata},
    {"/.well-known/oauth-protected-resource/mcp", true, route_metadata},
    {"/metrics", true, route_metrics},
};

static const route *route_find(const char *url)
{
        for (size_t i = 0; i < ARRAY_SIZE(routes); i++)
                if (strcmp(url, routes[i].path) == 0)
                        return &routes[i];
        return NULL;
}

/* The state of a request whose headers just came: who the client is (its
 * address, and the one a proxy in front names), its socket, its body's
 * buffer. NULL when out of memory. */
static http_request *request_new(http_server *s, struct MHD_Connection *c)
{
        http_request *rq = calloc(1, sizeof(*rq));
        if (!rq)
                return NULL;
        rq->srv = s;
        rq->t0 = al_now_ns();
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
        const char *xff = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Forwarded-For");
        for (size_t i = 0; xff && xff[i] && i + 1 < sizeof(rq->forwarded); i++)
                rq->forwarded[i] = xff[i] >= 0x20 && xff[i] < 0x7f ? xff[i] : '?';
        return rq;
}

static enum MHD_Result on_request(http_server *s, bool peer, struct MHD_Connection *c,
                                  const char *url, const char *method, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
        http_request *rq = *con_cls;
        if (!rq) {
                rq = request_new(s, c);
                if (!rq)
                        return MHD_NO;
                rq->peer = peer;
                *con_cls = rq;
                atomic_fetch_add(&s->requests, 1);
                atomic_fetch_add(&s->m.http_requests, 1);
                if (!http_framing_ok(c)) {
                        http_refuse(rq, RF_BAD_REQUEST);
                        snprintf(rq->method, sizeof(rq->method), "?");
                        return http_queue_rpc_error(c, rq, MHD_HTTP_BAD_REQUEST,
                                                    RPC_INVALID_REQUEST,
                                                    "ambiguous message framing (Content-Length, "
                                                    "Transfer-Encoding or a folded header line)",
                                                    "Connection", "close");
                }
                if (peer)
                        return http_peer_route(c, rq, url, method);
                const route *r = route_find(url);
                if (!r || r->get_only) {
                        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
                                return http_queue_text(c, rq, MHD_HTTP_METHOD_NOT_ALLOWED,
                                                       "method not allowed\n");
                        if (!r)
                                return http_queue_text(c, rq, MHD_HTTP_NOT_FOUND, "not found\n");
                }
                return r->handler(c, rq, method);
        }
        if (*upload_data_size) {
                size_t n = *upload_data_size;
                *upload_data_size = 0;
                /* A body that trickles in holds its connection's thread: it
                 * has twice the idle timeout to arrive in full. */
                if (al_now_ns() - rq->t0 > 2ull * s->opt.http_timeout_s * 1000000000ull) {
                        http_refuse(rq, RF_SLOW_BODY);
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
                http_release_body(rq);
        if (rq->over_budget && !rq->too_large) {
                http_refuse(rq, RF_BODY_MEMORY);
                snprintf(rq->method, sizeof(rq->method), "?");
                return http_queue_rpc_error(c, rq, MHD_HTTP_SERVICE_UNAVAILABLE, RPC_INTERNAL_ERROR,
                                            "too many request bodies held at once; retry later",
                                            "Retry-After", RETRY_AFTER_S);
        }
        if (rq->too_large) {
                http_refuse(rq, RF_BODY_TOO_LARGE);
                snprintf(rq->method, sizeof(rq->method), "?");
                return http_queue_rpc_error(c, rq, MHD_HTTP_CONTENT_TOO_LARGE, RPC_INVALID_REQUEST,
                                            "request body too large", NULL, NULL);
        }
        enum MHD_Result refused;
        if (rq->peer && !http_peer_body_ok(c, rq, &refused))
                return refused;
        return handle_mcp(c, rq);
}

enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                const char *method, const char *version, const char *upload_data,
                                size_t *upload_data_size, void **con_cls)
{
        (void)version;
        return on_request(cls, false, c, url, method, upload_data, upload_data_size, con_cls);
}

enum MHD_Result http_on_peer_request(void *cls, struct MHD_Connection *c, const char *url,
                                     const char *method, const char *version,
                                     const char *upload_data, size_t *upload_data_size,
                                     void **con_cls)
{
        (void)version;
        return on_request(cls, true, c, url, method, upload_data, upload_data_size, con_cls);
}

void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                       enum MHD_RequestTerminationCode toe)
{
        (void)c;
        http_server *s = cls;
        http_request *rq = *con_cls;
        if (!rq)
                return;
        *con_cls = NULL;
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && rq->streaming && rq->status == ST_OK &&
            !(rq->sink && rq->sink->got_resp))
                rq->status = ST_CANCELLED;
        http_sink_free(rq->sink); /* cancels a call still running: its client is gone */
        http_json_log(rq);
        http_release_body(rq);
        atomic_fetch_sub(&s->body_bytes, rq->parsed);
        free(rq->out);
        json_decref(rq->id);
        free(rq);
        atomic_fetch_sub(&s->requests, 1);
}
