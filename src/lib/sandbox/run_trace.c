/* The spans of a run (docs/tracing.md): the run, the copy's wait, each host
 * tool call, each gateway HTTP request and each upstream MCP tool call. Each
 * is a branch on a NULL span when tracing is off (trace.h).
 *
 * Privacy: no attribute carries code, arguments, results, file contents or
 * a secret, unless the content option is on (al_trace_set_content), and
 * then code and arguments only, cut and scrubbed of the run's secrets. */
#include <errno.h>
#include <string.h>

#include "sandbox/run_trace.h"

#include "base.h"
#include "host/secrets.h"

/* The run's parent: the caller's context from the options, else the span
 * of the calling thread's request (the MCP server's), else none. */
al_span *sbx_trace_run_begin(const char *name, const airlock_run_options *o, const char *code,
                             size_t len, const secret_store *ss)
{
        if (!al_trace_on())
                return NULL;
        al_trace_ctx parent = {0};
        if (o && o->traceparent)
                al_trace_parse(o->traceparent, o->tracestate, o->baggage, &parent);
        else
                al_span_context(al_span_current(), &parent);
        al_span *s = al_span_start(name, AL_SPAN_INTERNAL, &parent);
        if (!s)
                return NULL;
        al_span_set_int(s, "airlock.code.bytes", (int64_t)len);
        if (al_trace_content() && code) {
                _cleanup_free_ char *clean = NULL;
                size_t n = 0;
                if (secrets_scrub_cut(ss, code, len, AL_SPAN_CONTENT_MAX, &clean, &n) >= 0)
                        al_span_set_content(s, "airlock.code", clean, n);
        }
        return s;
}

void sbx_trace_run_end(al_span *s, const airlock_limits *lim, int r, const airlock_result *res,
                       const char *error)
{
        if (!s)
                return;
        if (lim) {
                al_span_set_double(s, "airlock.limits.timeout_s", lim->timeout_s);
                al_span_set_double(s, "airlock.limits.cpu_s", lim->cpu_s);
                al_span_set_int(s, "airlock.limits.memory_bytes", (int64_t)lim->memory_bytes);
                al_span_set_int(s, "airlock.limits.pids", lim->pids);
        }
        if (r < 0 || !res) {
                al_span_set_str(s, "airlock.status", "not run");
                al_span_error(s, error && *error ? error : "the run could not be carried out");
        } else {
                al_span_set_str(s, "airlock.status", airlock_status_name(res->status));
                al_span_set_int(s, "airlock.exit_code", res->exit_code);
                al_span_set_double(s, "airlock.duration_ms", res->duration_ms);
                if (res->usage.cpu_ms >= 0)
                        al_span_set_double(s, "airlock.cpu_ms", res->usage.cpu_ms);
                if (res->usage.peak_private_bytes != UINT64_MAX)
                        al_span_set_int(s, "airlock.peak_memory_bytes",
                                        (int64_t)res->usage.peak_private_bytes);
                al_span_set_int(s, "airlock.tool_calls", (int64_t)res->usage.n_tool_calls);
                al_span_set_int(s, "airlock.http_requests", (int64_t)res->usage.n_http);
                /* The status names the limit; the message, which may quote
                 * the code's own exception, is no attribute. */
                if (!res->success)
                        al_span_error(s, airlock_status_name(res->status));
        }
        al_span_end(s);
}

al_span *sbx_trace_child(const char *name)
{
        al_trace_ctx parent;
        if (!al_span_context(al_span_current(), &parent))
                return NULL;
        return al_span_start(name, AL_SPAN_INTERNAL, &parent);
}

/* A host tool's span, or an upstream MCP server's tool as a client span
 * named as the MCP conventions name it; pushed as the thread's current span
 * while the tool runs, so that the upstream request carries its context
 * (al_trace_inject_meta in mcp/mcp_client.c). */
al_span *sbx_trace_tool_begin(const char *name, bool upstream, const json_t *args,
                              const secret_store *ss, al_span **ret_outer)
{
        al_trace_ctx parent;
        *ret_outer = al_span_current();
        if (!al_span_context(*ret_outer, &parent))
                return NULL;
        char span_name[160];
        snprintf(span_name, sizeof(span_name), "%s %s", upstream ? "tools/call" : "execute_tool",
                 name);
        al_span *s =
            al_span_start(span_name, upstream ? AL_SPAN_CLIENT : AL_SPAN_INTERNAL, &parent);
        al_span_set_str(s, "gen_ai.operation.name", "execute_tool");
        al_span_set_str(s, "gen_ai.tool.name", name);
        if (upstream)
                al_span_set_str(s, "mcp.method.name", "tools/call");
        if (s && al_trace_content() && args) {
                _cleanup_free_ char *text = json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
                _cleanup_free_ char *clean = NULL;
                size_t n = 0;
                if (text &&
                    secrets_scrub_cut(ss, text, strlen(text), AL_SPAN_CONTENT_MAX, &clean, &n) >= 0)
                        al_span_set_content(s, "gen_ai.tool.call.arguments", clean, n);
        }
        if (s)
                al_span_push(s);
        return s;
}

void sbx_trace_tool_end(al_span *s, al_span *outer, bool ok, const char *kind)
{
        if (!s)
                return;
        al_span_pop(outer);
        /* The tool's message may quote its arguments or a host value: the
         * status says only that it failed, and how. */
        if (!ok)
                al_span_error(s, kind ? kind : "the tool failed");
        al_span_end(s);
}

al_span *sbx_trace_http_begin(void)
{
        al_trace_ctx parent;
        if (!al_span_context(al_span_current(), &parent))
                return NULL;
        return al_span_start("HTTP", AL_SPAN_CLIENT, &parent);
}

/* The method, the target host and the status; the URL without its query
 * (the gateway's record has none: no secret a query may carry). */
void sbx_trace_http_end(al_span *s, const gateway_record *rec, int r)
{
        if (!s)
                return;
        char url[sizeof(rec->url)];
        snprintf(url, sizeof(url), "%s", rec->url);
        url[strcspn(url, "?#")] = '\0';
        if (rec->method[0])
                al_span_rename(s, rec->method);
        al_span_set_str(s, "http.request.method", rec->method);
        al_span_set_str(s, "url.full", url);
        const char *host = strstr(url, "://");
        if (host) {
                host += 3;
                char h[256];
                size_t n = strcspn(host, "/");
                const char *at = memchr(host, '@', n); /* never a user or a password */
                if (at) {
                        n -= (size_t)(at + 1 - host);
                        host = at + 1;
                }
                snprintf(h, sizeof(h), "%.*s", (int)n, host);
                char *colon = h[0] == '[' ? strchr(h, ']') : strrchr(h, ':');
                if (colon && *colon == ':')
                        *colon = '\0';
                else if (colon && colon[1] == ':')
                        colon[1] = '\0';
                al_span_set_str(s, "server.address", h);
        }
        if (rec->status)
                al_span_set_int(s, "http.response.status_code", rec->status);
        al_span_set_bool(s, "airlock.http.allowed", rec->allowed);
        if (r < 0)
                al_span_error(s, rec->allowed ? "the request failed" : "refused by the allow-list");
        else if (rec->status >= 400)
                al_span_error(s, "an HTTP error status");
        al_span_end(s);
}

/* An OTLP header's ${secret:NAME}: the value of the airlock secret NAME,
 * only when one of its targets allows a POST to the endpoint's URL (an
 * https:// target, or one that says http:// itself), as a server's
 * headers of code mode get theirs (secrets_value_for_server). */
static int otlp_secret(void *arg, const char *name, const char *url, char **ret)
{
        const unsigned char *v;
        size_t n;
        int r = secrets_value_for_server(arg, name, "otlp", url, &v, &n, NULL);
        if (r < 0)
                return r;
        *ret = strndup((const char *)v, n);
        return *ret ? 0 : -ENOMEM;
}

void sbx_trace_secrets(const secret_store *ss)
{
        if (ss && al_trace_on())
                al_trace_resolve_secrets(otlp_secret, (void *)ss);
}
