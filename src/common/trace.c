/* Traces: W3C trace context, spans with a fixed attribute budget, their
 * OTLP JSON encoding and the exporter thread (trace.h, docs/tracing.md). */
#include "trace.h"

#include "base.h"
#include "curl_dl.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---- W3C trace context -------------------------------------------------- */

static int hex_value(char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        return -1; /* W3C: lower-case hex only */
}

static bool hex_bytes(const char *s, uint8_t *out, size_t n)
{
        bool nonzero = false;
        for (size_t i = 0; i < n; i++) {
                int hi = hex_value(s[2 * i]), lo = hex_value(s[2 * i + 1]);
                if (hi < 0 || lo < 0)
                        return false;
                out[i] = (uint8_t)(hi << 4 | lo);
                nonzero |= out[i] != 0;
        }
        return nonzero; /* an all-zero id is invalid */
}

/* Only printable ASCII passes on: a header value must not carry a line
 * break into an upstream request, nor bytes a collector would refuse. */
static void copy_header_value(char *dst, size_t size, const char *src)
{
        dst[0] = '\0';
        if (!src || strlen(src) >= size)
                return;
        for (const char *p = src; *p; p++)
                if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
                        return;
        memcpy(dst, src, strlen(src) + 1);
}

int al_trace_parse(const char *traceparent, const char *tracestate, const char *baggage,
                   al_trace_ctx *ctx)
{
        memset(ctx, 0, sizeof(*ctx));
        const char *s = traceparent;
        /* Version 00 is exactly 55 bytes; a later version may add fields
         * after a '-', which a reader of 00 ignores. Version ff is invalid. */
        if (!s || strlen(s) < AL_TRACEPARENT_LEN || hex_value(s[0]) < 0 || hex_value(s[1]) < 0 ||
            (s[0] == 'f' && s[1] == 'f') || s[2] != '-' || s[35] != '-' || s[52] != '-')
                return -EINVAL;
        bool v00 = s[0] == '0' && s[1] == '0';
        if (s[55] != '\0' && (v00 || s[55] != '-'))
                return -EINVAL;
        uint8_t flags[1];
        if (!hex_bytes(s + 3, ctx->trace_id, 16) || !hex_bytes(s + 36, ctx->span_id, 8) ||
            hex_value(s[53]) < 0 || hex_value(s[54]) < 0)
                return -EINVAL;
        flags[0] = (uint8_t)(hex_value(s[53]) << 4 | hex_value(s[54]));
        ctx->flags = flags[0];
        ctx->valid = true;
        copy_header_value(ctx->tracestate, sizeof(ctx->tracestate), tracestate);
        copy_header_value(ctx->baggage, sizeof(ctx->baggage), baggage);
        return 0;
}

static void hex_write(char *out, const uint8_t *b, size_t n)
{
        static const char digits[] = "0123456789abcdef";
        for (size_t i = 0; i < n; i++) {
                out[2 * i] = digits[b[i] >> 4];
                out[2 * i + 1] = digits[b[i] & 15];
        }
        out[2 * n] = '\0';
}

void al_trace_format(const al_trace_ctx *ctx, char *buf)
{
        char tid[33], sid[17];
        hex_write(tid, ctx->trace_id, 16);
        hex_write(sid, ctx->span_id, 8);
        snprintf(buf, AL_TRACEPARENT_LEN + 1, "00-%s-%s-%02x", tid, sid, ctx->flags);
}

/* ---- configuration ------------------------------------------------------ */

#define QUEUE_DEFAULT   2048
#define BATCH_DEFAULT   512
#define DELAY_DEFAULT   5000  /* OTEL_BSP_SCHEDULE_DELAY, ms */
#define TIMEOUT_DEFAULT 10000 /* OTEL_EXPORTER_OTLP_TIMEOUT, ms */
#define HEADERS_MAX     16
#define ENDPOINT_MAX    2048

typedef enum sampler {
        SAMPLE_ON,
        SAMPLE_OFF,
        SAMPLE_RATIO,
} sampler;

static struct {
        pthread_once_t once;
        bool on;
        char endpoint[ENDPOINT_MAX];
        char service[128];
        /* Under hdr_lock once a process runs: a header's value may name an
         * airlock secret (${secret:NAME}), put in by the library
         * (al_trace_resolve_secrets); until then that header is not sent. */
        char *header_keys[HEADERS_MAX];
        char *header_values[HEADERS_MAX];
        size_t n_headers;
        /* What no attribute may carry: every header's value and every secret
         * value put into one; n_scrubs is read without the lock first. */
        char *scrubs[2 * HEADERS_MAX];
        atomic_size_t n_scrubs;
        sampler root;
        bool parent_based;
        double ratio;
        unsigned queue_max, batch_max, delay_ms, timeout_ms;
        atomic_bool content, tenants;
} cfg = {.once = PTHREAD_ONCE_INIT};

static unsigned env_uint(const char *name, unsigned def, unsigned lo, unsigned hi)
{
        const char *v = getenv(name);
        char *end;
        if (!v || !*v)
                return def;
        errno = 0;
        unsigned long n = strtoul(v, &end, 10);
        if (errno || *end || n < lo || n > hi)
                return def;
        return (unsigned)n;
}

/* A value of OTEL_EXPORTER_OTLP_HEADERS is percent-encoded (W3C baggage
 * form): "%20" is a blank. */
static char *percent_decode(const char *s, size_t len)
{
        char *out = malloc(len + 1), *o = out;
        if (!out)
                return NULL;
        for (size_t i = 0; i < len; i++) {
                if (s[i] == '%' && i + 2 < len && hex_value((char)(s[i + 1] | 0x20)) >= 0 &&
                    hex_value((char)(s[i + 2] | 0x20)) >= 0) {
                        *o++ = (char)(hex_value((char)(s[i + 1] | 0x20)) << 4 |
                                      hex_value((char)(s[i + 2] | 0x20)));
                        i += 2;
                } else {
                        *o++ = s[i];
                }
        }
        *o = '\0';
        return out;
}

static void trim(const char **s, size_t *len)
{
        while (*len && (**s == ' ' || **s == '\t'))
                (*s)++, (*len)--;
        while (*len && ((*s)[*len - 1] == ' ' || (*s)[*len - 1] == '\t'))
                (*len)--;
}

/* "k1=v1,k2=v2": each pair a header of every export. A value's bytes are
 * secret to the spans: every attribute is scrubbed of them (scrub). */
static void parse_headers(const char *list)
{
        for (const char *p = list; p && *p && cfg.n_headers < HEADERS_MAX;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t)(comma - p) : strlen(p);
                const char *eq = memchr(p, '=', len);
                if (eq) {
                        const char *k = p, *v = eq + 1;
                        size_t klen = (size_t)(eq - p), vlen = len - klen - 1;
                        trim(&k, &klen);
                        trim(&v, &vlen);
                        _cleanup_free_ char *value = percent_decode(v, vlen);
                        char *key = klen ? strndup(k, klen) : NULL;
                        if (key && value && !strpbrk(value, "\r\n") && !strpbrk(key, "\r\n: ")) {
                                cfg.header_keys[cfg.n_headers] = key;
                                cfg.scrubs[atomic_load(&cfg.n_scrubs)] = strdup(value);
                                if (cfg.scrubs[atomic_load(&cfg.n_scrubs)])
                                        atomic_fetch_add(&cfg.n_scrubs, 1);
                                cfg.header_values[cfg.n_headers++] = TAKE_PTR(value);
                        } else {
                                free(key);
                        }
                }
                p = comma ? comma + 1 : p + len;
        }
}

static void parse_sampler(void)
{
        const char *s = getenv("OTEL_TRACES_SAMPLER");
        const char *arg = getenv("OTEL_TRACES_SAMPLER_ARG");
        cfg.root = SAMPLE_ON;
        cfg.parent_based = true;
        cfg.ratio = 1.0;
        if (!s || !*s || strcmp(s, "parentbased_always_on") == 0)
                return;
        if (strncmp(s, "parentbased_", 12) != 0)
                cfg.parent_based = false;
        const char *root = cfg.parent_based ? s + 12 : s;
        if (strcmp(root, "always_off") == 0) {
                cfg.root = SAMPLE_OFF;
        } else if (strcmp(root, "traceidratio") == 0) {
                char *end;
                double r = arg ? strtod(arg, &end) : 1.0;
                cfg.root = SAMPLE_RATIO;
                cfg.ratio = (arg && (*end || r < 0 || r > 1)) ? 1.0 : r;
        }
}

static void config_load(void)
{
        const char *disabled = getenv("OTEL_SDK_DISABLED");
        const char *exporter = getenv("OTEL_TRACES_EXPORTER");
        const char *traces = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        const char *base = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
        if ((disabled && strcasecmp(disabled, "true") == 0) ||
            (exporter && strcmp(exporter, "none") == 0))
                return;
        /* The signal's own endpoint is used as it is; the base one gets
         * the traces path (the OTLP exporter specification). */
        if (traces && *traces)
                snprintf(cfg.endpoint, sizeof(cfg.endpoint), "%s", traces);
        else if (base && *base)
                snprintf(cfg.endpoint, sizeof(cfg.endpoint), "%.*s/v1/traces",
                         (int)(strlen(base) - (base[strlen(base) - 1] == '/')), base);
        else
                return;
        if (strncmp(cfg.endpoint, "http://", 7) != 0 && strncmp(cfg.endpoint, "https://", 8) != 0)
                return;
        const char *svc = getenv("OTEL_SERVICE_NAME");
        snprintf(cfg.service, sizeof(cfg.service), "%s", svc && *svc ? svc : "airlock");
        parse_headers(getenv("OTEL_EXPORTER_OTLP_HEADERS"));
        parse_headers(getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS"));
        parse_sampler();
        cfg.queue_max = env_uint("OTEL_BSP_MAX_QUEUE_SIZE", QUEUE_DEFAULT, 1, 1u << 20);
        cfg.batch_max = env_uint("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", BATCH_DEFAULT, 1, 1u << 16);
        cfg.batch_max = MIN(cfg.batch_max, cfg.queue_max);
        cfg.delay_ms = env_uint("OTEL_BSP_SCHEDULE_DELAY", DELAY_DEFAULT, 1, 3600000);
        cfg.timeout_ms =
            env_uint("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                     env_uint("OTEL_EXPORTER_OTLP_TIMEOUT", TIMEOUT_DEFAULT, 1, 600000), 1, 600000);
        cfg.on = true;
}

bool al_trace_on(void)
{
        pthread_once(&cfg.once, config_load);
        return cfg.on;
}

void al_trace_set_content(bool on)
{
        atomic_store(&cfg.content, on);
}

bool al_trace_content(void)
{
        return atomic_load(&cfg.content);
}

void al_trace_set_tenants(bool on)
{
        atomic_store(&cfg.tenants, on);
}

bool al_trace_tenants(void)
{
        return atomic_load(&cfg.tenants);
}

/* ---- spans --------------------------------------------------------------- */

/* An attribute, kept as C values until the exporter's thread encodes it:
 * the caller's thread pays for a copy of a string, not for JSON. */
typedef struct span_attr {
        const char *key; /* a literal: trace.h says so */
        char type;       /* 's', 'i', 'd', 'b' */
        union {
                char *s;
                int64_t i;
                double d;
                bool b;
        } v;
} span_attr;

struct al_span {
        uint8_t trace_id[16], span_id[8];
        char *tracestate, *baggage; /* its parent's, or NULL */
        uint8_t parent_id[8];
        bool has_parent;
        al_span_kind kind;
        char name[129];
        uint64_t start_ns, end_ns;
        span_attr attrs[AL_SPAN_ATTRS_MAX];
        unsigned n_attrs, dropped_attrs;
        bool recording; /* sampled: exported when it ends */
        char *error;    /* the error status's message, or NULL */
};

static uint64_t wall_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Ids come from the kernel's generator, read 256 bytes at a time into a
 * pool of the thread's own, so that a span costs no system call of its own
 * most of the time. An all-zero id (invalid) is drawn again. */
static void random_bytes(uint8_t *b, size_t n)
{
        static _Thread_local uint8_t pool[256];
        static _Thread_local size_t left;
        for (bool zero = true; zero;) {
                if (left < n) {
                        while (getrandom(pool, sizeof(pool), 0) != (ssize_t)sizeof(pool))
                                ;
                        left = sizeof(pool);
                }
                memcpy(b, pool + sizeof(pool) - left, n);
                memset(pool + sizeof(pool) - left, 0, n); /* used once */
                left -= n;
                zero = true;
                for (size_t i = 0; i < n && zero; i++)
                        zero = b[i] == 0;
        }
}

static bool sampled(const al_trace_ctx *parent, const uint8_t *trace_id)
{
        if (parent && parent->valid && cfg.parent_based)
                return parent->flags & 1;
        if (cfg.root == SAMPLE_OFF)
                return false;
        if (cfg.root == SAMPLE_ON || cfg.ratio >= 1.0)
                return true;
        /* TraceIdRatioBased: the trace id's lower 8 bytes against the ratio,
         * so that every service sampling one trace agrees. */
        uint64_t low = 0;
        for (int i = 8; i < 16; i++)
                low = low << 8 | trace_id[i];
        return (double)(low >> 11) < cfg.ratio * (double)(1ull << 53);
}

/* The span's name, valid UTF-8 and cut to its cap between characters: the
 * exporter cannot encode a name that is not UTF-8 and would drop the span,
 * and a client or a guest chooses much of a name (a tool's, a method), so
 * that a name cut inside a character would hide its call from the trace. */
static void name_set(al_span *s, const char *name)
{
        size_t n = strlen(name);
        _cleanup_free_ char *clean = al_utf8_valid(name, n) ? NULL : al_utf8_sanitize(name, n);
        const char *v = clean ? clean : name;
        n = strlen(v);
        if (n >= sizeof(s->name)) {
                n = sizeof(s->name) - 1;
                while (n && ((unsigned char)v[n] & 0xc0) == 0x80)
                        n--;
        }
        memcpy(s->name, v, n);
        s->name[n] = '\0';
}

/* Set while the calling thread does the process's own work (a server's
 * warm-up run), which is no caller's and so no trace. */
static _Thread_local bool untraced;

bool al_trace_untraced(bool on)
{
        bool was = untraced;
        untraced = on;
        return was;
}

/* The spans allocated and not yet freed (al_trace_spans_held). */
static atomic_uint_fast64_t spans_held;

uint64_t al_trace_spans_held(void)
{
        return atomic_load(&spans_held);
}

al_span *al_span_start(const char *name, al_span_kind kind, const al_trace_ctx *parent)
{
        if (!al_trace_on() || untraced)
                return NULL;
        al_trace_ctx root;
        if (!(parent && parent->valid)) {
                memset(&root, 0, sizeof(root));
                random_bytes(root.trace_id, 16);
                parent = NULL;
        }
        const uint8_t *tid = parent ? parent->trace_id : root.trace_id;
        /* A span the sampler drops is still made, not recorded: its
         * context carries the unsampled flag to its children and to the
         * upstream servers, so that they drop theirs too (parent-based
         * sampling), rather than starting traces of their own. */
        bool recording = sampled(parent, tid);
        al_span *s = malloc(sizeof(*s));
        if (!s)
                return NULL;
        atomic_fetch_add(&spans_held, 1);
        s->n_attrs = s->dropped_attrs = 0;
        s->recording = recording;
        s->error = NULL;
        s->tracestate = s->baggage = NULL;
        s->has_parent = parent != NULL;
        memcpy(s->trace_id, parent ? parent->trace_id : root.trace_id, 16);
        if (parent) {
                memcpy(s->parent_id, parent->span_id, 8);
                if (parent->tracestate[0])
                        s->tracestate = strdup(parent->tracestate);
                if (parent->baggage[0])
                        s->baggage = strdup(parent->baggage);
        }
        random_bytes(s->span_id, 8);
        s->kind = kind;
        name_set(s, name);
        s->start_ns = wall_ns();
        return s;
}

bool al_span_context(const al_span *span, al_trace_ctx *ret)
{
        if (!span)
                return false;
        memcpy(ret->trace_id, span->trace_id, 16);
        memcpy(ret->span_id, span->span_id, 8);
        ret->flags = span->recording ? 1 : 0;
        ret->valid = true;
        snprintf(ret->tracestate, sizeof(ret->tracestate), "%s",
                 span->tracestate ? span->tracestate : "");
        snprintf(ret->baggage, sizeof(ret->baggage), "%s", span->baggage ? span->baggage : "");
        return true;
}

/* Replaces every occurrence of an OTLP header's value (an API key, say)
 * by "[secret]", so that no exported byte carries it. */
static pthread_mutex_t hdr_lock = PTHREAD_MUTEX_INITIALIZER;

static char *scrub(const char *value, size_t len)
{
        _cleanup_free_ char *out = strndup(value, len);
        pthread_mutex_lock(&hdr_lock);
        for (size_t i = 0; out && i < atomic_load(&cfg.n_scrubs); i++) {
                const char *secret = cfg.scrubs[i];
                size_t slen = strlen(secret);
                char *hit, *next = NULL;
                while (out && slen >= 4 && (hit = strstr(out, secret))) {
                        if (asprintf(&next, "%.*s[secret]%s", (int)(hit - out), out, hit + slen) <
                            0)
                                next = NULL;
                        free(out);
                        out = next;
                }
        }
        pthread_mutex_unlock(&hdr_lock);
        return TAKE_PTR(out);
}

/* Puts the value of each ${secret:NAME} of one header in its place; false
 * when a secret was refused (the header stays unsent). Holds hdr_lock. */
static bool resolve_header(size_t i, al_trace_secret_fn fn, void *arg)
{
        char *p;
        while ((p = strstr(cfg.header_values[i], "${secret:"))) {
                char *end = strchr(p, '}');
                if (!end)
                        return false;
                _cleanup_free_ char *name = strndup(p + 9, (size_t)(end - p - 9));
                _cleanup_free_ char *value = NULL, *next = NULL;
                if (!name || fn(arg, name, cfg.endpoint, &value) < 0 || !value ||
                    strpbrk(value, "\r\n") ||
                    asprintf(&next, "%.*s%s%s", (int)(p - cfg.header_values[i]),
                             cfg.header_values[i], value, end + 1) < 0)
                        return false;
                free(cfg.header_values[i]);
                cfg.header_values[i] = TAKE_PTR(next);
                size_t n = atomic_load(&cfg.n_scrubs);
                if (n < ARRAY_SIZE(cfg.scrubs) && (cfg.scrubs[n] = strdup(value)))
                        atomic_store(&cfg.n_scrubs, n + 1);
                explicit_bzero(value, strlen(value));
        }
        return true;
}

void al_trace_resolve_secrets(al_trace_secret_fn fn, void *arg)
{
        if (!al_trace_on())
                return;
        pthread_mutex_lock(&hdr_lock);
        for (size_t i = 0; i < cfg.n_headers; i++)
                (void)resolve_header(i, fn, arg);
        pthread_mutex_unlock(&hdr_lock);
}

static span_attr *attr_add(al_span *span, const char *key, char type)
{
        if (!span || !span->recording)
                return NULL;
        if (span->n_attrs >= AL_SPAN_ATTRS_MAX) {
                span->dropped_attrs++;
                return NULL;
        }
        span_attr *a = &span->attrs[span->n_attrs++];
        a->key = key;
        a->type = type;
        return a;
}

/* A string cut to cap bytes at a UTF-8 boundary, made valid UTF-8 and
 * scrubbed of the headers' secrets; malloc'd, or NULL. */
static char *string_copy(const char *value, size_t len, size_t cap)
{
        if (len > cap) {
                len = cap;
                while (len && ((unsigned char)value[len] & 0xc0) == 0x80)
                        len--;
        }
        _cleanup_free_ char *clean =
            al_utf8_valid(value, len) ? strndup(value, len) : al_utf8_sanitize_n(value, len, &len);
        if (!clean || !atomic_load(&cfg.n_scrubs))
                return TAKE_PTR(clean);
        return scrub(clean, strlen(clean));
}

static void set_string(al_span *span, const char *key, const char *value, size_t len, size_t cap)
{
        if (!span->recording)
                return;
        char *copy = string_copy(value, len, cap);
        span_attr *a = copy ? attr_add(span, key, 's') : NULL;
        if (a)
                a->v.s = copy;
        else
                free(copy);
}

void al_span_set_str(al_span *span, const char *key, const char *value)
{
        if (span && value)
                set_string(span, key, value, strlen(value), AL_SPAN_VALUE_MAX);
}

void al_span_set_content(al_span *span, const char *key, const char *value, size_t len)
{
        if (span && value && al_trace_content())
                set_string(span, key, value, len, AL_SPAN_CONTENT_MAX);
}

void al_span_set_int(al_span *span, const char *key, int64_t value)
{
        span_attr *a = attr_add(span, key, 'i');
        if (a)
                a->v.i = value;
}

void al_span_set_double(al_span *span, const char *key, double value)
{
        span_attr *a = attr_add(span, key, 'd');
        if (a)
                a->v.d = value;
}

void al_span_set_bool(al_span *span, const char *key, bool value)
{
        span_attr *a = attr_add(span, key, 'b');
        if (a)
                a->v.b = value;
}

void al_span_error(al_span *span, const char *message)
{
        if (!span || !span->recording)
                return;
        free(span->error);
        const char *m = message ? message : "";
        span->error = string_copy(m, strlen(m), 256);
}

void al_span_rename(al_span *span, const char *name)
{
        if (span)
                name_set(span, name);
}

static _Thread_local al_span *current;

void al_trace_inject_meta(json_t *params)
{
        if (!current || !json_is_object(params))
                return;
        char tp[AL_TRACEPARENT_LEN + 1];
        al_trace_ctx ctx;
        al_span_context(current, &ctx);
        al_trace_format(&ctx, tp);
        json_t *meta = json_object_get(params, "_meta");
        if (!json_is_object(meta)) {
                meta = json_object();
                if (!meta || json_object_set_new(params, "_meta", meta) < 0)
                        return;
        }
        json_object_set_new(meta, "traceparent", json_string(tp));
        if (current->tracestate)
                json_object_set_new(meta, "tracestate", json_string(current->tracestate));
        if (current->baggage)
                json_object_set_new(meta, "baggage", json_string(current->baggage));
}

al_span *al_span_push(al_span *span)
{
        al_span *previous = current;
        current = span;
        return previous;
}

void al_span_pop(al_span *previous)
{
        current = previous;
}

al_span *al_span_current(void)
{
        return current;
}

static void span_free(al_span *s)
{
        if (!s)
                return;
        atomic_fetch_sub(&spans_held, 1);
        for (unsigned i = 0; i < s->n_attrs; i++)
                if (s->attrs[i].type == 's')
                        free(s->attrs[i].v.s);
        free(s->error);
        free(s->tracestate);
        free(s->baggage);
        free(s);
}

static json_t *attr_encode(const span_attr *a)
{
        char buf[24];
        json_t *v;
        switch (a->type) {
        case 's':
                v = json_pack("{s:s}", "stringValue", a->v.s);
                break;
        case 'i':
                /* OTLP JSON writes a 64-bit integer as a decimal string. */
                snprintf(buf, sizeof(buf), "%lld", (long long)a->v.i);
                v = json_pack("{s:s}", "intValue", buf);
                break;
        case 'd':
                v = json_pack("{s:f}", "doubleValue", a->v.d);
                break;
        default:
                v = json_pack("{s:b}", "boolValue", a->v.b);
                break;
        }
        return v ? json_pack("{s:s, s:o}", "key", a->key, "value", v) : NULL;
}

/* The span as an OTLP JSON Span: ids in hex, times in nanoseconds as
 * decimal strings, the kind and the status code as numbers. On the
 * exporter's thread. */
static json_t *span_encode(const al_span *s)
{
        char tid[33], sid[17], pid[17], start[24], end[24];
        hex_write(tid, s->trace_id, 16);
        hex_write(sid, s->span_id, 8);
        hex_write(pid, s->parent_id, 8);
        snprintf(start, sizeof(start), "%llu", (unsigned long long)s->start_ns);
        snprintf(end, sizeof(end), "%llu", (unsigned long long)s->end_ns);
        json_t *attrs = json_array();
        for (unsigned i = 0; attrs && i < s->n_attrs; i++)
                json_array_append_new(attrs, attr_encode(&s->attrs[i]));
        json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:s, s:s, s:o, s:i}", "traceId", tid, "spanId",
                              sid, "name", s->name, "kind", (int)s->kind, "startTimeUnixNano",
                              start, "endTimeUnixNano", end, "attributes", attrs,
                              "droppedAttributesCount", (int)s->dropped_attrs);
        if (!o)
                return NULL;
        if (s->has_parent)
                json_object_set_new(o, "parentSpanId", json_string(pid));
        if (s->tracestate)
                json_object_set_new(o, "traceState", json_string(s->tracestate));
        if (s->error)
                json_object_set_new(o, "status",
                                    json_pack("{s:i, s:s}", "code", 2, "message", s->error));
        return o;
}

static void queue_put(al_span *span);

void al_span_end(al_span *span)
{
        if (!span)
                return;
        if (!span->recording) {
                span_free(span);
                return;
        }
        span->end_ns = wall_ns();
        queue_put(span);
}

/* ---- the exporter --------------------------------------------------------- */

/* libcurl is opened when the first batch goes out (curl_dl.h says why it
 * is not linked). */

static struct {
        pthread_mutex_t lock;
        pthread_cond_t wake, done;
        al_span **spans; /* a ring of queue_max */
        size_t head, n;
        bool started, stopping, exited;
        uint64_t abort_at; /* CLOCK_MONOTONIC ns: a transfer past it is cut */
        atomic_uint_fast64_t dropped;
        uint64_t noted; /* dropped at the last log line */
        uint64_t noted_at;
} q = {.lock = PTHREAD_MUTEX_INITIALIZER,
       .wake = PTHREAD_COND_INITIALIZER,
       .done = PTHREAD_COND_INITIALIZER};

uint64_t al_trace_dropped(void)
{
        return atomic_load(&q.dropped);
}

static void *exporter_main(void *arg);

static void exit_flush(void)
{
        al_trace_shutdown(2000);
}

/* A fork has no exporter thread: the child (a program's own fork, Python's
 * multiprocessing) exports nothing, and its exit waits for nothing. The
 * queue's lock is held across the fork, so that the child's copy of it is
 * in a known state. */
static void fork_prepare(void)
{
        pthread_mutex_lock(&q.lock);
}

static void fork_parent(void)
{
        pthread_mutex_unlock(&q.lock);
}

/* Frees what the queue holds, each span counted as dropped when drop is
 * true. Caller holds the lock. */
static void queue_clear_locked(bool drop)
{
        if (drop)
                atomic_fetch_add(&q.dropped, q.n);
        for (; q.n; q.n--, q.head = (q.head + 1) % cfg.queue_max)
                span_free(q.spans[q.head]);
}

static void fork_child(void)
{
        q.stopping = true;
        q.started = false;
        /* The parent's spans are the parent's to export: the child's
         * copies are freed, not exported nor counted. */
        queue_clear_locked(false);
        pthread_mutex_unlock(&q.lock);
}

static void queue_put(al_span *span)
{
        pthread_mutex_lock(&q.lock);
        if (!q.started && !q.stopping) {
                q.spans = calloc(cfg.queue_max, sizeof(*q.spans));
                pthread_t t;
                pthread_attr_t a;
                pthread_attr_init(&a);
                pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
                q.started = q.spans && pthread_create(&t, &a, exporter_main, NULL) == 0;
                pthread_attr_destroy(&a);
                /* A program that never calls al_trace_shutdown (one using
                 * the library: the Python package) still gets its spans
                 * out at exit, within the same bound as the command line. */
                if (q.started && pthread_atfork(fork_prepare, fork_parent, fork_child) == 0)
                        atexit(exit_flush);
                if (!q.started) {
                        free(q.spans);
                        q.spans = NULL;
                        q.stopping = true; /* no exporter: every span is a drop */
                }
        }
        if (q.stopping || q.n >= cfg.queue_max) {
                pthread_mutex_unlock(&q.lock);
                atomic_fetch_add(&q.dropped, 1);
                span_free(span);
                return;
        }
        q.spans[(q.head + q.n++) % cfg.queue_max] = span;
        if (q.n >= cfg.batch_max)
                pthread_cond_signal(&q.wake);
        pthread_mutex_unlock(&q.lock);
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
        uint64_t abort_at = __atomic_load_n(&q.abort_at, __ATOMIC_RELAXED);
        return abort_at && al_now_ns() > abort_at; /* non-zero cuts the transfer */
}

static size_t on_discard(char *data, size_t size, size_t nmemb, void *arg)
{
        return size * nmemb;
}

/* One POST of an ExportTraceServiceRequest; true when the collector took it
 * (2xx). A partial success counts as taken. */
static bool post(const char *body, size_t len)
{
        if (!al_curl_load(NULL))
                return false;
        CURL *h = al_cu->easy_init();
        if (!h)
                return false;
        struct curl_slist *hl = al_cu->slist_append(NULL, "Content-Type: application/json");
        pthread_mutex_lock(&hdr_lock);
        for (size_t i = 0; hl && i < cfg.n_headers; i++) {
                _cleanup_free_ char *line = NULL;
                /* A secret not put in (no library asked, or its targets
                 * refused the endpoint): the header is not sent. */
                if (!strstr(cfg.header_values[i], "${secret:") &&
                    asprintf(&line, "%s: %s", cfg.header_keys[i], cfg.header_values[i]) >= 0)
                        hl = al_cu->slist_append(hl, line);
        }
        pthread_mutex_unlock(&hdr_lock);
        al_cu->easy_setopt(h, CURLOPT_URL, cfg.endpoint);
        al_cu->easy_setopt(h, CURLOPT_HTTPHEADER, hl);
        al_cu->easy_setopt(h, CURLOPT_POSTFIELDS, body);
        al_cu->easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        al_cu->easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)cfg.timeout_ms);
        al_cu->easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        al_cu->easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        al_cu->easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        al_cu->easy_setopt(h, CURLOPT_WRITEFUNCTION, on_discard);
        al_cu->easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        long code = 0;
        CURLcode c = al_cu->easy_perform(h);
        if (c == CURLE_OK)
                al_cu->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        al_cu->easy_cleanup(h);
        al_cu->slist_free_all(hl);
        return c == CURLE_OK && code >= 200 && code < 300;
}

static json_t *resource(void)
{
        return json_pack("{s:[{s:s, s:{s:s}}, {s:s, s:{s:s}}, {s:s, s:{s:s}}]}", "attributes",
                         "key", "service.name", "value", "stringValue", cfg.service, "key",
                         "telemetry.sdk.name", "value", "stringValue", "airlock", "key",
                         "telemetry.sdk.language", "value", "stringValue", "c");
}

/* Encodes the batch and sends it; counts it as dropped when the collector
 * did not take it. Called without the lock, so that no caller's thread
 * waits while spans are encoded. Frees the spans. */
static void export_batch(al_span **taken, size_t n)
{
        json_t *spans = json_array();
        for (size_t i = 0; i < n; i++) {
                json_t *enc = spans ? span_encode(taken[i]) : NULL;
                span_free(taken[i]);
                if (!enc || json_array_append_new(spans, enc) < 0)
                        atomic_fetch_add(&q.dropped, 1);
        }
        size_t sent = json_array_size(spans);
        _cleanup_json_ json_t *req = json_pack(
            "{s:[{s:o, s:[{s:{s:s, s:s}, s:o}]}]}", "resourceSpans", "resource", resource(),
            "scopeSpans", "scope", "name", "airlock", "version", AIRLOCK_VERSION, "spans", spans);
        _cleanup_free_ char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
        if (!body || !post(body, strlen(body)))
                atomic_fetch_add(&q.dropped, sent);
}

/* Takes up to a batch off the queue into taken. Caller holds the lock. */
static size_t queue_take(al_span **taken)
{
        size_t n = 0;
        while (q.n && n < cfg.batch_max) {
                taken[n++] = q.spans[q.head];
                q.head = (q.head + 1) % cfg.queue_max;
                q.n--;
        }
        return n;
}

static void *exporter_main(void *arg)
{
        al_span **taken = calloc(cfg.batch_max, sizeof(*taken));
        pthread_mutex_lock(&q.lock);
        if (!taken) {
                q.stopping = true; /* out of memory: every span is a drop */
                queue_clear_locked(true);
        }
        for (;;) {
                if (!q.stopping && q.n < cfg.batch_max) {
                        struct timespec ts;
                        clock_gettime(CLOCK_REALTIME, &ts);
                        uint64_t at = (uint64_t)ts.tv_nsec + (uint64_t)cfg.delay_ms * 1000000ull;
                        ts.tv_sec += (time_t)(at / 1000000000ull);
                        ts.tv_nsec = (long)(at % 1000000000ull);
                        pthread_cond_timedwait(&q.wake, &q.lock, &ts);
                }
                if (q.stopping && !q.n)
                        break;
                if (!q.n)
                        continue;
                size_t n = queue_take(taken);
                pthread_mutex_unlock(&q.lock);
                export_batch(taken, n);
                pthread_mutex_lock(&q.lock);
        }
        q.exited = true;
        pthread_cond_broadcast(&q.done);
        pthread_mutex_unlock(&q.lock);
        free(taken);
        return NULL;
}

void al_trace_shutdown(unsigned timeout_ms)
{
        if (!al_trace_on())
                return;
        pthread_mutex_lock(&q.lock);
        if (q.stopping) { /* once: a second call has nothing to wait for */
                pthread_mutex_unlock(&q.lock);
                return;
        }
        q.stopping = true;
        uint64_t deadline = al_now_ns() + (uint64_t)timeout_ms * 1000000ull;
        __atomic_store_n(&q.abort_at, deadline, __ATOMIC_RELAXED);
        pthread_cond_signal(&q.wake);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t at = (uint64_t)ts.tv_nsec + (uint64_t)timeout_ms * 1000000ull;
        ts.tv_sec += (time_t)(at / 1000000000ull);
        ts.tv_nsec = (long)(at % 1000000000ull);
        while (q.started && !q.exited)
                if (pthread_cond_timedwait(&q.done, &q.lock, &ts) == ETIMEDOUT)
                        break;
        /* What the exporter could not send in time is dropped, and freed
         * here: the process exits without waiting longer, and the exporter,
         * once its transfer is cut, finds the queue empty and ends. */
        if (!q.exited)
                queue_clear_locked(true);
        pthread_mutex_unlock(&q.lock);
}

bool al_trace_drop_note(char *buf, size_t size, unsigned interval_s)
{
        uint64_t now = al_now_ns(), dropped = al_trace_dropped();
        bool note = false;
        if (!dropped)
                return false; /* the usual case: no lock taken */
        pthread_mutex_lock(&q.lock);
        if (dropped > q.noted &&
            (!q.noted_at || now - q.noted_at >= (uint64_t)interval_s * 1000000000ull)) {
                snprintf(buf, size,
                         "tracing: %llu spans dropped (%llu in all): the collector at %s is "
                         "slow, down or refusing them, or the queue of %u is full",
                         (unsigned long long)(dropped - q.noted), (unsigned long long)dropped,
                         cfg.endpoint, cfg.queue_max);
                q.noted = dropped;
                q.noted_at = now;
                note = true;
        }
        pthread_mutex_unlock(&q.lock);
        return note;
}
