/* Traces: OpenTelemetry spans exported over OTLP/HTTP with a JSON body
 * (docs/tracing.md). One tracer per process, configured from the standard
 * OTEL_* environment variables at its first use; without an endpoint it is
 * off and every call below is a branch on a NULL span (al_span_start
 * returns NULL, the others accept NULL and do nothing).
 *
 * Spans are ended on the caller's thread into a bounded queue, which a
 * thread of the tracer's own batches to the collector with libcurl. A run
 * never waits on an export: a full queue, or a collector that is slow,
 * down or answering an error, drops spans and counts them
 * (al_trace_dropped). The library, the command line and the MCP server
 * share this base (src/common), so one tracer serves them all. */
#ifndef AIRLOCK_TRACE_H
#define AIRLOCK_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* W3C trace context: traceparent's ids and flags, and tracestate and
 * baggage as they came, within their caps (longer ones are dropped, as
 * the W3C specifications allow). */
#define AL_TRACESTATE_MAX  512
#define AL_BAGGAGE_MAX     2048
#define AL_TRACEPARENT_LEN 55 /* "00-" 32 hex "-" 16 hex "-" 2 hex */

typedef struct al_trace_ctx {
        uint8_t trace_id[16];
        uint8_t span_id[8];
        uint8_t flags; /* bit 0: sampled */
        bool valid;
        char tracestate[AL_TRACESTATE_MAX + 1];
        char baggage[AL_BAGGAGE_MAX + 1];
} al_trace_ctx;

/* Parses a W3C traceparent (and its tracestate and baggage, each may be
 * NULL). A missing or malformed traceparent leaves ctx->valid false
 * (-EINVAL), so that the span started under it begins a new trace. */
int al_trace_parse(const char *traceparent, const char *tracestate, const char *baggage,
                   al_trace_ctx *ctx);
/* Writes ctx's traceparent into buf (AL_TRACEPARENT_LEN + 1 bytes). */
void al_trace_format(const al_trace_ctx *ctx, char *buf);

typedef enum al_span_kind {
        AL_SPAN_INTERNAL = 1,
        AL_SPAN_SERVER = 2,
        AL_SPAN_CLIENT = 3,
} al_span_kind;

/* Each span holds at most this many attributes (more are counted as
 * dropped, as OTLP's droppedAttributesCount says), a string value at most
 * AL_SPAN_VALUE_MAX bytes (cut at a UTF-8 boundary) unless the content
 * option raised it, and its status message at most 256 bytes. */
#define AL_SPAN_ATTRS_MAX   32
#define AL_SPAN_VALUE_MAX   256
#define AL_SPAN_CONTENT_MAX 4096

typedef struct al_span al_span;

/* True when the tracer is configured: one load after the first call. */
bool al_trace_on(void);
/* Starts a span under parent (NULL or invalid: a new trace), or returns
 * NULL when tracing is off or out of memory. A span the sampler drops is
 * not recorded (its setters do nothing, its end exports nothing) but
 * carries its unsampled context to its children. The name is copied (at
 * most 128 bytes). */
al_span *al_span_start(const char *name, al_span_kind kind, const al_trace_ctx *parent);
/* The setters below keep the key's pointer, not a copy: a key is a string
 * literal (an attribute's name of the conventions). A string value is
 * copied, cut, made valid UTF-8 and scrubbed. */
/* The context a child of span (or whatever calls out on its behalf)
 * carries: span's ids, its parent's tracestate and baggage. False for NULL. */
bool al_span_context(const al_span *span, al_trace_ctx *ret);
void al_span_set_str(al_span *span, const char *key, const char *value);
void al_span_set_int(al_span *span, const char *key, int64_t value);
void al_span_set_double(al_span *span, const char *key, double value);
void al_span_set_bool(al_span *span, const char *key, bool value);
/* A content attribute (code, arguments): set only when the content option
 * is on (al_trace_set_content), cut at AL_SPAN_CONTENT_MAX. The caller
 * scrubs it of its run's secrets first. */
void al_span_set_content(al_span *span, const char *key, const char *value, size_t len);
/* Sets the error status with a message (cut at 256 bytes). */
void al_span_error(al_span *span, const char *message);
/* Ends the span and queues it for export (or drops it: the queue is
 * full), and frees it. */
void al_span_end(al_span *span);

/* The span of what the calling thread runs now (a run's, for the host
 * tool calls made during it), or NULL: al_span_push sets it and returns
 * the one it replaced, which al_span_pop puts back. */
al_span *al_span_push(al_span *span);
void al_span_pop(al_span *previous);
al_span *al_span_current(void);

/* While on, no span starts on the calling thread (al_span_start returns
 * NULL): for the process's own work, a server's warm-up run, which would
 * otherwise be a trace of its own. Returns the previous setting, which the
 * caller puts back. */
bool al_trace_untraced(bool on);
/* Puts the context of the calling thread's current span (al_span_current)
 * into a JSON-RPC request's params as _meta.traceparent, tracestate and
 * baggage, the MCP convention, so that a traced server joins the trace.
 * Nothing without a current span. */
struct json_t;
void al_trace_inject_meta(struct json_t *params);
/* Renames a span (a name known only once its work is done). */
void al_span_rename(al_span *span, const char *name);

/* OTEL_EXPORTER_OTLP_HEADERS may name an airlock secret, ${secret:NAME}:
 * fn(arg, NAME, endpoint, &value) gives its malloc'd value when the
 * secret's targets allow the endpoint (or fails, and the header is not
 * sent). The library calls this with each new sandbox's secrets, until
 * every header has its value; every value put in is scrubbed from every
 * attribute. */
typedef int (*al_trace_secret_fn)(void *arg, const char *name, const char *url, char **ret);
void al_trace_resolve_secrets(al_trace_secret_fn fn, void *arg);

/* Options of the whole process: export code and arguments (cut and
 * scrubbed); put tenants' names in. Both off by default. */
void al_trace_set_content(bool on);
bool al_trace_content(void);
void al_trace_set_tenants(bool on);
bool al_trace_tenants(void);

/* Spans dropped so far (a full queue, a failed export). */
uint64_t al_trace_dropped(void);
/* Spans allocated and not yet freed: those callers hold, those queued and
 * the batch the exporter is sending. After al_trace_shutdown, at most that
 * batch (which the exporter frees when its transfer is cut). */
uint64_t al_trace_spans_held(void);
/* Exports what is queued and stops the exporter, waiting at most
 * timeout_ms; whatever is left then is dropped and counted. For the
 * process's exit. Idempotent. */
void al_trace_shutdown(unsigned timeout_ms);
/* Tells whether a drop happened since the last call that printed, at most
 * once per interval: fills buf with a log line and returns true then. */
bool al_trace_drop_note(char *buf, size_t size, unsigned interval_s);

#endif
