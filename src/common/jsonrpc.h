/* JSON-RPC 2.0 as MCP uses it, for both of airlock's sides: the MCP server
 * (src/mcp, `airlock mcp` and `airlock serve`) and the library's MCP client
 * of upstream servers (src/lib/mcp). Here are the error codes, the building
 * of requests, notifications, results and errors, the classification of an
 * incoming message, the server's strict check of what a client sends, and
 * the measure that bounds what parsing a message costs.
 *
 * It lives beside base.h because both sides include it: the library is
 * compiled with its internals on the include path, the command line (and
 * so the server) on airlock.h and src/common alone. Nothing here is part of
 * the public API. */
#ifndef AIRLOCK_JSONRPC_H
#define AIRLOCK_JSONRPC_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "airlock.h"

/* JSON-RPC's error codes, and MCP's own that airlock answers with. */
enum {
        RPC_PARSE_ERROR = -32700,
        RPC_INVALID_REQUEST = -32600,
        RPC_METHOD_NOT_FOUND = -32601,
        RPC_INVALID_PARAMS = -32602,
        RPC_INTERNAL_ERROR = -32603,
        RPC_RESOURCE_NOT_FOUND = -32002, /* MCP's code for resources/read */
};

/* What a message is, by its members: a request has a method and an id, a
 * notification a method and no id, a response an id and no method. */
typedef enum jsonrpc_kind {
        JSONRPC_INVALID, /* not an object with "jsonrpc": "2.0" */
        JSONRPC_REQUEST,
        JSONRPC_NOTIFICATION,
        JSONRPC_RESPONSE,
} jsonrpc_kind;

/* The kind of msg by the presence of its members alone, as a peer reads
 * what it was sent when it acts only on what it knows (the client: a
 * response to an id it did not ask is dropped). JSONRPC_INVALID when msg
 * is not an object or its "jsonrpc" is not "2.0"; a message with neither
 * method nor id is a response (to nothing). */
jsonrpc_kind jsonrpc_kind_of(const json_t *msg);

/* Whether msg is the response to the request with the integer id (the
 * ids airlock's client gives). */
bool jsonrpc_is_response_to(const json_t *msg, json_int_t id);

/* One message from a peer, checked against JSON-RPC 2.0 as MCP uses it.
 * Pointers point into root, which the caller releases with json_decref. */
typedef struct jsonrpc_message {
        json_t *root;
        const json_t *id;     /* NULL for a notification, or when it was invalid */
        const char *method;   /* NULL for a response, or a notification dropped */
        const json_t *params; /* NULL or an object */
} jsonrpc_message;

/* Parses one message (untrusted, any bytes), as a server reads a client:
 * one object (no batch), "jsonrpc": "2.0", an id that is a string or an
 * integer (MCP forbids null), a method that is a string, params an object
 * or absent. Returns 0 with *ret filled, or the error code to answer with
 * and the message in err; ret->id is then the id to answer to (NULL when
 * there is none), and ret->root still needs json_decref. A notification
 * with bad params is dropped silently (0 with method NULL), as is a
 * response (0 with method NULL and id set). */
int jsonrpc_parse(const char *buf, size_t len, jsonrpc_message *ret, airlock_error *err);

/* The request {"jsonrpc": "2.0", "id": id, "method": method, "params":
 * params}; params (borrowed) may be NULL for none. NULL when out of
 * memory. */
json_t *jsonrpc_request(json_int_t id, const char *method, const json_t *params);
/* The notification of method with params (taken; NULL for none). NULL
 * when out of memory. */
json_t *jsonrpc_notification(const char *method, json_t *params);
/* The response to id (borrowed) with result (taken); a NULL result (out of
 * memory while building it) makes the error response "out of memory". */
json_t *jsonrpc_result(const json_t *id, json_t *result);
/* The error response to id (borrowed; NULL answers "id": null, for a
 * request whose id could not be read) with code, the message formatted
 * like printf and cut at 511 bytes, and data (taken, may be NULL) as the
 * error's "data". The message may quote the peer's input: it is made valid
 * UTF-8. NULL when out of memory. */
json_t *jsonrpc_error(const json_t *id, int code, json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
json_t *jsonrpc_verror(const json_t *id, int code, json_t *data, const char *fmt, va_list ap);

/* What parsing buf would cost, found in one pass over its bytes without
 * building anything: *values the JSON values it holds (object keys
 * included) and *depth its deepest nesting of arrays and objects. Text
 * that is not JSON is measured all the same (jansson then refuses it).
 * Parsed, each value costs jansson about 40 to 90 bytes beside the text
 * (JSONRPC_VALUE_COST, measured with jansson 2.14): the parsed form of a
 * body can be 20 times its size, which is what the caller must bound. */
#define JSONRPC_VALUE_COST 96
void jsonrpc_measure(const char *buf, size_t len, uint64_t *values, unsigned *depth);
/* The deepest nesting of arrays and objects the HTTP server parses: no MCP
 * message comes near it, and jansson's parser recurses once a level on the
 * connection's thread, whose stack is 512 KiB. */
#define JSONRPC_MAX_DEPTH 64

#endif
