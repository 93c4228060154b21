/* Pieces of `airlock mcp` shared between its files: the tool entry served by
 * tools/list and the conversion of a run's result into an MCP tool result. */
#ifndef AIRLOCK_CLI_MCP_H
#define AIRLOCK_CLI_MCP_H

#include <jansson.h>

#include "airlock.h"

/* The JSON Schema of structuredContent: the result JSON of docs/design.md. */
json_t *mcp_output_schema(void);

/* The CallToolResult of a finished run: content items in the order of the
 * result's "contents" (stdout text, an image item per image file, an
 * embedded resource per other file, stderr or the error), a text item naming
 * what /output refused, isError when the run failed, and the result JSON as
 * structuredContent. NULL when out of memory or the result JSON is unusable. */
json_t *mcp_tool_result(const airlock_result *res);

/* A CallToolResult that reports a failure to run at all (isError, one text
 * item, no structuredContent). */
json_t *mcp_tool_error(const char *message);

/* "file:///output/a%20b.csv" for "/output/a b.csv": every byte outside the
 * unreserved set and '/' is percent-encoded. Malloc'd. */
char *mcp_file_uri(const char *path);

/* JSON-RPC error codes the server answers with. */
enum {
        RPC_PARSE_ERROR = -32700,
        RPC_INVALID_REQUEST = -32600,
        RPC_METHOD_NOT_FOUND = -32601,
        RPC_INVALID_PARAMS = -32602,
        RPC_INTERNAL_ERROR = -32603,
};

/* One message from the client, checked against JSON-RPC 2.0 as MCP uses it.
 * Pointers point into root, which the caller releases with json_decref. */
typedef struct mcp_message {
        json_t *root;
        const json_t *id;     /* NULL for a notification, or when it was invalid */
        const char *method;   /* NULL for a response from the client */
        const json_t *params; /* NULL or an object */
} mcp_message;

/* Parses one line of input (untrusted, any bytes). Returns 0 with *ret
 * filled, or the JSON-RPC error code to answer with and a message in why;
 * ret->id is then the id to answer to (NULL when there is none), and
 * ret->root still needs json_decref. A notification with bad params is
 * dropped silently: 0 with method NULL. */
int mcp_parse_message(const char *line, size_t len, mcp_message *ret, char *why, size_t why_len);

#endif
