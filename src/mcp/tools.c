/* The MCP server's tools, one row each (tools.h). */
#include "tools.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "mcp.h"

#define SESSION_ARG_SCHEMA(what)                                                                   \
        "{\"type\":\"object\",\"properties\":{\"session\":{\"type\":\"string\",\"description\":"   \
        "\"" what "\"}},\"required\":[\"session\"],\"additionalProperties\":false}"

/* The session tools' handlers, in the table's form. */
static json_t *call_session_open(const mcp_tool_ctx *x, const json_t *args)
{
        return mcp_sessions_open(x->sessions, args, x->owner);
}

static json_t *call_session_close(const mcp_tool_ctx *x, const json_t *args)
{
        return mcp_sessions_close(x->sessions, args, x->owner);
}

static json_t *call_session_fork(const mcp_tool_ctx *x, const json_t *args)
{
        return mcp_sessions_fork(x->sessions, args, x->owner);
}

static json_t *call_workspace_write(const mcp_tool_ctx *x, const json_t *args)
{
        return mcp_workspace_write(x->workspaces, x->tenant, args);
}

static json_t *call_workspace_remove(const mcp_tool_ctx *x, const json_t *args)
{
        return mcp_workspace_remove(x->workspaces, x->tenant, args);
}

static json_t *call_workspace_list(const mcp_tool_ctx *x, const json_t *args)
{
        return mcp_workspace_list(x->workspaces, x->tenant, args);
}

/* What every workspace tool's structuredContent carries. */
#define WS_USAGE_PROPS                                                                             \
        "\"entries\":{\"type\":\"integer\",\"description\":\"files and folders in the "            \
        "workspace\"},\"bytes\":{\"type\":\"integer\"},\"max_files\":{\"type\":"                   \
        "\"integer\"},\"max_bytes\":{\"type\":\"integer\"}"
#define WS_USAGE_REQUIRED "\"entries\",\"bytes\",\"max_files\",\"max_bytes\""

/* What session_open's and session_fork's structuredContent carries. */
#define SESSION_HANDLE_OUTPUT                                                                      \
        "{\"type\":\"object\",\"properties\":{\"session\":{\"type\":\"string\","                   \
        "\"description\":\"The new session's handle: pass it as execute_code's \\\"session\\\""    \
        " argument.\"}},\"required\":[\"session\"]}"

static const mcp_tool tools[] = {
    {
        .name = "execute_code",
        .title = "Execute Python code",
        .needs = "the argument \"code\": a string of Python source",
        .required_first = true,
    },
    {
        .name = "session_open",
        .title = "Open a Python session",
        .schema = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}",
        .output_schema = SESSION_HANDLE_OUTPUT,
        .describe = mcp_sessions_open_description,
        .call = call_session_open,
    },
    {
        .name = "session_close",
        .title = "Close a Python session",
        .destructive = true,
        .idempotent = true,
        .schema = SESSION_ARG_SCHEMA("The handle session_open returned."),
        .description = "Closes a session opened with session_open and frees its memory; its "
                       "variables are gone and its handle is no longer valid.",
        .call = call_session_close,
        .needs = "the argument \"session\": the handle session_open returned",
    },
    {
        .name = "session_fork",
        .title = "Fork a Python session",
        .schema = SESSION_ARG_SCHEMA("The handle of the session to copy."),
        .output_schema = SESSION_HANDLE_OUTPUT,
        .description =
            "Copies a session into a new one, in milliseconds, whatever its size: the new "
            "handle starts with the session's variables, imports and objects, and from then "
            "on each has its own (a change or a rollback in one is not seen in the other). "
            "Both stay open; pass the new handle to execute_code. The two share the files in "
            "/tmp and /output (their calls run one at a time), the workspace, and one memory "
            "limit; the fork counts as a session and expires when the original would.",
        .call = call_session_fork,
        .needs = "the argument \"session\": the handle of the session to copy",
    },
    {
        .name = "workspace_write",
        .title = "Write files to the workspace",
        .idempotent = true,
        .workspace = true,
        .schema =
            "{\"type\":\"object\",\"properties\":{\"files\":{\"type\":\"array\",\"minItems\":1,"
            "\"maxItems\":1000,\"description\":\"The files to write: each a path relative to "
            "the workspace and its contents, as text (UTF-8) or as base64 for bytes.\","
            "\"items\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\","
            "\"description\":\"Relative, / between folders, no '..'; /input/PATH in the "
            "sandbox.\"},\"text\":{\"type\":\"string\"},\"base64\":{\"type\":\"string\"}},"
            "\"required\":[\"path\"],\"additionalProperties\":false}}},\"required\":["
            "\"files\"],\"additionalProperties\":false}",
        .output_schema =
            "{\"type\":\"object\",\"properties\":{\"written\":{\"type\":\"array\",\"items\":{"
            "\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"size\":{"
            "\"type\":\"integer\"}},\"required\":[\"path\",\"size\"]}}," WS_USAGE_PROPS
            "},\"required\":[\"written\"," WS_USAGE_REQUIRED "]}",
        .description =
            "Writes files into your workspace on the server, which every run and every session "
            "opened afterwards sees, read-only, under /input (a session keeps the files it "
            "opened with). Each file is {\"path\", \"text\"} or {\"path\", \"base64\"}; an "
            "existing file is replaced, missing folders are made. All or nothing: a path that "
            "is refused (absolute, '..', a link on the way, a folder where the file goes) or a "
            "workspace that would pass its limits of files or bytes writes nothing, and the "
            "error says why. The files stay until workspace_remove removes them.",
        .call = call_workspace_write,
        .needs = "\"files\": a list of {\"path\", \"text\"} or {\"path\", \"base64\"}",
        .undone = "written",
    },
    {
        .name = "workspace_remove",
        .title = "Remove files from the workspace",
        .destructive = true,
        .workspace = true,
        .schema = "{\"type\":\"object\",\"properties\":{\"paths\":{\"type\":\"array\","
                  "\"minItems\":1,\"maxItems\":1000,\"items\":{\"type\":\"string\"},"
                  "\"description\":\"Paths relative to the workspace: files, or folders with "
                  "everything in them.\"}},\"required\":[\"paths\"],\"additionalProperties\":"
                  "false}",
        .output_schema = "{\"type\":\"object\",\"properties\":{\"removed\":{\"type\":"
                         "\"array\",\"items\":{\"type\":\"string\"}}," WS_USAGE_PROPS
                         "},\"required\":[\"removed\"," WS_USAGE_REQUIRED "]}",
        .description = "Removes files, or folders with everything in them, from your workspace. "
                       "All or nothing: a path that is not there or is refused removes nothing.",
        .call = call_workspace_remove,
        .needs = "\"paths\": a list of paths in your workspace",
        .undone = "removed",
    },
    {
        .name = "workspace_list",
        .title = "List the workspace",
        .read_only = true,
        .idempotent = true,
        .workspace = true,
        .schema = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}",
        .output_schema =
            "{\"type\":\"object\",\"properties\":{\"files\":{\"type\":\"array\",\"items\":{"
            "\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"size\":{"
            "\"type\":\"integer\"},\"media_type\":{\"type\":\"string\"}},\"required\":["
            "\"path\",\"size\",\"media_type\"]}},\"skipped\":{\"type\":\"array\",\"items\":{"
            "\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"reason\":{"
            "\"type\":\"string\"}}}},\"truncated\":{\"type\":\"boolean\"}," WS_USAGE_PROPS
            "},\"required\":[\"files\",\"skipped\",\"truncated\"," WS_USAGE_REQUIRED "]}",
        .description = "Lists the files of your workspace (/input in runs): path, size and media "
                       "type, sorted by path, and how much of your limits they use.",
        .call = call_workspace_list,
    },
};

/* What execute_code's "session" argument says, added to the library's
 * schema of its arguments. */
static const char session_arg_description[] =
    "Optional: a handle from session_open or session_fork. The code then runs in that "
    "session's state, as a notebook cell: the variables and imports of earlier calls are "
    "there, and the value of a final expression is shown. Without it, every call is a fresh, "
    "isolated run of a script, and a final expression shows nothing.";

const mcp_tool *mcp_tool_at(size_t i)
{
        return i < ARRAY_SIZE(tools) ? &tools[i] : NULL;
}

const mcp_tool *mcp_tool_find(const char *name, bool workspaces)
{
        for (size_t i = 0; name && i < ARRAY_SIZE(tools); i++)
                if (strcmp(tools[i].name, name) == 0 && (workspaces || !tools[i].workspace))
                        return &tools[i];
        return NULL;
}

void mcp_tool_unknown(const char *name, bool workspaces, char *buf, size_t size)
{
        size_t n = (size_t)snprintf(buf, size, "Unknown tool: %.200s (this server has ", name);
        size_t listed = 0, count = 0;
        for (size_t i = 0; i < ARRAY_SIZE(tools); i++)
                count += workspaces || !tools[i].workspace;
        for (size_t i = 0; i < ARRAY_SIZE(tools) && n < size; i++) {
                if (!workspaces && tools[i].workspace)
                        continue;
                n += (size_t)snprintf(buf + n, size - n, "%s%s",
                                      listed == 0           ? ""
                                      : listed + 1 == count ? " and "
                                                            : ", ",
                                      tools[i].name);
                listed++;
        }
        if (n < size)
                snprintf(buf + n, size - n, ")");
}

static json_t *annotations(const mcp_tool *t, bool open_world)
{
        return json_pack("{s:s, s:b, s:b, s:b, s:b}", "title", t->title, "readOnlyHint",
                         t->read_only, "destructiveHint", t->destructive, "idempotentHint",
                         t->idempotent, "openWorldHint", open_world);
}

json_t *mcp_tools_list(const mcp_sessions *m, const json_t *desc, bool open_world, bool workspaces)
{
        json_t *list = json_array();
        for (size_t i = 0; list && i < ARRAY_SIZE(tools); i++) {
                const mcp_tool *t = &tools[i];
                json_t *entry;
                if (t->workspace && !workspaces)
                        continue;
                if (!t->schema) {
                        /* No outputSchema: a client that sees one hands its
                         * model the structured result instead of the
                         * content (Mastra), so images and files would not
                         * reach it. The run record is in the result's
                         * _meta. */
                        json_t *schema = json_deep_copy(json_object_get(desc, "input_schema"));
                        json_t *props = json_object_get(schema, "properties");
                        if (props)
                                json_object_set_new(props, "session",
                                                    json_pack("{s:s, s:s}", "type", "string",
                                                              "description",
                                                              session_arg_description));
                        entry = json_pack("{s:s, s:s, s:O, s:o, s:o, s:{s:O}}", "name", t->name,
                                          "title", t->title, "description",
                                          json_object_get(desc, "description"), "inputSchema",
                                          schema, "annotations", annotations(t, open_world),
                                          "_meta", "dev.airlock/approval_mode",
                                          json_object_get(desc, "approval_mode"));
                } else {
                        json_t *schema = json_loads(t->schema, 0, NULL);
                        json_t *text = t->describe ? t->describe(m) : json_string(t->description);
                        entry = json_pack("{s:s, s:s, s:o, s:o, s:o}", "name", t->name, "title",
                                          t->title, "description", text, "inputSchema", schema,
                                          "annotations", annotations(t, false));
                        if (entry && t->output_schema)
                                json_object_set_new(entry, "outputSchema",
                                                    json_loads(t->output_schema, 0, NULL));
                }
                if (!entry || json_array_append_new(list, entry) < 0)
                        json_decref(TAKE_PTR(list));
        }
        return list;
}

/* The first sentence of the library's instructions (build_instructions in
 * src/lib/surface/describe.c); test_mcp_core holds the two to each other. */
static const char library_first[] =
    "This server offers one tool, execute_code, which runs Python 3 in an isolated sandbox.\n";

char *mcp_tools_instructions(const char *library, bool workspaces)
{
        if (!library)
                return NULL;
        size_t skip =
            strncmp(library, library_first, strlen(library_first)) == 0 ? strlen(library_first) : 0;
        size_t count = 0, listed = 0;
        for (size_t i = 0; i < ARRAY_SIZE(tools); i++)
                count += workspaces || !tools[i].workspace;
        dynbuf b;
        dynbuf_init(&b, SIZE_MAX);
        int r = dynbuf_appendf(&b,
                               "This server offers %zu tools: execute_code, which runs Python 3 in "
                               "an isolated sandbox, and ",
                               count);
        for (size_t i = 1; r >= 0 && i < ARRAY_SIZE(tools); i++) {
                if (!workspaces && tools[i].workspace)
                        continue;
                listed++;
                r = dynbuf_appendf(&b, "%s%s",
                                   listed == 1           ? ""
                                   : listed + 1 == count ? " and "
                                                         : ", ",
                                   tools[i].name);
        }
        if (r >= 0)
                r = dynbuf_appendf(&b, " (%s).\n%s",
                                   workspaces ? "sessions that keep state across calls, and the "
                                                "files of your workspace under /input"
                                              : "sessions that keep state across calls",
                                   library + skip);
        if (r < 0) {
                dynbuf_free(&b);
                return NULL;
        }
        return dynbuf_take(&b, NULL);
}

/* execute_code's arguments as the server checks them: the library's schema
 * (airlock_describe_json's input_schema: "code", a string, required; the
 * tools/list entry is that schema itself) and the server's "session",
 * whose type its own check names (mcp_sessions_begin). test_mcp_core holds
 * this to the library's. */
#define EXECUTE_CODE_ARGS                                                                          \
        "{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\"},\"session\":{}},"     \
        "\"required\":[\"code\"]}"

/* Each row's schema, parsed once. */
static json_t *schemas[ARRAY_SIZE(tools)];
static pthread_once_t schemas_once = PTHREAD_ONCE_INIT;

static void parse_schemas(void)
{
        for (size_t i = 0; i < ARRAY_SIZE(tools); i++)
                schemas[i] =
                    json_loads(tools[i].schema ? tools[i].schema : EXECUTE_CODE_ARGS, 0, NULL);
}

static const json_t *schema_of(const mcp_tool *t)
{
        pthread_once(&schemas_once, parse_schemas);
        return schemas[t - tools];
}

/* The first argument props does not name: "it takes none", "it takes only
 * \"a\"", "it takes only \"a\" and \"b\"". */
static json_t *unknown_arg(const mcp_tool *t, const json_t *props, const json_t *args)
{
        const char *key;
        const json_t *v;
        json_object_foreach ((json_t *)args, key, v) {
                if (json_object_get(props, key))
                        continue;
                char takes[128] = "";
                const char *p;
                json_t *pv;
                size_t n = 0, i = 0, count = json_object_size(props);
                json_object_foreach ((json_t *)props, p, pv) {
                        const char *sep = i == 0 ? "" : i + 1 == count ? " and " : ", ";
                        n += (size_t)snprintf(takes + n, n < sizeof(takes) ? sizeof(takes) - n : 0,
                                              "%s\"%s\"", sep, p);
                        i++;
                }
                char msg[400];
                snprintf(msg, sizeof(msg), "%s has no argument \"%.200s\"; it takes %s%s", t->name,
                         key, n ? "only " : "none", takes);
                return mcp_tool_refusal("%s", msg);
        }
        return NULL;
}

/* Whether v is of the JSON type the schema's property names. */
static bool of_type(const json_t *v, const char *type)
{
        if (!type)
                return v != NULL;
        if (strcmp(type, "string") == 0)
                return json_is_string(v);
        if (strcmp(type, "array") == 0)
                return json_is_array(v);
        if (strcmp(type, "object") == 0)
                return json_is_object(v);
        if (strcmp(type, "integer") == 0)
                return json_is_integer(v);
        if (strcmp(type, "boolean") == 0)
                return json_is_boolean(v);
        return v != NULL;
}

/* The first required argument that is missing, of another type, or an
 * array with too few or too many items. */
static json_t *required_arg(const mcp_tool *t, const json_t *schema, const json_t *args)
{
        const json_t *props = json_object_get(schema, "properties");
        char undone[64] = "";
        if (t->undone)
                snprintf(undone, sizeof(undone), "; nothing was %s", t->undone);
        size_t i;
        const json_t *req;
        json_array_foreach (json_object_get(schema, "required"), i, req) {
                const char *key = json_string_value(req);
                const json_t *prop = json_object_get(props, key);
                const json_t *v = json_object_get(args, key);
                json_int_t min = json_integer_value(json_object_get(prop, "minItems"));
                const json_t *max = json_object_get(prop, "maxItems");
                if (!of_type(v, json_string_value(json_object_get(prop, "type"))) ||
                    (json_is_array(v) && json_array_size(v) < (size_t)min))
                        return mcp_tool_refusal("%s needs %s%s", t->name, t->needs ? t->needs : key,
                                                undone);
                if (json_is_array(v) && json_is_integer(max) &&
                    json_array_size(v) > (size_t)json_integer_value(max))
                        return mcp_tool_refusal("%s takes at most %lld %s a call (got %zu)%s",
                                                t->name, (long long)json_integer_value(max), key,
                                                json_array_size(v), undone);
        }
        return NULL;
}

json_t *mcp_tool_check(const mcp_tool *t, const json_t *args)
{
        const json_t *schema = schema_of(t);
        if (!schema)
                return mcp_tool_error("out of memory");
        const json_t *props = json_object_get(schema, "properties");
        json_t *bad =
            t->required_first ? required_arg(t, schema, args) : unknown_arg(t, props, args);
        if (!bad)
                bad =
                    t->required_first ? unknown_arg(t, props, args) : required_arg(t, schema, args);
        return bad;
}

json_t *mcp_tool_call(const mcp_tool *t, const mcp_tool_ctx *ctx, const json_t *args)
{
        json_t *bad = mcp_tool_check(t, args);
        return bad ? bad : t->call(ctx, args);
}
