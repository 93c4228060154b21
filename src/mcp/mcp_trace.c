/* The MCP server's spans and its operation-duration metric (docs/tracing.md).
 *
 * Each request gets a server span named "{mcp.method.name} {target}" (the
 * tool's name for tools/call, the URI's scheme for resources/read), under
 * the context of its params._meta (traceparent, tracestate, baggage; a
 * missing or malformed one starts a new trace). The span is the thread's
 * current one while the request is handled (trace.h), so that the run and
 * the session's work are its children, and an answer that is a JSON-RPC
 * error or a tool's isError sets its error status (mcp_trace_answer).
 *
 * A call forwarded to the peer that holds its session gets a client span of
 * the same name and attributes on the forwarding instance
 * (mcp_trace_forward), whose context goes to the peer in signed headers;
 * the peer's server span takes that context over params._meta's.
 *
 * The metric mcp.server.operation.duration is kept whether tracing is on
 * or not: a histogram per method, with no tenant label, for /metrics. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "base.h"
#include "mcp_internal.h"
#include "sha256.h"
#include "trace.h"

/* ---- the duration histogram ------------------------------------------------ */

/* The buckets the MCP semantic conventions advise, in seconds. */
static const double bounds[] = {0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300};
/* The methods are a fixed list, so that a client's method names cannot
 * grow the metric: every other is "other". */
static const char *const methods[] = {
    "initialize",     "ping",           "tools/list",      "tools/call",
    "resources/list", "resources/read", "server/discover", "subscriptions/listen",
    "other"};

static struct {
        pthread_mutex_t lock;
        uint64_t counts[ARRAY_SIZE(methods)][ARRAY_SIZE(bounds) + 1];
        double sums[ARRAY_SIZE(methods)];
} hist = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t method_index(const char *method)
{
        for (size_t i = 0; i + 1 < ARRAY_SIZE(methods); i++)
                if (method && strcmp(method, methods[i]) == 0)
                        return i;
        return ARRAY_SIZE(methods) - 1;
}

static void observe(const char *method, double seconds)
{
        size_t m = method_index(method), b = 0;
        while (b < ARRAY_SIZE(bounds) && seconds > bounds[b])
                b++;
        pthread_mutex_lock(&hist.lock);
        hist.counts[m][b]++;
        hist.sums[m] += seconds;
        pthread_mutex_unlock(&hist.lock);
}

int mcp_trace_metrics(dynbuf *out)
{
        int r = dynbuf_appendf(out, "# HELP mcp_server_operation_duration_seconds Duration of "
                                    "MCP requests, by method (mcp.server.operation.duration).\n"
                                    "# TYPE mcp_server_operation_duration_seconds histogram\n");
        pthread_mutex_lock(&hist.lock);
        for (size_t m = 0; r >= 0 && m < ARRAY_SIZE(methods); m++) {
                uint64_t cum = 0;
                for (size_t b = 0; r >= 0 && b <= ARRAY_SIZE(bounds); b++) {
                        cum += hist.counts[m][b];
                        if (b < ARRAY_SIZE(bounds))
                                r = dynbuf_appendf(out,
                                                   "mcp_server_operation_duration_seconds_bucket{"
                                                   "mcp_method_name=\"%s\",le=\"%g\"} %llu\n",
                                                   methods[m], bounds[b], (unsigned long long)cum);
                        else
                                r = dynbuf_appendf(out,
                                                   "mcp_server_operation_duration_seconds_bucket{"
                                                   "mcp_method_name=\"%s\",le=\"+Inf\"} %llu\n",
                                                   methods[m], (unsigned long long)cum);
                }
                if (r >= 0)
                        r = dynbuf_appendf(out,
                                           "mcp_server_operation_duration_seconds_sum{mcp_method_"
                                           "name=\"%s\"} %.6f\n"
                                           "mcp_server_operation_duration_seconds_count{mcp_"
                                           "method_name=\"%s\"} %llu\n",
                                           methods[m], hist.sums[m], methods[m],
                                           (unsigned long long)cum);
        }
        pthread_mutex_unlock(&hist.lock);
        if (r >= 0)
                r = dynbuf_appendf(out,
                                   "# HELP airlock_trace_spans_dropped_total Spans not exported: "
                                   "the queue was full, or the collector slow, down or failing.\n"
                                   "# TYPE airlock_trace_spans_dropped_total counter\n"
                                   "airlock_trace_spans_dropped_total %llu\n",
                                   (unsigned long long)al_trace_dropped());
        return r;
}

/* ---- spans ----------------------------------------------------------------- */

static uint8_t session_key[32];
static pthread_once_t session_key_once = PTHREAD_ONCE_INIT;

static void session_key_init(void)
{
        if (getrandom(session_key, sizeof(session_key), 0) != (ssize_t)sizeof(session_key))
                memset(session_key, 0, sizeof(session_key));
}

/* mcp.session.id: a session handle is a bearer capability, so the span
 * carries a hash of it keyed with bytes of this process's own, which no
 * collector can turn back into the handle or compute for a guessed one. */
static void session_hash(const char *handle, char out[33])
{
        pthread_once(&session_key_once, session_key_init);
        uint8_t buf[32 + 256], h[32];
        size_t n = strnlen(handle, 256);
        memcpy(buf, session_key, 32);
        memcpy(buf + 32, handle, n);
        mcp_sha256(buf, 32 + n, h);
        for (int i = 0; i < 16; i++)
                snprintf(out + 2 * i, 3, "%02x", h[i]);
}

/* The span's target: the tool's name for tools/call, the scheme of the URI
 * for resources/read (a URI names a run's file, which is content). */
static void request_target(const char *method, const json_t *params, char *buf, size_t size)
{
        const char *name = json_string_value(json_object_get(params, "name"));
        const char *uri = json_string_value(json_object_get(params, "uri"));
        buf[0] = '\0';
        if (strcmp(method, "tools/call") == 0 && name)
                snprintf(buf, size, "%.100s", name);
        else if (strcmp(method, "resources/read") == 0 && uri && strchr(uri, ':'))
                snprintf(buf, size, "%.*s", (int)MIN(strcspn(uri, ":"), 32), uri);
}

/* A span of one MCP request, server or client: named "{method} {target}",
 * with the conventions' attributes, under over when it is a valid context
 * (a signed peer request's, which descends from the client's own) and else
 * under params._meta's. */
static al_span *request_span(al_span_kind kind, const char *method, const json_t *id,
                             const json_t *params, const al_trace_ctx *over)
{
        if (!al_trace_on())
                return NULL;
        const json_t *meta = json_object_get(params, "_meta");
        al_trace_ctx parent;
        if (over && over->valid)
                parent = *over;
        else
                al_trace_parse(json_string_value(json_object_get(meta, "traceparent")),
                               json_string_value(json_object_get(meta, "tracestate")),
                               json_string_value(json_object_get(meta, "baggage")), &parent);
        char target[112], name[240];
        request_target(method, params, target, sizeof(target));
        snprintf(name, sizeof(name), "%.100s%s%s", method, target[0] ? " " : "", target);
        al_span *s = al_span_start(name, kind, &parent);
        if (!s)
                return NULL;
        al_span_set_str(s, "mcp.method.name", method);
        _cleanup_free_ char *idtext = id ? json_dumps(id, JSON_ENCODE_ANY) : NULL;
        if (idtext)
                al_span_set_str(s, "jsonrpc.request.id",
                                json_is_string(id) ? json_string_value(id) : idtext);
        if (strcmp(method, "tools/call") == 0 && target[0])
                al_span_set_str(s, "gen_ai.tool.name", target);
        const json_t *args = json_object_get(params, "arguments");
        const char *handle = json_string_value(json_object_get(args, "session"));
        if (handle) {
                char h[33];
                session_hash(handle, h);
                al_span_set_str(s, "mcp.session.id", h);
        }
        return s;
}

al_span *mcp_trace_begin(const char *method, const json_t *id, const json_t *params,
                         const char *tenant, const al_trace_ctx *over)
{
        al_span *s = request_span(AL_SPAN_SERVER, method, id, params, over);
        if (s && tenant && al_trace_tenants())
                al_span_set_str(s, "airlock.tenant", tenant);
        return s;
}

al_span *mcp_trace_forward(const char *method, const json_t *id, const json_t *params,
                           const char *peer)
{
        al_span *s = request_span(AL_SPAN_CLIENT, method, id, params, NULL);
        al_span_set_str(s, "airlock.peer", peer);
        return s;
}

void mcp_trace_status(al_span *s, const json_t *msg)
{
        if (!s || !json_is_object(msg))
                return;
        const json_t *e = json_object_get(msg, "error");
        const json_t *res = json_object_get(msg, "result");
        if (e) {
                json_int_t code = json_integer_value(json_object_get(e, "code"));
                char t[32];
                snprintf(t, sizeof(t), "%lld", (long long)code);
                al_span_set_str(s, "rpc.jsonrpc.error_code", t);
                al_span_set_str(s, "error.type", t);
                al_span_error(s, "JSON-RPC error");
        } else if (json_is_true(json_object_get(res, "isError"))) {
                /* The tool's own message may quote the code's output: the
                 * status says only that the tool failed. */
                al_span_set_str(s, "error.type", "tool_error");
                al_span_error(s, "the tool answered isError");
        }
}

void mcp_trace_answer(const json_t *msg)
{
        mcp_trace_status(al_span_current(), msg);
}

void mcp_trace_end(al_span *span, const char *method, uint64_t t0)
{
        observe(method, (double)(al_now_ns() - t0) / 1e9);
        if (!span)
                return;
        al_span_end(span);
        char line[512];
        if (al_trace_drop_note(line, sizeof(line), 60))
                fprintf(stderr, "airlock: %s\n", line);
}
