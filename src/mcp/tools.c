/* The MCP server's tools, one row each (tools.h). */
#include "tools.h"

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

json_t *mcp_tool_call(const mcp_tool *t, const mcp_tool_ctx *ctx, const json_t *args)
{
        json_t *schema = json_loads(t->schema, 0, NULL);
        json_t *props = json_object_get(schema, "properties");
        const char *key;
        const json_t *v;
        json_object_foreach ((json_t *)args, key, v) {
                if (json_object_get(props, key))
                        continue;
                /* "it takes none", "it takes only \"session\"". */
                char takes[128] = "";
                const char *p;
                json_t *pv;
                size_t n = 0;
                json_object_foreach (props, p, pv)
                        n += (size_t)snprintf(takes + n, n < sizeof(takes) ? sizeof(takes) - n : 0,
                                              "%s\"%s\"", n ? ", " : "", p);
                char msg[400];
                snprintf(msg, sizeof(msg), "%s has no argument \"%.200s\"; it takes %s%s", t->name,
                         key, n ? "only " : "none", takes);
                json_decref(schema);
                _cleanup_free_ char *clean = al_utf8_sanitize(msg, strlen(msg));
                return mcp_tool_error(clean ? clean : msg);
        }
        json_decref(schema);
        return t->call(ctx, args);
}
