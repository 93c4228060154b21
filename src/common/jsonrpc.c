/* JSON-RPC 2.0 for the MCP server and the MCP client (jsonrpc.h). The
 * parser is the first code to touch what a client sends the server, so it
 * takes any bytes and never trusts a field's type. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "jsonrpc.h"

jsonrpc_kind jsonrpc_kind_of(const json_t *msg)
{
        const char *version = json_string_value(json_object_get(msg, "jsonrpc"));
        if (!json_is_object(msg) || !version || strcmp(version, "2.0") != 0)
                return JSONRPC_INVALID;
        bool id = json_object_get(msg, "id") != NULL;
        if (json_object_get(msg, "method"))
                return id ? JSONRPC_REQUEST : JSONRPC_NOTIFICATION;
        return JSONRPC_RESPONSE;
}

bool jsonrpc_is_response_to(const json_t *msg, json_int_t id)
{
        const json_t *mid = json_object_get(msg, "id");
        return !json_object_get(msg, "method") && json_is_integer(mid) &&
               json_integer_value(mid) == id;
}

json_t *jsonrpc_request(json_int_t id, const char *method, const json_t *params)
{
        json_t *m = json_pack("{s:s, s:I, s:s}", "jsonrpc", "2.0", "id", id, "method", method);
        if (m && params && json_object_set(m, "params", (json_t *)params) < 0) {
                json_decref(m);
                return NULL;
        }
        return m;
}

json_t *jsonrpc_notification(const char *method, json_t *params)
{
        json_t *m = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method", method);
        if (m && params && json_object_set(m, "params", params) < 0) {
                json_decref(m);
                m = NULL;
        }
        json_decref(params);
        return m;
}

json_t *jsonrpc_result(const json_t *id, json_t *result)
{
        json_t *jid = id ? json_incref((json_t *)id) : json_null();
        if (!result)
                return json_pack("{s:s, s:o, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", jid, "error",
                                 "code", RPC_INTERNAL_ERROR, "message", "out of memory");
        return json_pack("{s:s, s:o, s:o}", "jsonrpc", "2.0", "id", jid, "result", result);
}

json_t *jsonrpc_verror(const json_t *id, int code, json_t *data, const char *fmt, va_list ap)
{
        char msg[512];
        vsnprintf(msg, sizeof(msg), fmt, ap);
        /* The message may quote the peer's input: keep it valid UTF-8. */
        _cleanup_free_ char *clean = al_utf8_sanitize(msg, strlen(msg));
        json_t *jid = id ? json_incref((json_t *)id) : json_null();
        json_t *err = json_pack("{s:i, s:s}", "code", code, "message", clean ? clean : msg);
        if (err && data)
                json_object_set_new(err, "data", data);
        else
                json_decref(data);
        return json_pack("{s:s, s:o, s:o}", "jsonrpc", "2.0", "id", jid, "error", err);
}

json_t *jsonrpc_error(const json_t *id, int code, json_t *data, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        json_t *m = jsonrpc_verror(id, code, data, fmt, ap);
        va_end(ap);
        return m;
}

void jsonrpc_measure(const char *buf, size_t len, uint64_t *values, unsigned *depth)
{
        uint64_t n = 0;
        unsigned d = 0, max = 0;
        /* The last structural byte outside strings: a scalar starts a value
         * only right after one of "[,:" (or at the start). */
        char prev = '[';
        for (size_t i = 0; i < len; i++) {
                char c = buf[i];
                switch (c) {
                case '"':
                        n++;
                        for (i++; i < len && buf[i] != '"'; i++)
                                if (buf[i] == '\\')
                                        i++;
                        prev = '"';
                        break;
                case '[':
                case '{':
                        n++;
                        if (++d > max)
                                max = d;
                        prev = c;
                        break;
                case ']':
                case '}':
                        if (d)
                                d--;
                        prev = c;
                        break;
                case ',':
                case ':':
                        prev = c;
                        break;
                case ' ':
                case '\t':
                case '\n':
                case '\r':
                        break;
                default:
                        if (prev == '[' || prev == ',' || prev == ':')
                                n++;
                        prev = 'v';
                        break;
                }
        }
        *values = n;
        *depth = max;
}

/* An id must be a string or an integer (MCP forbids null). */
static bool id_valid(const json_t *id)
{
        return json_is_string(id) || json_is_integer(id);
}

/* Fills err with the message of a refused message and returns the JSON-RPC
 * code to answer with. */
static int refuse(airlock_error *err, int code, const char *fmt, ...) _printf_(3, 4);
static int refuse(airlock_error *err, int code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        (void)al_verror(err, AIRLOCK_ERROR_INPUT, -EINVAL, NULL, fmt, ap);
        va_end(ap);
        return code;
}

int jsonrpc_parse(const char *buf, size_t len, jsonrpc_message *ret, airlock_error *err)
{
        airlock_error_clear(err);
        memset(ret, 0, sizeof(*ret));
        json_error_t je;
        json_t *msg =
            json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &je);
        if (!msg)
                return refuse(err, RPC_PARSE_ERROR, "parse error: %s (line %d, column %d)", je.text,
                              je.line, je.column);
        ret->root = msg;
        if (json_is_array(msg))
                return refuse(err, RPC_INVALID_REQUEST,
                              "batches (JSON arrays) are not supported: send one message per line");
        if (!json_is_object(msg))
                return refuse(err, RPC_INVALID_REQUEST, "a message must be a JSON object");
        const json_t *id = json_object_get(msg, "id");
        const json_t *method = json_object_get(msg, "method");
        const json_t *params = json_object_get(msg, "params");
        const char *version = json_string_value(json_object_get(msg, "jsonrpc"));
        if (id && !id_valid(id))
                return refuse(err, RPC_INVALID_REQUEST, "id must be a string or an integer");
        ret->id = id;
        if (!version || strcmp(version, "2.0") != 0)
                return refuse(err, RPC_INVALID_REQUEST, "jsonrpc must be \"2.0\"");
        if (!method) {
                /* A response from the client: nothing to do with it. */
                if (id && (json_object_get(msg, "result") || json_object_get(msg, "error")))
                        return 0;
                return refuse(err, RPC_INVALID_REQUEST, "method is missing");
        }
        if (!json_is_string(method))
                return refuse(err, RPC_INVALID_REQUEST, "method must be a string");
        if (params && !json_is_object(params)) {
                if (!id)
                        return 0; /* a notification is never answered */
                return refuse(err, RPC_INVALID_PARAMS, "params must be an object");
        }
        ret->method = json_string_value(method);
        ret->params = params;
        return 0;
}
