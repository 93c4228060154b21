/* What a request must pass before it reaches the MCP core: unambiguous
 * framing, an allowed Origin, a valid bearer token, a protocol version this
 * server speaks, and a body whose parsed form fits the memory budget. */
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "serve_internal.h"

/* Revisions the MCP-Protocol-Version header may name. */
static const char *const http_versions[] = {"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26",
                                            "2024-11-05"};

/* What the header iteration found, for http_framing_ok. */
typedef struct framing {
        unsigned lengths, encodings;
        bool bad_name;
        bool folded;
} framing;

/* Whether the field (key, value) was read from one line "key:[ \t]*value".
 * libmicrohttpd (0.9.75) parses each line in its read buffer in place: it
 * ends the name at the colon and points the value past the blanks that
 * follow, so the value starts right there. A line folded onto it (obs-fold,
 * a next line that starts with a blank) is instead appended to the *name*
 * ("Transfer-Encoding:" CRLF " chunked" becomes the field
 * "Transfer-Encodingchunked" with an empty value), in a copy elsewhere in
 * the connection's pool or over the value: either way the value no longer
 * starts blanks away from the name's end. Both pointers are in the
 * connection's pool (at most MAX_HEADER_MEM bytes), so the bytes between
 * them may be read. */
static bool one_line(const char *key, const char *value)
{
        const char *p = key + strlen(key) + 1;
        if (value < p || (size_t)(value - p) > MAX_HEADER_MEM)
                return false;
        for (; p < value; p++)
                if (*p != ' ' && *p != '\t')
                        return false;
        return true;
}

static enum MHD_Result framing_count(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
        (void)kind;
        framing *f = cls;
        f->lengths += strcasecmp(key, "Content-Length") == 0;
        f->encodings += strcasecmp(key, "Transfer-Encoding") == 0;
        for (const char *p = key; *p; p++)
                f->bad_name |= *p == ' ' || *p == '\t';
        f->folded |= !value || !one_line(key, value);
        return MHD_YES;
}

/* False when the request's framing is ambiguous: two Content-Length
 * fields, Content-Length beside Transfer-Encoding, more than one
 * Transfer-Encoding, a field name with whitespace before its colon, or a
 * field folded over two lines (obsolete line folding, which RFC 9112 5.2
 * lets a server reject with 400, and which libmicrohttpd joins to the
 * field's name, so that a folded Transfer-Encoding escapes the count). A
 * proxy in front may read such a request's end elsewhere than
 * libmicrohttpd does (which takes the first length, keeps the connection
 * after both fields, and reads "Transfer-Encoding :" as some other field),
 * and what follows would be answered as a request of its own: request
 * smuggling. RFC 9112 (5.1, 6.1, 6.3) has the server reject these or close
 * the connection; such a request is refused with the connection closed. */
bool http_framing_ok(struct MHD_Connection *c)
{
        framing f = {0};
        MHD_get_connection_values(c, MHD_HEADER_KIND, framing_count, &f);
        return !f.bad_name && !f.folded && f.lengths <= 1 && f.encodings <= 1 &&
               !(f.lengths && f.encodings);
}

/* Origin, as the transport asks against DNS rebinding: a request without
 * one (not from a browser) or with one of --allow-origin. The server's own
 * name is not trusted by itself: a rebinding attack makes the page's origin
 * and the Host header name the same attacker's domain. */
bool http_origin_ok(http_request *rq, struct MHD_Connection *c)
{
        const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
        if (!origin)
                return true;
        for (unsigned i = 0; i < rq->srv->opt.n_origins; i++)
                if (strcmp(origin, rq->srv->opt.origins[i]) == 0)
                        return true;
        return false;
}

int http_bearer(struct MHD_Connection *c, const char **ret_tok, size_t *ret_len)
{
        const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        if (!a)
                return 0;
        if (strncasecmp(a, "Bearer ", 7) != 0)
                return -1;
        const char *tok = a + 7;
        while (*tok == ' ')
                tok++;
        size_t n = strlen(tok);
        while (n && tok[n - 1] == ' ')
                n--;
        *ret_tok = tok;
        *ret_len = n;
        return 1;
}

/* Authorization: Bearer TOKEN, when tokens are configured. Returns 1 when
 * allowed (owner filled), 0 for no token, -1 for a bad one. */
int http_authorize(http_request *rq, struct MHD_Connection *c)
{
        if (!rq->srv->opt.tokens_file)
                return 1;
        const char *tok;
        size_t n;
        int r = http_bearer(c, &tok, &n);
        if (r <= 0)
                return r;
        return http_check_token(rq->srv, tok, n, rq->owner, sizeof(rq->owner)) ? 1 : -1;
}

bool http_version_ok(struct MHD_Connection *c)
{
        const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
        if (!v)
                return true;
        for (size_t i = 0; i < ARRAY_SIZE(http_versions); i++)
                if (strcmp(v, http_versions[i]) == 0)
                        return true;
        return false;
}

/* The body is parsed: its bytes leave the budget. */
void http_release_body(http_request *rq)
{
        dynbuf_free(&rq->body);
        atomic_fetch_sub(&rq->srv->body_bytes, rq->held);
        rq->held = 0;
}

/* The parsed message is freed: its estimated size leaves the budget. */
void http_drop_message(http_request *rq, jsonrpc_message *m)
{
        json_decref(m->root);
        m->root = NULL;
        atomic_fetch_sub(&rq->srv->body_bytes, rq->parsed);
        rq->parsed = 0;
}

/* Charges what parsing the body will hold (JSONRPC_VALUE_COST per JSON
 * value, found by a pass over the bytes that builds nothing, plus the
 * bytes themselves for the strings' copies) against --max-body-total,
 * beside the body until it is released: a body of 4 MiB of "[0,0,..."
 * parses into 2 million values, some 100 MB, which the count of bytes
 * alone let 16 such requests at once take past a gigabyte. Returns 0, or
 * answers the request: 400 nested too deeply, 413 a message that could
 * never fit, 503 one that does not fit now. */
int http_charge_parse(struct MHD_Connection *c, http_request *rq, enum MHD_Result *ret)
{
        http_server *s = rq->srv;
        uint64_t values = 0;
        unsigned depth = 0;
        jsonrpc_measure(rq->body.data ? rq->body.data : "", rq->body.len, &values, &depth);
        uint64_t cost = values * JSONRPC_VALUE_COST + rq->body.len;
        if (depth > JSONRPC_MAX_DEPTH) {
                http_release_body(rq);
                http_refuse(rq, RF_BAD_REQUEST);
                snprintf(rq->method, sizeof(rq->method), "?");
                *ret = http_queue_rpc_error(c, rq, MHD_HTTP_BAD_REQUEST, RPC_INVALID_REQUEST,
                                            "JSON nested too deeply (more than 64 levels)", NULL,
                                            NULL);
                return -1;
        }
        if (cost > s->opt.max_body_total) {
                http_release_body(rq);
                http_refuse(rq, RF_BODY_TOO_LARGE);
                snprintf(rq->method, sizeof(rq->method), "?");
                *ret = http_queue_rpc_error(c, rq, MHD_HTTP_CONTENT_TOO_LARGE, RPC_INVALID_REQUEST,
                                            "request too large once parsed (too many JSON values)",
                                            NULL, NULL);
                return -1;
        }
        if (atomic_fetch_add(&s->body_bytes, cost) + cost > s->opt.max_body_total) {
                atomic_fetch_sub(&s->body_bytes, cost);
                http_release_body(rq);
                http_refuse(rq, RF_BODY_MEMORY);
                snprintf(rq->method, sizeof(rq->method), "?");
                *ret = http_queue_rpc_error(c, rq, MHD_HTTP_SERVICE_UNAVAILABLE, RPC_INTERNAL_ERROR,
                                            "too many request bodies held at once; retry later",
                                            "Retry-After", RETRY_AFTER_S);
                return -1;
        }
        rq->parsed = cost;
        return 0;
}
