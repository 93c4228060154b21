/* The dispatcher of the MCP server: one request or notification, of
 * either era of the protocol.
 *
 * Two eras of the protocol are served side by side, request by request. A
 * request whose params._meta names its protocol version
 * ("io.modelcontextprotocol/protocolVersion", revision 2026-07-28 and later)
 * is served statelessly as that revision asks: no handshake, its results
 * carry "resultType" and the server's identity in _meta, and server/discover
 * tells the versions, capabilities and identity. Any other request belongs to
 * the initialize handshake of 2025-11-25 and earlier, answered as those
 * revisions ask (and as this server always has). */
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
#include "tools.h"

/* Protocol revisions of the initialize handshake this server speaks, newest
 * first. The tool surface (tools/list, tools/call, ping, cancellation) is the
 * same in all of them. */
static const char *const protocol_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                                "2024-11-05"};

/* Revisions without a handshake (each request names its own), newest first. */
static const char *const modern_versions[] = {"2026-07-28"};

/* What this server offers, the same in initialize and server/discover. */
static json_t *server_capabilities(void)
{
        return json_pack("{s:{s:b}, s:{s:b, s:b}}", "tools", "listChanged", 0, "resources",
                         "subscribe", 0, "listChanged", 0);
}

/* Reads the era of a request from its params._meta (basic/index, "_meta";
 * basic/versioning). A request whose _meta names
 * "io.modelcontextprotocol/protocolVersion" is of revision 2026-07-28 or
 * later and must carry the whole envelope: a malformed one is -32602 with the
 * key at fault in data.envelope, a revision this server does not speak is
 * -32022 with the revisions it does (the modern ones: the older need the
 * handshake). Any other request is of the handshake era. Returns false when
 * it answered the request with an error. */
static bool read_envelope(mcp_server *srv, mcp_request *rq)
{
        const json_t *meta = json_object_get(rq->params, "_meta");
        const json_t *version = json_object_get(meta, META_PROTOCOL_VERSION);
        rq->modern = false;
        if (!json_is_object(meta) || !version)
                return true;
        const char *key = NULL, *problem = NULL;
        const json_t *caps = json_object_get(meta, META_CLIENT_CAPS);
        const json_t *info = json_object_get(meta, META_CLIENT_INFO);
        const json_t *token = json_object_get(meta, "progressToken");
        if (!json_is_string(version)) {
                key = META_PROTOCOL_VERSION;
                problem = "expected a string";
        } else if (!caps) {
                key = META_CLIENT_CAPS;
                problem = "missing";
        } else if (!json_is_object(caps)) {
                key = META_CLIENT_CAPS;
                problem = "expected an object";
        } else if (info &&
                   (!json_is_object(info) || !json_is_string(json_object_get(info, "name")) ||
                    !json_is_string(json_object_get(info, "version")))) {
                key = META_CLIENT_INFO;
                problem = "expected an object with string name and version";
        } else if (token && !json_is_string(token) && !json_is_integer(token)) {
                key = "progressToken";
                problem = "expected a string or an integer";
        }
        if (key) {
                mcp_send_error_data(
                    srv, rq->sink, rq->id, RPC_INVALID_PARAMS,
                    json_pack("{s:{s:s, s:s}}", "envelope", "key", key, "problem", problem),
                    "Invalid _meta envelope: %s: %s", key, problem);
                return false;
        }
        const char *asked = json_string_value(version);
        for (size_t i = 0; i < ARRAY_SIZE(modern_versions); i++)
                if (strcmp(asked, modern_versions[i]) == 0) {
                        rq->modern = true;
                        return true;
                }
        json_t *supported = json_array();
        for (size_t i = 0; i < ARRAY_SIZE(modern_versions); i++)
                json_array_append_new(supported, json_string(modern_versions[i]));
        mcp_send_error_data(srv, rq->sink, rq->id, RPC_UNSUPPORTED_PROTOCOL_VERSION,
                            json_pack("{s:o, s:s}", "supported", supported, "requested", asked),
                            "Unsupported protocol version: %.100s (this server speaks %s in _meta, "
                            "and %s to %s through initialize)",
                            asked, modern_versions[0],
                            protocol_versions[ARRAY_SIZE(protocol_versions) - 1],
                            protocol_versions[0]);
        return false;
}

static bool handle_initialize(mcp_server *srv, const mcp_request *rq)
{
        const json_t *id = rq->id, *params = rq->params;
        if (srv->initialized && !srv->stateless) {
                mcp_send_error(srv, rq->sink, id, RPC_INVALID_REQUEST, "already initialized");
                return false;
        }
        const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
        if (!asked) {
                mcp_send_error(srv, rq->sink, id, RPC_INVALID_PARAMS,
                               "initialize: params.protocolVersion must be a string");
                return false;
        }
        /* The client's revision when we speak it, else the newest we do; the
         * client then decides whether it can go on. */
        const char *version = protocol_versions[0];
        for (size_t i = 0; i < ARRAY_SIZE(protocol_versions); i++)
                if (strcmp(asked, protocol_versions[i]) == 0)
                        version = protocol_versions[i];
        if (!srv->stateless)
                srv->initialized = true;
        cfg_version *v = mcp_cfg_take(srv);
        mcp_send_result(srv, rq->sink, id,
                        json_pack("{s:s, s:o, s:{s:s, s:s}, s:s}", "protocolVersion", version,
                                  "capabilities", server_capabilities(), "serverInfo", "name",
                                  "airlock", "version", AIRLOCK_VERSION, "instructions",
                                  v->instructions));
        mcp_cfg_drop(srv, v);
        mcp_warm_up(srv);
        return false;
}

/* server/discover (server/discover.mdx): the revisions without handshake,
 * the capabilities, the instructions and, in _meta, the server's identity.
 * While the first version is being built, the instructions are those of its
 * configuration, the same text (see mcp_version_build_start). */
static void handle_discover(mcp_server *srv, const mcp_request *rq)
{
        json_t *versions = json_array();
        for (size_t i = 0; i < ARRAY_SIZE(modern_versions); i++)
                json_array_append_new(versions, json_string(modern_versions[i]));
        cfg_version *v = mcp_cfg_take(srv);
        mcp_reply(srv, rq,
                  json_pack("{s:o, s:o, s:s}", "supportedVersions", versions, "capabilities",
                            server_capabilities(), "instructions",
                            v ? v->instructions : srv->first_instructions),
                  true);
        mcp_cfg_drop(srv, v);
}

/* subscriptions/listen (basic/patterns/subscriptions.mdx): this server has
 * no change to tell (listChanged false: a reload of airlock serve changes
 * the description that the next tools/list returns, unannounced), so it
 * honours none of the requested notification types: the acknowledgment says
 * so, and the stream closes at once, gracefully, with the listen request's
 * result, as the official SDK does for an empty filter. */
static bool handle_listen(mcp_server *srv, const mcp_request *rq)
{
        if (!json_is_object(json_object_get(rq->params, "notifications"))) {
                mcp_send_error(srv, rq->sink, rq->id, RPC_INVALID_PARAMS,
                               "subscriptions/listen: params.notifications must be an object");
                return false;
        }
        json_t *ack =
            json_pack("{s:{s:O}, s:{}}", "_meta", META_SUBSCRIPTION_ID, rq->id, "notifications");
        if (ack)
                mcp_send_message(
                    srv, rq->sink,
                    jsonrpc_notification("notifications/subscriptions/acknowledged", ack));
        mcp_reply(srv, rq, json_pack("{s:{s:O}}", "_meta", META_SUBSCRIPTION_ID, rq->id), false);
        return false;
}

/* The bytes of a progress token (a string or an integer) as JSON. */
static size_t token_json_len(const json_t *token)
{
        if (json_is_string(token) && json_string_length(token) > PROGRESS_TOKEN_MAX)
                return json_string_length(token) + 2; /* no need to write it out */
        char *text = json_dumps(token, JSON_ENCODE_ANY | JSON_COMPACT);
        size_t n = text ? strlen(text) : SIZE_MAX;
        free(text);
        return n;
}

/* Returns whether a call was started (it answers later). */
static bool handle_tools_call(mcp_server *srv, const mcp_request *rq)
{
        const json_t *id = rq->id, *params = rq->params;
        const char *name = json_string_value(json_object_get(params, "name"));
        if (!name) {
                mcp_send_error(srv, rq->sink, id, RPC_INVALID_PARAMS,
                               "tools/call: params.name must be a string");
                return false;
        }
        const mcp_tool *t = mcp_tool_find(name, srv->workspaces != NULL);
        if (!t) {
                char msg[512];
                mcp_tool_unknown(name, srv->workspaces != NULL, msg, sizeof(msg));
                mcp_send_error(srv, rq->sink, id, RPC_INVALID_PARAMS, "%s", msg);
                return false;
        }
        if (t->call) {
                const char *owner = rq->sink ? rq->sink->owner : NULL;
                mcp_tool_ctx ctx = {.sessions = srv->sessions,
                                    .workspaces = srv->workspaces,
                                    .owner = owner,
                                    .tenant = tenant_of(srv, owner)};
                mcp_reply(srv, rq, mcp_tool_call(t, &ctx, json_object_get(params, "arguments")),
                          false);
                return false;
        }
        const json_t *args = json_object_get(params, "arguments");
        const json_t *code = json_object_get(args, "code");
        /* Bad arguments are a tool error, not a protocol error, so that the
         * model sees what to fix. */
        json_t *bad = mcp_tool_check(t, args);
        if (bad) {
                mcp_reply(srv, rq, bad, false);
                return false;
        }
        /* A progress token of another type is not one (the handshake era
         * does not check _meta; the envelope check refused it already). */
        const json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
        if (!json_is_string(token) && !json_is_integer(token))
                token = NULL;
        if (token && token_json_len(token) > PROGRESS_TOKEN_MAX) {
                mcp_send_error(srv, rq->sink, id, RPC_INVALID_PARAMS,
                               "_meta.progressToken is over %d bytes as JSON "
                               "(PROGRESS_TOKEN_MAX): every progress notification carries it",
                               PROGRESS_TOKEN_MAX);
                return false;
        }
        mcp_call *c = calloc(1, sizeof(*c));
        if (c) {
                c->cancel_fd = -1;
                c->sink = rq->sink;
                c->modern = rq->modern;
                c->len = json_string_length(code);
                c->code = malloc(c->len + 1);
                /* Copies of its own: the worker never shares a JSON value
                 * with the reader thread. */
                c->id = json_deep_copy(id);
                c->progress = token ? json_deep_copy(token) : NULL;
        }
        if (!c || !c->code || !c->id || (token && !c->progress)) {
                mcp_call_free(c);
                mcp_send_error(srv, rq->sink, id, RPC_INTERNAL_ERROR, "out of memory");
                return false;
        }
        memcpy(c->code, json_string_value(code), c->len + 1);
        const json_t *handle = json_object_get(args, "session");
        if (!handle && srv->workspaces && !(rq->sink && rq->sink->internal)) {
                /* The tenant's configuration, fixed for the whole call: its
                 * workspace is the tenant's folder. */
                airlock_error err = {0};
                c->srv = srv;
                if (!(c->ver = mcp_cfg_take(srv)) ||
                    !(c->cfg = mcp_version_cfg(
                          srv, c->ver, rq->sink && !rq->sink->internal ? rq->sink->owner : NULL,
                          &err))) {
                        mcp_call_free(c);
                        char msg[AIRLOCK_MESSAGE_MAX + 64];
                        snprintf(msg, sizeof(msg), "airlock could not run the code: %s",
                                 err.message[0] ? err.message : "out of memory");
                        mcp_reply(srv, rq, mcp_tool_error(msg), false);
                        return false;
                }
        }
        if (handle) {
                json_t *e = mcp_sessions_begin(srv->sessions, handle,
                                               rq->sink ? rq->sink->owner : NULL, &c->session);
                if (e) {
                        mcp_call_free(c);
                        mcp_reply(srv, rq, e, false);
                        return false;
                }
        }
        srv->warmed_up = true; /* the call prepares the sandbox itself */
        /* The run record is for programs, on request: LangChain's adapter
         * puts a result's _meta into the text its model reads. */
        c->run_record =
            json_is_true(json_object_get(json_object_get(params, "_meta"), MCP_META_RUN));
        c->usage_record =
            c->run_record ||
            json_is_true(json_object_get(json_object_get(params, "_meta"), MCP_META_USAGE));
        c->span = al_span_current(); /* ended with the answer (mcp_run_call) */
        c->t0 = rq->t0;
        int r = mcp_call_start(srv, c);
        if (r == 0)
                return true;
        if (r == -EBUSY)
                mcp_reply(srv, rq,
                          mcp_tool_error("too many execute_code calls in progress; wait for "
                                         "one to finish"),
                          false);
        else if (r < 0)
                mcp_send_error(srv, rq->sink, id, RPC_INTERNAL_ERROR, "cannot start the call: %s",
                               strerror(-r));
        return false;
}

/* resources/list and resources/read: the files of recent runs, by the URIs
 * their results named (see mcp_resources.c). A URI this process does not
 * hold is the error -32002, which says so. */
static void answer_resources(mcp_server *srv, const mcp_request *rq, json_t *result, int code,
                             const airlock_error *err)
{
        if (result)
                mcp_reply(srv, rq, result, false);
        else
                mcp_send_error(srv, rq->sink, rq->id, code, "%s", err->message);
}

static bool handle_resources_read(mcp_server *srv, const mcp_request *rq)
{
        int code = 0;
        airlock_error err = {0};
        const char *uri = json_string_value(json_object_get(rq->params, "uri"));
        if (!uri) {
                mcp_send_error(srv, rq->sink, rq->id, RPC_INVALID_PARAMS,
                               "resources/read: params.uri must be a string");
                return false;
        }
        json_t *result =
            mcp_store_read(srv->store, rq->sink ? rq->sink->owner : NULL, uri, &code, &err);
        answer_resources(srv, rq, result, code, &err);
        return false;
}

static bool handle_resources_list(mcp_server *srv, const mcp_request *rq)
{
        int code = 0;
        airlock_error err = {0};
        const json_t *cursor = json_object_get(rq->params, "cursor");
        if (cursor && !json_is_string(cursor)) {
                mcp_send_error(srv, rq->sink, rq->id, RPC_INVALID_PARAMS,
                               "resources/list: params.cursor must be a string");
                return false;
        }
        json_t *result = mcp_store_list(srv->store, rq->sink ? rq->sink->owner : NULL,
                                        json_string_value(cursor), &code, &err);
        answer_resources(srv, rq, result, code, &err);
        return false;
}

/* tools/list: the list of the current configuration: a reload that changed
 * the tools file shows in the next tools/list. */
static bool handle_tools_list(mcp_server *srv, const mcp_request *rq)
{
        cfg_version *v = mcp_cfg_take(srv);
        mcp_reply(srv, rq, json_pack("{s:O}", "tools", v->tools), true);
        mcp_cfg_drop(srv, v);
        return false;
}

static bool handle_ping(mcp_server *srv, const mcp_request *rq)
{
        mcp_reply(srv, rq, json_object(), false);
        return false;
}

/* server/discover answers while the first version is being built, from its
 * configuration's instructions when they are known already. */
static bool handle_discover_early(mcp_server *srv, const mcp_request *rq)
{
        if (!srv->first_instructions && !mcp_version_wait(srv))
                return false;
        mcp_warm_up(srv);
        handle_discover(srv, rq);
        return false;
}

/* Which era of the protocol a method belongs to (see read_envelope). */
typedef enum method_era {
        ERA_BOTH,      /* either */
        ERA_HANDSHAKE, /* 2025-11-25 and earlier, after initialize */
        ERA_MODERN,    /* 2026-07-28: params._meta names the revision */
} method_era;

/* One MCP method: its name, its era, whether the handshake era needs a
 * session (initialize first), whether it is answered while the first
 * version is still being built (from the configuration alone), whether the
 * modern era warms the sandbox up before it (a tools/call prepares the
 * sandbox itself), and its handler, which returns whether a call was
 * started (its response comes later). */
typedef struct method_row {
        const char *name;
        method_era era;
        bool needs_session;
        bool early;
        bool no_warm_up;
        bool (*handle)(mcp_server *srv, const mcp_request *rq);
} method_row;

/* clang-format off */
static const method_row methods[] = {
    /* method                  era            session early  no warm-up handler */
    {"ping",                   ERA_BOTH,      false,  true,  false,     handle_ping},
    {"server/discover",        ERA_MODERN,    false,  true,  false,     handle_discover_early},
    {"initialize",             ERA_HANDSHAKE, false,  false, false,     handle_initialize},
    {"subscriptions/listen",   ERA_MODERN,    true,   false, false,     handle_listen},
    {"tools/list",             ERA_BOTH,      true,   false, false,     handle_tools_list},
    {"tools/call",             ERA_BOTH,      true,   false, true,      handle_tools_call},
    {"resources/list",         ERA_BOTH,      true,   false, false,     handle_resources_list},
    {"resources/read",         ERA_BOTH,      true,   false, false,     handle_resources_read},
};
/* clang-format on */

static const method_row *method_find(const char *name)
{
        for (size_t i = 0; i < ARRAY_SIZE(methods); i++)
                if (strcmp(methods[i].name, name) == 0)
                        return &methods[i];
        return NULL;
}

static bool era_fits(const method_row *row, const mcp_request *rq)
{
        return row->era == ERA_BOTH || (row->era == ERA_MODERN) == rq->modern;
}

/* The dispatcher. A request of revision 2026-07-28 (see read_envelope) needs
 * no handshake and is answered in that revision's form; initialize, even
 * after such requests, starts the handshake era, whose requests other than
 * ping wait for it. The two eras may share one connection, as
 * basic/versioning allows a dual-era server.
 *
 * While airlock mcp builds its first version (its sandbox), ping and
 * server/discover are answered at once, and so is a message that is not a
 * well-formed request: the configuration alone says what to answer. Every
 * other request waits here for the build, and so does the reader, so that
 * the requests after it are answered after it too. A build that failed
 * leaves the request unanswered: the server then ends (cmd_mcp). */
static bool dispatch_request(mcp_server *srv, mcp_request *rq, const char *method);

/* The request under its server span (mcp_trace.c), the thread's current
 * span while it is handled; a started tools/call takes the span along and
 * ends it with its answer (mcp_run_call). */
bool mcp_handle_request(mcp_server *srv, mcp_sink *sink, const char *method, const json_t *id,
                        const json_t *params)
{
        mcp_request rq = {.sink = sink, .id = id, .params = params, .t0 = al_now_ns()};
        /* The server's own requests (serve's warm-up) are no client's. */
        bool internal = sink && sink->internal;
        al_span *span =
            internal
                ? NULL
                : mcp_trace_begin(method, id, params,
                                  al_trace_tenants() && sink ? tenant_of(srv, sink->owner) : NULL,
                                  sink ? sink->trace_parent : NULL);
        al_span *outer = al_span_push(span);
        bool started = dispatch_request(srv, &rq, method);
        al_span_pop(outer);
        if (!started && !internal)
                mcp_trace_end(span, method, rq.t0);
        return started;
}

static bool dispatch_request(mcp_server *srv, mcp_request *rq, const char *method)
{
        const json_t *id = rq->id;
        if (!read_envelope(srv, rq))
                return false;
        const method_row *row = method_find(method);
        if (row && row->early) {
                /* A method of the modern era only, asked without its
                 * envelope, is told what the envelope needs. */
                if (!era_fits(row, rq)) {
                        mcp_send_error(srv, rq->sink, id, RPC_INVALID_PARAMS,
                                       "%s needs params._meta with \"%s\" (%s) and \"%s\"", method,
                                       META_PROTOCOL_VERSION, modern_versions[0], META_CLIENT_CAPS);
                        return false;
                }
                return row->handle(srv, rq);
        }
        if (!mcp_version_wait(srv))
                return false;
        if (rq->modern) {
                if (!row || !row->no_warm_up)
                        mcp_warm_up(srv);
        } else if ((!row || row->needs_session) && !srv->initialized && !srv->stateless) {
                mcp_send_error(
                    srv, rq->sink, id, RPC_INVALID_REQUEST,
                    "server not initialized: send initialize first, or name the protocol "
                    "version %s in params._meta (got %.100s)",
                    modern_versions[0], method);
                return false;
        }
        if (!row || !era_fits(row, rq)) {
                mcp_send_error(srv, rq->sink, id, RPC_METHOD_NOT_FOUND, "method not found: %.100s",
                               method);
                return false;
        }
        return row->handle(srv, rq);
}

void mcp_handle_notification(mcp_server *srv, mcp_sink *sink, const char *method,
                             const json_t *params)
{
        if (strcmp(method, "notifications/cancelled") == 0)
                mcp_cancel_request(srv, sink ? sink->owner : NULL,
                                   json_object_get(params, "requestId"));
        /* notifications/initialized and every other notification need no
         * action; notifications are never answered. */
}
