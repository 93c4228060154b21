/* The replies of the MCP server: every message a request produces leaves
 * through mcp_send_message, to the request's sink (mcp_core.h) or, on stdio,
 * as one line of standard output. Errors are built by the JSON-RPC layer
 * (jsonrpc.h); results are shaped here for the request's era. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "mcp_internal.h"

const char *mcp_server_name(const mcp_server *srv)
{
        return srv->name ? srv->name : "airlock mcp";
}

void mcp_send_message(mcp_server *srv, mcp_sink *sink, json_t *msg)
{
        mcp_trace_answer(msg);
        if (sink) {
                /* Another transport: the sink takes the message. */
                if (msg)
                        sink->send(sink, msg);
                return;
        }
        char *text = json_dumps(msg, JSON_COMPACT | AL_JSON_REALS);
        json_decref(msg);
        if (!text) {
                fprintf(stderr, "%s: cannot encode a response\n", mcp_server_name(srv));
                return;
        }
        size_t n = strlen(text);
        text[n] = '\n'; /* replaces the NUL; written with its length */
        pthread_mutex_lock(&srv->out_lock);
        if (!srv->output_broken && al_write_full(STDOUT_FILENO, text, n + 1) < 0)
                srv->output_broken = true;
        pthread_mutex_unlock(&srv->out_lock);
        free(text);
}

void mcp_send_result(mcp_server *srv, mcp_sink *sink, const json_t *id, json_t *result)
{
        mcp_send_message(srv, sink, jsonrpc_result(id, result));
}

void mcp_send_error(mcp_server *srv, mcp_sink *sink, const json_t *id, int code, const char *fmt,
                    ...)
{
        va_list ap;
        va_start(ap, fmt);
        mcp_send_message(srv, sink, jsonrpc_verror(id, code, NULL, fmt, ap));
        va_end(ap);
}

void mcp_send_error_data(mcp_server *srv, mcp_sink *sink, const json_t *id, int code, json_t *data,
                         const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        mcp_send_message(srv, sink, jsonrpc_verror(id, code, data, fmt, ap));
        va_end(ap);
}

/* A result as revision 2026-07-28 asks for it: "resultType", the server's
 * identity in _meta (beside whatever _meta the result already has) and, for
 * the results a client may cache, "ttlMs" and "cacheScope". The hints are the
 * official SDK's defaults: 0 (fetch again when needed) and "private" (the tool
 * description names this configuration's workspace and tools). Takes and
 * returns result; NULL stays NULL. */
json_t *mcp_modern_result(json_t *result, bool cacheable)
{
        if (!result)
                return NULL;
        if (!json_object_get(result, "resultType"))
                json_object_set_new(result, "resultType", json_string("complete"));
        json_t *meta = json_object_get(result, "_meta");
        if (!json_is_object(meta)) {
                meta = json_object();
                json_object_set_new(result, "_meta", meta);
        }
        if (meta && !json_object_get(meta, META_SERVER_INFO))
                json_object_set_new(
                    meta, META_SERVER_INFO,
                    json_pack("{s:s, s:s}", "name", "airlock", "version", AIRLOCK_VERSION));
        if (cacheable) {
                if (!json_object_get(result, "ttlMs"))
                        json_object_set_new(result, "ttlMs", json_integer(0));
                if (!json_object_get(result, "cacheScope"))
                        json_object_set_new(result, "cacheScope", json_string("private"));
        }
        return result;
}

/* Answers rq with result (taken), in the form of the request's era. */
void mcp_reply(mcp_server *srv, const mcp_request *rq, json_t *result, bool cacheable)
{
        mcp_send_result(srv, rq->sink, rq->id,
                        rq->modern ? mcp_modern_result(result, cacheable) : result);
}
