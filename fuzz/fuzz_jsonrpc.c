/* Fuzzes the JSON-RPC layer (src/common/jsonrpc.c) that the MCP server and
 * the library's MCP client share, with whole input lines: any bytes must
 * give either a valid message (a method string, params an object or absent,
 * an id that is a string or an integer, of the kind jsonrpc_kind_of says)
 * or an error code from JSON-RPC's table with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jsonrpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The values of a parsed document (object keys included) and its depth of
 * arrays and objects. */
static uint64_t count_values(const json_t *v, unsigned level, unsigned *depth)
{
        uint64_t n = 1;
        if (json_is_array(v) || json_is_object(v)) {
                if (level + 1 > *depth)
                        *depth = level + 1;
        }
        if (json_is_array(v)) {
                size_t i;
                const json_t *e;
                json_array_foreach ((json_t *)v, i, e)
                        n += count_values(e, level + 1, depth);
        } else if (json_is_object(v)) {
                const char *k;
                const json_t *e;
                json_object_foreach ((json_t *)v, k, e)
                        n += 1 + count_values(e, level + 1, depth);
        }
        return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        jsonrpc_message m;
        airlock_error err;
        int code = jsonrpc_parse((const char *)data, size, &m, &err);
        if (code == 0) {
                if (m.method && !m.root)
                        abort();
                if (m.params && !json_is_object(m.params))
                        abort();
                jsonrpc_kind kind = jsonrpc_kind_of(m.root);
                if (m.method && kind != (m.id ? JSONRPC_REQUEST : JSONRPC_NOTIFICATION))
                        abort();
                if (!m.method && m.id && kind != JSONRPC_RESPONSE)
                        abort();
        } else {
                if (code != RPC_PARSE_ERROR && code != RPC_INVALID_REQUEST &&
                    code != RPC_INVALID_PARAMS)
                        abort();
                if (!err.message[0])
                        abort();
        }
        if (m.id && !json_is_string(m.id) && !json_is_integer(m.id))
                abort();
        /* The measure that bounds what parsing costs (airlock serve charges
         * it before parsing) never counts fewer values or levels than the
         * parse made. */
        if (m.root) {
                uint64_t values = 0;
                unsigned depth = 0, real_depth = 0;
                jsonrpc_measure((const char *)data, size, &values, &depth);
                if (count_values(m.root, 0, &real_depth) > values || real_depth > depth)
                        abort();
        }
        json_decref(m.root);
        return 0;
}
