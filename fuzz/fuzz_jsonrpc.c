/* Fuzzes the MCP server's JSON-RPC envelope parser with whole input lines:
 * any bytes must give either a valid message (a method string, params an
 * object or absent, an id that is a string or an integer) or an error code
 * from JSON-RPC's table with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        mcp_message m;
        char why[256] = "";
        int code = mcp_parse_message((const char *)data, size, &m, why, sizeof(why));
        if (code == 0) {
                if (m.method && !m.root)
                        abort();
                if (m.params && !json_is_object(m.params))
                        abort();
        } else {
                if (code != RPC_PARSE_ERROR && code != RPC_INVALID_REQUEST &&
                    code != RPC_INVALID_PARAMS)
                        abort();
                if (!why[0])
                        abort();
        }
        if (m.id && !json_is_string(m.id) && !json_is_integer(m.id))
                abort();
        json_decref(m.root);
        return 0;
}
