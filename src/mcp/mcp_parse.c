/* The JSON-RPC envelope of `airlock mcp`: the first code to touch what a
 * client sends, so it takes any bytes and never trusts a field's type. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "mcp.h"

void mcp_json_measure(const char *buf, size_t len, uint64_t *values, unsigned *depth)
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

int mcp_parse_message(const char *line, size_t len, mcp_message *ret, char *why, size_t why_len)
{
        memset(ret, 0, sizeof(*ret));
        json_error_t je;
        json_t *msg =
            json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &je);
        if (!msg) {
                snprintf(why, why_len, "parse error: %s (line %d, column %d)", je.text, je.line,
                         je.column);
                return RPC_PARSE_ERROR;
        }
        ret->root = msg;
        if (json_is_array(msg)) {
                snprintf(why, why_len,
                         "batches (JSON arrays) are not supported: send one message per line");
                return RPC_INVALID_REQUEST;
        }
        if (!json_is_object(msg)) {
                snprintf(why, why_len, "a message must be a JSON object");
                return RPC_INVALID_REQUEST;
        }
        const json_t *id = json_object_get(msg, "id");
        const json_t *method = json_object_get(msg, "method");
        const json_t *params = json_object_get(msg, "params");
        const char *version = json_string_value(json_object_get(msg, "jsonrpc"));
        if (id && !id_valid(id)) {
                snprintf(why, why_len, "id must be a string or an integer");
                return RPC_INVALID_REQUEST;
        }
        ret->id = id;
        if (!version || strcmp(version, "2.0") != 0) {
                snprintf(why, why_len, "jsonrpc must be \"2.0\"");
                return RPC_INVALID_REQUEST;
        }
        if (!method) {
                /* A response from the client: nothing to do with it. */
                if (id && (json_object_get(msg, "result") || json_object_get(msg, "error")))
                        return 0;
                snprintf(why, why_len, "method is missing");
                return RPC_INVALID_REQUEST;
        }
        if (!json_is_string(method)) {
                snprintf(why, why_len, "method must be a string");
                return RPC_INVALID_REQUEST;
        }
        if (params && !json_is_object(params)) {
                if (!id)
                        return 0; /* a notification is never answered */
                snprintf(why, why_len, "params must be an object");
                return RPC_INVALID_PARAMS;
        }
        ret->method = json_string_value(method);
        ret->params = params;
        return 0;
}
