/* airlock serve's answers: every response goes through http_queue_with, which
 * writes the request's access log line before the client can see the
 * answer; the JSON-RPC error bodies of refusals; the 401 with its
 * WWW-Authenticate challenge and the protected-resource metadata. */
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "serve_internal.h"

void http_json_log(http_request *rq)
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
        double ms = (double)(al_now_ns() - rq->t0) / 1e6;
        /* The names come from the client, cut to their buffers: kept valid
         * UTF-8 so that the line is always written. */
        _cleanup_free_ char *method = al_utf8_sanitize(rq->method, strlen(rq->method));
        _cleanup_free_ char *tool = al_utf8_sanitize(rq->tool, strlen(rq->tool));
        json_t *l =
            json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:f, s:b}", "ts", stamp, "instance",
                      rq->srv->opt.instance, "client", rq->client, "method", method ? method : "?",
                      "tool", tool ? tool : "?", "status", http_status_names[rq->status], "http",
                      (int)rq->http_status, "duration_ms", (double)(uint64_t)(ms * 1000) / 1000,
                      "session", rq->has_session);
        if (!rq->tool[0])
                json_object_del(l, "tool");
        if (l && rq->forwarded[0])
                json_object_set_new(l, "forwarded_for", json_string(rq->forwarded));
        if (l && rq->owner[0])
                json_object_set_new(l, "tenant", json_string(rq->owner));
        /* A call forwarded to the peer that holds its session, and one that
         * came from a peer: each instance's line says which. */
        if (l && rq->peer_to[0])
                json_object_set_new(l, "peer_to", json_string(rq->peer_to));
        if (l && rq->peer)
                json_object_set_new(l, "peer", json_true());
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
                http_observe_latency(rq->srv, (double)(al_now_ns() - rq->call_t0) / 1e9);
}

/* Queues the answer: body (copied) of type, the instance's header, one
 * more header (h1: v1, or none when h1 is NULL), and Connection: close
 * while the server drains. */
enum MHD_Result http_queue_with(struct MHD_Connection *c, http_request *rq, unsigned code,
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
        http_json_log(rq); /* counted before the client can see the answer */
        enum MHD_Result ret = MHD_queue_response(c, code, r);
        MHD_destroy_response(r);
        return ret;
}

enum MHD_Result http_queue(struct MHD_Connection *c, http_request *rq, unsigned code,
                           const char *type, const char *body, size_t len)
{
        return http_queue_with(c, rq, code, type, body, len, NULL, NULL);
}

enum MHD_Result http_queue_text(struct MHD_Connection *c, http_request *rq, unsigned code,
                                const char *text)
{
        return http_queue(c, rq, code, "text/plain; charset=utf-8", text, strlen(text));
}

/* An HTTP error with a JSON-RPC error body without id, as the transport
 * allows, plus one header h1: v1 (none when h1 is NULL). */
static enum MHD_Result queue_error(struct MHD_Connection *c, http_request *rq, const json_t *id,
                                   unsigned code, int rpc_code, const char *message, const char *h1,
                                   const char *v1)
{
        json_t *e = jsonrpc_error(id, rpc_code, NULL, "%s", message);
        _cleanup_free_ char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
        json_decref(e);
        if (!text)
                return MHD_NO;
        return http_queue_with(c, rq, code, "application/json", text, strlen(text), h1, v1);
}

enum MHD_Result http_queue_rpc_error(struct MHD_Connection *c, http_request *rq, unsigned code,
                                     int rpc_code, const char *message, const char *h1,
                                     const char *v1)
{
        return queue_error(c, rq, NULL, code, rpc_code, message, h1, v1);
}

enum MHD_Result http_queue_rpc_error_to(struct MHD_Connection *c, http_request *rq,
                                        const json_t *id, unsigned code, int rpc_code,
                                        const char *message)
{
        return queue_error(c, rq, id, code, rpc_code, message, NULL, NULL);
}

/* The public base URL of this server, for the metadata: --resource-url
 * without its path, else http:// and the Host header when it is a plain
 * host[:port], else the listening address. */
static void base_url(http_request *rq, struct MHD_Connection *c, char *out, size_t len)
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

enum MHD_Result http_queue_unauthorized(struct MHD_Connection *c, http_request *rq, bool missing)
{
        char base[300], hdr[512];
        base_url(rq, c, base, sizeof(base));
        snprintf(hdr, sizeof(hdr),
                 "Bearer resource_metadata=\"%s/.well-known/oauth-protected-resource/mcp\"%s", base,
                 missing ? "" : ", error=\"invalid_token\"");
        atomic_fetch_add(missing ? &rq->srv->m.auth_missing : &rq->srv->m.auth_invalid, 1);
        rq->status = ST_REFUSED;
        snprintf(rq->method, sizeof(rq->method), "?"); /* logged, unread */
        return http_queue_rpc_error(
            c, rq, MHD_HTTP_UNAUTHORIZED, RPC_INVALID_REQUEST,
            missing ? "authorization required: send Authorization: Bearer TOKEN" : "invalid token",
            "WWW-Authenticate", hdr);
}

/* RFC 9728 protected-resource metadata. */
enum MHD_Result http_queue_resource_metadata(struct MHD_Connection *c, http_request *rq)
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
        enum MHD_Result r = http_queue(c, rq, MHD_HTTP_OK, "application/json", text, strlen(text));
        free(text);
        return r;
}
