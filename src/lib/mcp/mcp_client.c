/* The MCP client of one upstream server: the protocol (JSON-RPC 2.0, the
 * session's start and its protocol revision, the tool list and its caps,
 * the calls and their bounds) and the object's life. Its transports have
 * files of their own: stdio, a process airlock starts and supervises
 * (mcp_client_stdio.c), and Streamable HTTP, through the gateway
 * (mcp_client_http.c); mcp_client.h is what the three share.
 *
 * The server is never trusted: every read is bounded (a line, a result,
 * the time of a request), and a server that dies, floods or sends what is
 * not JSON-RPC is killed (its whole process group) and started afresh at
 * the next call, after a backoff that grows with the failures in a row.
 * Calls to one server may be in flight at once: over stdio each waits for
 * its own reply, and one of them at a time reads the server's output for
 * all (upstream_stdio_call), so no reader thread is needed; over HTTP each
 * makes its own request in the session (upstream_http_call). */
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jsonrpc.h"
#include "mcp/mcp_client.h"
#include "trace.h"
#include "mcp/mcp.h"

#define LIST_PAGES_MAX 64
#define BACKOFF_MAX_NS (10ull * 1000000000ull)
#define STOP_GRACE_MS  300

/* ---- messages ------------------------------------------------------- */

/* The time left until the earlier of deadline and now + timeout_s, in ms
 * for poll (at least 0). */
int upstream_ms_left(uint64_t deadline)
{
        uint64_t now = al_now_ns();
        if (now >= deadline)
                return 0;
        uint64_t ms = (deadline - now + 999999) / 1000000;
        return ms > INT_MAX ? INT_MAX : (int)ms;
}

static uint64_t deadline_of(const mcp_bounds *b, double timeout_s)
{
        uint64_t d = al_now_ns() + (uint64_t)(timeout_s * 1e9);
        if (b && b->deadline_ns && b->deadline_ns < d)
                d = b->deadline_ns;
        return d;
}

bool upstream_cancelled(const mcp_bounds *b)
{
        if (!b || b->cancel_fd < 0)
                return false;
        struct pollfd p = {b->cancel_fd, POLLIN, 0};
        return poll(&p, 1, 0) == 1;
}

int upstream_send(mcp_upstream *u, json_t *msg, uint64_t deadline, airlock_error *err)
{
        if (u->url)
                return upstream_http_message(u, msg, 0, deadline, NULL, 1u << 20, NULL, err);
        return upstream_stdio_send(u, msg, deadline, err);
}

/* Notes a notification the client acts on: notifications/tools/list_changed
 * (the stubs are those of the build; mcp_upstream_list_changed). The rest
 * are dropped. */
void upstream_notified(mcp_upstream *u, const json_t *msg)
{
        const char *m = json_string_value(json_object_get(msg, "method"));
        if (m && !json_object_get(msg, "id") && strcmp(m, "notifications/tools/list_changed") == 0)
                u->list_changed = true;
}

bool mcp_upstream_list_changed(const mcp_upstream *u)
{
        return u && u->list_changed;
}

/* The reply to a request the server makes of us: "ping" is answered, the
 * rest (sampling, elicitation, roots) this client does not offer. */
void upstream_answer_request(mcp_upstream *u, json_t *msg, uint64_t deadline)
{
        const char *m = json_string_value(json_object_get(msg, "method"));
        json_t *id = json_object_get(msg, "id");
        _cleanup_json_ json_t *reply = m && strcmp(m, "ping") == 0
                                           ? jsonrpc_result(id, json_object())
                                           : jsonrpc_error(id, RPC_METHOD_NOT_FOUND, NULL,
                                                           "airlock's client does not offer this");
        airlock_error e;
        if (reply)
                (void)upstream_send(u, reply, deadline, &e);
}

/* The notification that cancels request id upstream, after r (-ETIMEDOUT
 * or -ECANCELED) ended the wait for its reply. NULL when out of memory. */
json_t *upstream_cancel_notice(json_int_t id, int r)
{
        json_t *params =
            json_pack("{s:I, s:s}", "requestId", id, "reason",
                      r == -ETIMEDOUT ? "airlock: the call timed out" : "airlock: the run ended");
        return params ? jsonrpc_notification("notifications/cancelled", params) : NULL;
}

/* Charges what parsing n bytes of a tools/list page would hold (its JSON
 * values, counted by a pass that builds nothing, times JSONRPC_VALUE_COST,
 * plus the bytes) against what the list may still take, before the page
 * is parsed: a page of "[0,0,0,..." parses into twenty times its size.
 * -EFBIG names the cap; 0 when no list is being read. */
int upstream_list_charge(mcp_upstream *u, const char *d, size_t n, airlock_error *err)
{
        if (!u->listing)
                return 0;
        uint64_t values = 0;
        unsigned depth = 0;
        jsonrpc_measure(d, n, &values, &depth);
        uint64_t cost = values * JSONRPC_VALUE_COST + n;
        u->list_values += values;
        if (cost > u->list_cost_left)
                return al_error(err, -EFBIG, NULL,
                                "its tool list would take more than %u MiB once parsed (%llu JSON "
                                "values so far), airlock's cap of one server's tool list",
                                MCP_LIST_COST >> 20, (unsigned long long)u->list_values);
        u->list_cost_left -= cost;
        return 0;
}

uint64_t upstream_parse_cost(const char *d, size_t n, uint64_t *ret_values)
{
        uint64_t values = 0;
        unsigned depth = 0;
        jsonrpc_measure(d, n, &values, &depth);
        if (ret_values)
                *ret_values = values;
        return values * JSONRPC_VALUE_COST + n;
}

int upstream_cost_error(const mcp_upstream *u, size_t n, uint64_t cost, uint64_t values,
                        uint64_t max_cost, airlock_error *err)
{
        return al_error(err, -EMSGSIZE, NULL,
                        "server '%s' sent a result of %zu bytes that would take %" PRIu64
                        " bytes on the host once parsed (%" PRIu64
                        " JSON values), more than the run's host budget of %" PRIu64
                        " bytes (%s); airlock dropped it unparsed, and the server keeps running",
                        u->name, n, cost, values, max_cost, MCP_RUN_BUDGET_TEXT);
}

int upstream_reply_charge(const mcp_upstream *u, const mcp_bounds *b, const char *d, size_t n,
                          airlock_error *err)
{
        if (!b || !b->max_cost)
                return 0;
        uint64_t values = 0, cost = upstream_parse_cost(d, n, &values);
        if (cost <= b->max_cost)
                return 0;
        return upstream_cost_error(u, n, cost, values, b->max_cost, err);
}

/* The result of a reply, or its error as -EREMOTEIO. */
int upstream_reply_result(mcp_upstream *u, json_t *reply, json_t **ret, airlock_error *err)
{
        json_t *e = json_object_get(reply, "error");
        if (e) {
                const char *m = json_string_value(json_object_get(e, "message"));
                _cleanup_free_ char *clean = al_utf8_sanitize(m ? m : "", m ? strlen(m) : 0);
                return al_error(err, -EREMOTEIO, NULL, "%.600s (JSON-RPC error %lld)",
                                clean && *clean ? clean : "no message",
                                (long long)json_integer_value(json_object_get(e, "code")));
        }
        json_t *res = json_object_get(reply, "result");
        if (!json_is_object(res))
                return al_error(err, -EPROTO, NULL, "server '%s' sent a reply without a result",
                                u->name);
        *ret = json_incref(res);
        return 0;
}

/* One request: method with params, its reply's "result" in *ret (or the
 * error reply as -EREMOTEIO with its message). A request that times out or
 * is cancelled is cancelled upstream too (notifications/cancelled). */
static int request(mcp_upstream *u, const char *method, json_t *params, uint64_t deadline,
                   const mcp_bounds *b, size_t max_line, json_t **ret, airlock_error *err)
{
        json_int_t id = ++u->next_id;
        _cleanup_json_ json_t *msg = jsonrpc_request(id, method, params);
        if (!msg)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        _cleanup_json_ json_t *reply = NULL;
        int r;
        if (u->url) {
                r = upstream_http_message(u, msg, id, deadline, b, max_line, &reply, err);
        } else {
                r = upstream_send(u, msg, deadline, err);
                if (r == -EPIPE)
                        return upstream_gone(u, "before the request could be sent", err);
                if (r < 0)
                        return r;
                r = upstream_stdio_read_reply(u, id, deadline, b, max_line, &reply, err);
        }
        if (r == -ETIMEDOUT || r == -ECANCELED) {
                _cleanup_json_ json_t *c = upstream_cancel_notice(id, r);
                airlock_error e;
                if (c && (u->in_fd >= 0 || u->url))
                        (void)upstream_send(
                            u, c, al_now_ns() + (u->url ? 1000000000ull : 100000000ull), &e);
        }
        if (r < 0)
                return r;
        return upstream_reply_result(u, reply, ret, err);
}

/* Records a failure of the process: it is killed, and the next start waits
 * a backoff of 0 s after the first failure in a row, then 0.25 s doubling
 * up to 10 s. */
void upstream_fail(mcp_upstream *u)
{
        upstream_kill(u, NULL);
        u->failures++;
        uint64_t d = 0;
        if (u->failures > 1) {
                d = 250000000ull << (u->failures - 2 < 6 ? u->failures - 2 : 6);
                if (d > BACKOFF_MAX_NS)
                        d = BACKOFF_MAX_NS;
        }
        u->retry_at = al_now_ns() + d;
}

/* Starts the process and the session: initialize, then the initialized
 * notification. The protocol revision asked for is the newest this client
 * speaks; a server that offers an older one this client knows is fine. */
static int start_session(mcp_upstream *u, const mcp_bounds *b, airlock_error *err)
{
        uint64_t now = al_now_ns();
        if (now < u->retry_at) {
                uint64_t bound = b && b->deadline_ns ? b->deadline_ns : UINT64_MAX;
                if (u->retry_at > bound)
                        return al_error(err, -EAGAIN, NULL,
                                        "server '%s' failed %u times in a row; the next restart "
                                        "is in %.1f s",
                                        u->name, u->failures, (double)(u->retry_at - now) / 1e9);
                struct timespec ts = {(time_t)((u->retry_at - now) / 1000000000ull),
                                      (long)((u->retry_at - now) % 1000000000ull)};
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
        }
        int r = u->url ? 0 : upstream_spawn(u, err);
        if (r < 0) {
                upstream_fail(u);
                return r;
        }
        free(u->session);
        u->session = NULL;
        u->proto[0] = '\0';
        uint64_t deadline = deadline_of(b, MCP_START_TIMEOUT_S);
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", MCP_PROTOCOL_LATEST,
                      "capabilities", "clientInfo", "name", "airlock", "version", AIRLOCK_VERSION);
        _cleanup_json_ json_t *res = NULL;
        airlock_error e;
        airlock_error_clear(&e);
        r = params ? request(u, "initialize", params, deadline, b, 1u << 20, &res, &e) : -ENOMEM;
        const char *v = json_string_value(json_object_get(res, "protocolVersion"));
        static const char *const known[] = {MCP_PROTOCOL_NEXT, MCP_PROTOCOL_LATEST, "2025-06-18",
                                            "2025-03-26"};
        bool ok = false;
        for (size_t i = 0; r >= 0 && v && i < ARRAY_SIZE(known); i++)
                ok |= strcmp(v, known[i]) == 0;
        if (r >= 0 && !ok)
                r = al_error(&e, -EPROTO, NULL,
                             "it offers protocol revision %.40s, which airlock "
                             "does not speak (%s or older to 2025-03-26)",
                             v ? v : "(none)", MCP_PROTOCOL_LATEST);
        if (r >= 0) {
                snprintf(u->proto, sizeof(u->proto), "%s", v);
                _cleanup_json_ json_t *n = jsonrpc_notification("notifications/initialized", NULL);
                r = n ? upstream_send(u, n, deadline, &e) : -ENOMEM;
        }
        if (r < 0) {
                bool dead = u->pid == 0 && !u->url;
                upstream_fail(u);
                if (dead || r == -EPIPE)
                        return al_error(err, r, NULL, "%s", e.message);
                return al_error(err, r, NULL, "server '%s' did not start: %s", u->name, e.message);
        }
        u->initialized = true;
        return 0;
}

/* ---- the object ------------------------------------------------------ */

static void strv_free_wipe(char **v)
{
        for (char **p = v; p && *p; p++)
                secrets_wipe_free(*p, strlen(*p));
        free(v);
}

static void upstream_free(mcp_upstream *u)
{
        free(u->name);
        free(u->exe);
        for (char **p = u->argv; p && *p; p++)
                free(*p);
        free(u->argv);
        strv_free_wipe(u->envp);
        free(u->cwd);
        free(u->buf);
        free(u->url);
        free(u->session);
        allowlist_free(u->allow);
        if (u->headers) {
                const char *k;
                json_t *v;
                json_object_foreach (u->headers, k, v) {
                        size_t n = json_string_length(v);
                        if (n)
                                explicit_bzero((char *)json_string_value(v), n);
                }
                json_decref(u->headers);
        }
        pthread_mutex_destroy(&u->lock);
        pthread_cond_destroy(&u->cv);
        free(u);
}

/* "${secret:NAME}" in v replaced by the values (malloc'd, for the server's
 * environment or headers only), for the server named server at url (NULL
 * for one started on the host). An unknown secret is -ENOENT naming it; a
 * secret whose own targets do not name the server is -EACCES naming the
 * server, the secret and its targets (secrets_value_for_server). */
int upstream_expand(const char *server, const char *url, const char *key, const char *v,
                    const secret_store *secrets, char **ret, airlock_error *err)
{
        dynbuf b;
        dynbuf_init(&b, 1u << 20);
        const char *p = v;
        int r = 0;
        for (const char *s; r >= 0 && (s = strstr(p, "${secret:"));) {
                const char *e = strchr(s + 9, '}');
                char name[SECRET_NAME_MAX + 1];
                size_t n = (size_t)(e - (s + 9));
                memcpy(name, s + 9, n);
                name[n] = '\0';
                const unsigned char *val;
                size_t len;
                airlock_error why;
                airlock_error_clear(&why);
                r = secrets_value_for_server(secrets, name, server, url, &val, &len, &why);
                if (r < 0) {
                        al_error(err, r, NULL, "server '%s': \"%s\" names ${secret:%s}: %s", server,
                                 key, name, why.message);
                        break;
                }
                r = dynbuf_append(&b, p, (size_t)(s - p));
                if (r >= 0)
                        r = dynbuf_append(&b, val, len);
                p = e + 1;
        }
        if (r >= 0)
                r = dynbuf_append(&b, p, strlen(p) + 1);
        if (r < 0) {
                if (b.data)
                        explicit_bzero(b.data, b.len);
                dynbuf_free(&b);
                return r == -ENOENT || r == -EACCES ? r : al_error(err, r, NULL, "out of memory");
        }
        *ret = dynbuf_take(&b, NULL);
        return 0;
}

static int upstream_new(const mcp_spec *spec, const secret_store *secrets, mcp_upstream **ret,
                        airlock_error *err)
{
        mcp_upstream *u = calloc(1, sizeof(*u));
        if (!u)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        pthread_mutex_init(&u->lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&u->cv, &ca);
        pthread_condattr_destroy(&ca);
        u->in_fd = u->out_fd = u->err_fd = -1;
        const json_t *o = spec->json;
        u->name = strdup(spec->name);
        int r = !u->name                    ? al_error(err, -ENOMEM, NULL, "out of memory")
                : json_object_get(o, "url") ? upstream_http_new(u, spec, secrets, err)
                                            : upstream_stdio_new(u, spec, secrets, err);
        if (r < 0) {
                upstream_free(u);
                return r;
        }
        *ret = u;
        return 0;
}

int mcp_upstream_start(const mcp_spec *spec, const secret_store *secrets, mcp_upstream **ret,
                       json_t **ret_tools, airlock_error *err)
{
        mcp_upstream *u = NULL;
        int r = upstream_new(spec, secrets, &u, err);
        if (r < 0)
                return r;
        mcp_bounds b = {al_now_ns() + (uint64_t)(MCP_START_TIMEOUT_S * 1e9), -1, 0};
        r = start_session(u, &b, err);
        json_t *tools = r >= 0 ? json_array() : NULL;
        if (r >= 0 && !tools)
                r = al_error(err, -ENOMEM, NULL, "out of memory");
        /* Every page of tools/list, within the start's time, and within
         * the list's caps (docs/design.md, "Upstream MCP servers"): its
         * bytes over all pages (each page's line may be no longer than
         * what is left of them), what parsing them costs (upstream_list_charge,
         * before each page is parsed), its tools, and each description,
         * checked as each page comes, so that a hostile list fails the
         * build at the first page past a cap. */
        _cleanup_json_ json_t *cursor = NULL;
        size_t bytes_left = MCP_LIST_BYTES;
        u->listing = true;
        u->list_cost_left = MCP_LIST_COST;
        u->list_values = 0;
        for (int page = 0; r >= 0; page++) {
                if (page == LIST_PAGES_MAX) {
                        r = al_error(err, -E2BIG, NULL,
                                     "server '%s': tools/list has more than %d pages", u->name,
                                     LIST_PAGES_MAX);
                        break;
                }
                _cleanup_json_ json_t *params =
                    cursor ? json_pack("{s:O}", "cursor", cursor) : json_object();
                _cleanup_json_ json_t *res = NULL;
                airlock_error e;
                airlock_error_clear(&e);
                r = request(u, "tools/list", params, b.deadline_ns, &b, bytes_left, &res, &e);
                if (r == -E2BIG) {
                        r = al_error(err, r, NULL,
                                     "server '%s': tools/list: its tool list is more than %u MiB "
                                     "over its pages, airlock's cap of one server's tool list "
                                     "(leave tools out in the server's own settings, or split it)",
                                     u->name, MCP_LIST_BYTES >> 20);
                        break;
                }
                if (r < 0) {
                        r = al_error(err, r, NULL, "server '%s': tools/list: %s", u->name,
                                     e.message);
                        break;
                }
                /* The page's bytes: its line and what came before it. */
                size_t took = json_dumpb(res, NULL, 0, JSON_COMPACT);
                bytes_left = took < bytes_left ? bytes_left - took : 0;
                json_t *list = json_object_get(res, "tools");
                if (!json_is_array(list)) {
                        r = al_error(err, -EPROTO, NULL,
                                     "server '%s': tools/list: the result has no \"tools\" array",
                                     u->name);
                        break;
                }
                if (json_array_size(tools) + json_array_size(list) > MCP_LIST_TOOLS) {
                        r = al_error(err, -E2BIG, NULL,
                                     "server '%s': tools/list: more than %d tools, airlock's cap "
                                     "of one server's tool list",
                                     u->name, MCP_LIST_TOOLS);
                        break;
                }
                size_t i;
                json_t *t;
                json_array_foreach (list, i, t) {
                        const json_t *d = json_object_get(t, "description");
                        if (json_string_length(d) <= MCP_DESC_MAX)
                                continue;
                        const char *name = json_string_value(json_object_get(t, "name"));
                        _cleanup_free_ char *clean =
                            al_utf8_sanitize(name ? name : "?", name ? strlen(name) : 1);
                        r = al_error(err, -E2BIG, NULL,
                                     "server '%s': tools/list: the description of tool '%.100s' "
                                     "is %zu bytes, more than %u KiB, airlock's cap of a tool's "
                                     "description",
                                     u->name, clean ? clean : "?", json_string_length(d),
                                     MCP_DESC_MAX >> 10);
                        break;
                }
                if (r < 0)
                        break;
                json_array_extend(tools, list);
                json_decref(cursor);
                cursor = json_incref(json_object_get(res, "nextCursor"));
                if (!json_is_string(cursor))
                        break;
        }
        u->listing = false;
        if (r < 0) {
                json_decref(tools);
                mcp_upstream_stop(u);
                return r;
        }
        u->failures = 0;
        *ret = u;
        *ret_tools = tools;
        return 0;
}

/* The session of u started, by this caller or another: one caller starts
 * it (without the lock), the others wait for it. Called and returns with
 * the lock held. */
int upstream_ensure_session(mcp_upstream *u, uint64_t deadline, const mcp_bounds *b,
                            airlock_error *err)
{
        struct timespec ts;
        while (!u->initialized) {
                if (u->starting) {
                        uint64_t t = deadline;
                        ts = (struct timespec){(time_t)(t / 1000000000ull),
                                               (long)(t % 1000000000ull)};
                        if (pthread_cond_clockwait(&u->cv, &u->lock, CLOCK_MONOTONIC, &ts) ==
                            ETIMEDOUT)
                                return al_error(err, -ETIMEDOUT, NULL,
                                                "server '%s' was still starting at the deadline",
                                                u->name);
                        continue;
                }
                u->starting = true;
                pthread_mutex_unlock(&u->lock);
                int r = start_session(u, b, err);
                pthread_mutex_lock(&u->lock);
                u->starting = false;
                pthread_cond_broadcast(&u->cv);
                if (r < 0)
                        return r;
        }
        return 0;
}

int mcp_upstream_call(mcp_upstream *u, const char *tool, const json_t *args, double timeout_s,
                      const mcp_bounds *b, json_t **ret_result, airlock_error *err)
{
        /* The lock is held briefly (stdio calls wait for their replies
         * on the condition variable, calls at a URL make their requests
         * without it); its wait is bounded like the call all the same. */
        uint64_t deadline = deadline_of(b, timeout_s);
        struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
        if (pthread_mutex_clocklock(&u->lock, CLOCK_MONOTONIC, &ts) != 0)
                return al_error(err, -ETIMEDOUT, NULL,
                                "server '%s' was busy with another call until the deadline",
                                u->name);
        size_t max = (b && b->max_result ? b->max_result : MCP_DEFAULT_RESULT) + 4096;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:O}", "name", tool, "arguments", args);
        al_trace_inject_meta(params); /* the tool call's span, in _meta (trace.h) */
        int r = params ? 0 : al_error(err, -ENOMEM, NULL, "out of memory");
        if (r >= 0 && !u->url) {
                r = upstream_stdio_call(u, params, deadline, b, max, ret_result, err);
        } else if (r >= 0) {
                r = upstream_http_call(u, params, deadline, b, max, ret_result, err);
        }
        if (r == -ETIMEDOUT)
                al_error(err, r, NULL, "no answer within %.3g s", timeout_s);
        pthread_mutex_unlock(&u->lock);
        return r;
}

void mcp_upstream_stop_all(mcp_upstream *const *v, size_t n)
{
        /* The polite way first, for all at once: the end of their input,
         * as the protocol says; a grace period for them to exit; then
         * each whole process group is killed. */
        for (size_t i = 0; i < n; i++) {
                if (v[i])
                        close_fd(&v[i]->in_fd);
                /* A session at a URL is ended with a DELETE (best effort). */
                if (v[i] && v[i]->url)
                        upstream_http_end(v[i]);
        }
        uint64_t until = al_now_ns() + STOP_GRACE_MS * 1000000ull;
        for (size_t i = 0; i < n; i++) {
                mcp_upstream *u = v[i];
                if (!u || u->pid <= 0)
                        continue;
                int st;
                while (waitpid(u->pid, &st, WNOHANG) == 0 && al_now_ns() < until) {
                        struct pollfd p = {u->out_fd, POLLIN, 0};
                        char sink[4096];
                        if (poll(&p, 1, 20) > 0 && read(u->out_fd, sink, sizeof(sink)) <= 0)
                                close_fd(&u->out_fd);
                }
                if (waitpid(u->pid, &st, WNOHANG) == u->pid) {
                        /* Reaped: what is left of its group is killed. */
                        kill(-u->pid, SIGKILL);
                        u->pid = 0;
                }
        }
        for (size_t i = 0; i < n; i++) {
                if (!v[i])
                        continue;
                upstream_kill(v[i], NULL);
                upstream_free(v[i]);
        }
}

void mcp_upstream_stop(mcp_upstream *u)
{
        mcp_upstream_stop_all(&u, 1);
}
