/* The Streamable HTTP transport of the MCP client (mcp_client.c): each
 * message is a POST through the gateway, with an allow-list of the
 * server's URL alone (so that the gateway's address rules hold for it as
 * for the guest's own requests), its headers with the secrets put in, and
 * the session the server gives (Mcp-Session-Id), which a DELETE ends. A
 * response is one JSON value or a stream of server-sent events. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/wire.h"
#include "host/allowlist.h"
#include "host/gateway.h"
#include "jsonrpc.h"
#include "mcp/mcp_client.h"

/* POSTs msg (or DELETEs the session when msg is NULL) and returns the
 * response {"status", "headers", "body_base64"} of the gateway. */
static int http_exchange_as(mcp_upstream *u, const char *session, const char *proto, json_t *msg,
                            uint64_t deadline, const mcp_bounds *b, size_t max_body, json_t **ret,
                            airlock_error *err)
{
        _cleanup_free_ char *text = msg ? json_dumps(msg, JSON_COMPACT) : strdup("");
        _cleanup_free_ char *body =
            text ? al_base64_encode((const unsigned char *)text, strlen(text), NULL) : NULL;
        json_t *h = json_deep_copy(u->headers);
        if (!body || !h) {
                json_decref(h);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        json_object_set_new(h, "Content-Type", json_string("application/json"));
        json_object_set_new(h, "Accept", json_string("application/json, text/event-stream"));
        if (session)
                json_object_set_new(h, "Mcp-Session-Id", json_string(session));
        if (proto && proto[0])
                json_object_set_new(h, "MCP-Protocol-Version", json_string(proto));
        _cleanup_json_ json_t *req =
            json_pack("{s:s, s:s, s:o, s:s}", WIRE_KEY_METHOD, msg ? "POST" : "DELETE",
                      WIRE_KEY_URL, u->url, WIRE_KEY_HEADERS, h, WIRE_KEY_BODY_BASE64, body);
        if (!req)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        /* The gateway reads only its three HTTP limits, all set here. */
        uint64_t now = al_now_ns();
        airlock_limits lim = {
            .size = sizeof(lim),
            .http_max_response = max_body,
            .http_max_request = (16u << 20) + 4096,
            .http_timeout_s = deadline > now ? (double)(deadline - now) / 1e9 + 1 : 1,
        };
        airlock_error e;
        airlock_error_clear(&e);
        int r = gateway_request_ex(u->allow, &lim, req, deadline, b ? b->cancel_fd : -1, ret, &e);
        if (r == -ETIMEDOUT || r == -ECANCELED)
                return al_error(err, r, NULL, "%s",
                                r == -ETIMEDOUT ? "timed out" : "the run was cancelled");
        if (r < 0)
                return al_error(err, r == -E2BIG ? -E2BIG : -EPIPE, NULL, "server '%s': %s",
                                u->name, e.message);
        return 0;
}

/* http_exchange_as with u's own session: only while nobody else uses it
 * (the session's start, the DELETE at the end). */
static int http_exchange(mcp_upstream *u, json_t *msg, uint64_t deadline, const mcp_bounds *b,
                         size_t max_body, json_t **ret, airlock_error *err)
{
        return http_exchange_as(u, u->session, u->initialized || msg ? u->proto : NULL, msg,
                                deadline, b, max_body, ret, err);
}

/* Finds the reply to id among the messages of a response body: one JSON
 * value (a message or a batch) or a stream of server-sent events, each
 * event's data lines one message. */
static int http_find_reply(mcp_upstream *u, const char *ctype, const unsigned char *body,
                           size_t len, json_int_t id, json_t **ret, airlock_error *err)
{
        bool sse = ctype && strncmp(ctype, "text/event-stream", 17) == 0;
        dynbuf data;
        dynbuf_init(&data, len + 1);
        size_t at = 0;
        int r = 0;
        while (at <= len && r >= 0) {
                const unsigned char *nl = at < len ? memchr(body + at, '\n', len - at) : NULL;
                size_t end = nl ? (size_t)(nl - body) : len;
                size_t n = end - at;
                const char *line = (const char *)body + at;
                if (n && line[n - 1] == '\r')
                        n--;
                bool dispatch = !sse ? end == len : n == 0;
                if (sse && n >= 5 && strncmp(line, "data:", 5) == 0) {
                        size_t off = n > 5 && line[5] == ' ' ? 6 : 5;
                        if (data.len)
                                r = dynbuf_append(&data, "\n", 1);
                        if (r >= 0)
                                r = dynbuf_append(&data, line + off, n - off);
                } else if (!sse) {
                        r = dynbuf_append(&data, line, end - at);
                        if (r >= 0 && nl)
                                r = dynbuf_append(&data, "\n", 1);
                }
                if ((dispatch || end == len) && data.len && r >= 0) {
                        json_error_t jerr;
                        json_t *v = json_loadb(data.data, data.len, 0, &jerr);
                        data.len = 0;
                        if (!v) {
                                r = al_error(err, -EPROTO, NULL,
                                             "server '%s' sent a message that is not JSON: %s",
                                             u->name, jerr.text);
                                break;
                        }
                        json_t *list = json_is_array(v) ? v : NULL;
                        size_t i, m = list ? json_array_size(list) : 1;
                        for (i = 0; i < m && !*ret; i++) {
                                json_t *x = list ? json_array_get(list, i) : v;
                                upstream_notified(u, x);
                                if (jsonrpc_is_response_to(x, id))
                                        *ret = json_incref(x);
                        }
                        json_decref(v);
                        if (*ret)
                                break;
                }
                if (!nl)
                        break;
                at = end + 1;
        }
        dynbuf_free(&data);
        if (r < 0)
                return r;
        if (!*ret)
                return al_error(err, -EPROTO, NULL,
                                "server '%s' answered without the reply to the request", u->name);
        return 0;
}

/* One message over HTTP with the session and protocol given: a
 * notification (id 0: 202 Accepted expected) or a request and its reply.
 * It changes nothing of u: *ret_status is the HTTP status and *ret_sid
 * (malloc'd, or NULL) the session id the server gave, for the caller to
 * take under the lock (http_apply). Calls of several threads at once. */
static int http_post(mcp_upstream *u, const char *session, const char *proto, json_t *msg,
                     json_int_t id, uint64_t deadline, const mcp_bounds *b, size_t max_line,
                     json_t **ret, int *ret_status, char **ret_sid, airlock_error *err)
{
        _cleanup_json_ json_t *resp = NULL;
        *ret_status = 0;
        *ret_sid = NULL;
        int r = http_exchange_as(u, session, proto, msg, deadline, b, max_line, &resp, err);
        if (r < 0)
                return r;
        int status = (int)json_integer_value(json_object_get(resp, WIRE_KEY_STATUS));
        json_t *hdrs = json_object_get(resp, WIRE_KEY_HEADERS);
        *ret_status = status;
        const char *sid = json_string_value(json_object_get(hdrs, "mcp-session-id"));
        if (sid && !(*ret_sid = strdup(sid)))
                return al_error(err, -ENOMEM, NULL, "out of memory");
        if (status == 404 && session)
                return al_error(err, -EPIPE, NULL, "server '%s' ended its session (HTTP 404)",
                                u->name);
        if (status < 200 || status > 299)
                return al_error(err, -EPROTO, NULL, "server '%s' answered HTTP %d", u->name,
                                status);
        if (id == 0)
                return 0;
        const char *b64 = json_string_value(json_object_get(resp, WIRE_KEY_BODY_BASE64));
        _cleanup_free_ unsigned char *body = NULL;
        size_t len = 0;
        if (!b64 || al_base64_decode(b64, strlen(b64), &body, &len) < 0)
                return al_error(err, -EPROTO, NULL, "server '%s' sent no body", u->name);
        r = upstream_list_charge(u, (const char *)body, len, err);
        if (r >= 0)
                r = upstream_reply_charge(u, b, (const char *)body, len, err);
        if (r < 0)
                return r;
        return http_find_reply(u, json_string_value(json_object_get(hdrs, "content-type")), body,
                               len, id, ret, err);
}

/* What an answer says of the session, taken into u: a 404 to a request
 * that had a session is its end (the next call starts a new one), a new
 * Mcp-Session-Id replaces the old. sid is freed. */
static void http_apply(mcp_upstream *u, const char *session, int status, char *sid)
{
        if (status == 404 && session && u->session && strcmp(session, u->session) == 0) {
                free(u->session);
                u->session = NULL;
                u->initialized = false;
                u->gen++;
        } else if (sid && status >= 200 && status <= 299 &&
                   (!u->session || strcmp(sid, u->session) != 0)) {
                free(u->session);
                u->session = TAKE_PTR(sid);
        }
        free(sid);
}

/* One message over HTTP in u's own session (the session's start). */
int upstream_http_message(mcp_upstream *u, json_t *msg, json_int_t id, uint64_t deadline,
                          const mcp_bounds *b, size_t max_line, json_t **ret, airlock_error *err)
{
        int status = 0;
        char *sid = NULL;
        const char *proto = u->initialized || u->proto[0] ? u->proto : NULL;
        int r = http_post(u, u->session, proto, msg, id, deadline, b, max_line, ret, &status, &sid,
                          err);
        http_apply(u, u->session, status, sid);
        return r;
}

/* A server at a "url": its headers with the secrets put in, and an
 * allow-list of its URL alone, so that the gateway's address rules (a
 * private or loopback address only when the URL names it) hold for it as
 * for the guest's own requests. */
int upstream_http_new(mcp_upstream *u, const mcp_spec *spec, const secret_store *secrets,
                      airlock_error *err)
{
        const json_t *o = spec->json;
        u->url = strdup(json_string_value(json_object_get(o, "url")));
        u->headers = json_object();
        if (!u->url || !u->headers)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        const char *key;
        const json_t *v;
        json_object_foreach (json_object_get(o, "headers"), key, v) {
                char *val = NULL;
                int r = upstream_expand(spec->name, u->url, "headers", json_string_value(v),
                                        secrets, &val, err);
                if (r < 0)
                        return r;
                json_object_set_new(u->headers, key, json_string(val));
                secrets_wipe_free(val, strlen(val));
        }
        int r = allowlist_new(&u->allow, err);
        if (r >= 0)
                r = allowlist_add(u->allow, u->url, "POST,DELETE", err);
        if (r < 0)
                return al_error(err, r, spec->file, "server '%s': \"url\": %s", spec->name,
                                err ? err->message : "not a URL the gateway takes");
        return 0;
}

/* tools/call on a server at a URL, with other calls in flight: the
 * session is started once (upstream_ensure_session); each call then POSTs with the
 * session it saw, without the lock, and takes what the answer says of the
 * session (http_apply) under it. A failure that leaves the session in an
 * unknown state ends it, unless a newer one was started meanwhile (gen).
 * Called and returns with the lock held. */
int upstream_http_call(mcp_upstream *u, json_t *params, uint64_t deadline, const mcp_bounds *b,
                       size_t max_line, json_t **ret, airlock_error *err)
{
        int r = upstream_ensure_session(u, deadline, b, err);
        if (r < 0)
                return r;
        unsigned gen = u->gen;
        json_int_t id = ++u->next_id;
        _cleanup_free_ char *session = u->session ? strdup(u->session) : NULL;
        char proto[sizeof(u->proto)];
        memcpy(proto, u->proto, sizeof(proto));
        _cleanup_json_ json_t *msg = jsonrpc_request(id, "tools/call", params);
        if (!msg || (u->session && !session))
                return al_error(err, -ENOMEM, NULL, "out of memory");
        _cleanup_json_ json_t *reply = NULL;
        int status = 0;
        char *sid = NULL;
        pthread_mutex_unlock(&u->lock);
        r = http_post(u, session, proto, msg, id, deadline, b, max_line, &reply, &status, &sid,
                      err);
        if (r == -ETIMEDOUT || r == -ECANCELED) {
                _cleanup_json_ json_t *c = upstream_cancel_notice(id, r);
                int st2 = 0;
                char *sid2 = NULL;
                airlock_error e;
                if (c)
                        (void)http_post(u, session, proto, c, 0, al_now_ns() + 1000000000ull, NULL,
                                        1u << 16, NULL, &st2, &sid2, &e);
                free(sid2);
        }
        pthread_mutex_lock(&u->lock);
        if (gen == u->gen)
                http_apply(u, session, status, sid);
        else
                free(sid);
        if (r >= 0)
                r = upstream_reply_result(u, reply, ret, err);
        /* A response over the cap was refused by the gateway, which read
         * no more of it: the session is as sound as before, and stays. */
        if (r == -E2BIG)
                r = al_error(err, -EMSGSIZE, NULL,
                             "server '%s' sent a response larger than the %zu of "
                             "\"maxResultBytes\" (and 4 KiB for the message around it); "
                             "airlock dropped it, and the session goes on",
                             u->name, max_line - 4096);
        if ((r == -EPROTO || r == -ENOMEM || r == -EPIPE) && gen == u->gen)
                upstream_fail(u);
        else if (r >= 0 || r == -EREMOTEIO)
                u->failures = 0;
        return r;
}

/* Ends u's session at its URL with a DELETE, when it has one (best
 * effort: the server may be gone). */
void upstream_http_end(mcp_upstream *u)
{
        if (!u->session)
                return;
        json_t *resp = NULL;
        airlock_error e;
        (void)http_exchange(u, NULL, al_now_ns() + 1000000000ull, NULL, 1u << 16, &resp, &e);
        json_decref(resp);
}
