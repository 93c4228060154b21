/* The MCP server's tools, one row each (tools.h). */
#include "tools.h"

#include <stdio.h>
#include <string.h>

#include "base.h"
#include "mcp.h"

#define SESSION_ARG_SCHEMA(what)                                                                   \
        "{\"type\":\"object\",\"properties\":{\"session\":{\"type\":\"string\",\"description\":"   \
        "\"" what "\"}},\"required\":[\"session\"],\"additionalProperties\":false}"

static const mcp_tool tools[] = {
    {
        .name = "execute_code",
        .title = "Execute Python code",
    },
    {
        .name = "session_open",
        .title = "Open a Python session",
        .schema = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}",
        .describe = mcp_sessions_open_description,
        .call = mcp_sessions_open,
    },
    {
        .name = "session_close",
        .title = "Close a Python session",
        .destructive = true,
        .idempotent = true,
        .schema = SESSION_ARG_SCHEMA("The handle session_open returned."),
        .description = "Closes a session opened with session_open and frees its memory; its "
                       "variables are gone and its handle is no longer valid.",
        .call = mcp_sessions_close,
    },
    {
        .name = "session_fork",
        .title = "Fork a Python session",
        .schema = SESSION_ARG_SCHEMA("The handle of the session to copy."),
        .description =
            "Copies a session into a new one, in milliseconds, whatever its size: the new "
            "handle starts with the session's variables, imports and objects, and from then "
            "on each has its own (a change or a rollback in one is not seen in the other). "
            "Both stay open; pass the new handle to execute_code. The two share the files in "
            "/tmp and /output (their calls run one at a time), the workspace, and one memory "
            "limit; the fork counts as a session and expires when the original would.",
        .call = mcp_sessions_fork,
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

const mcp_tool *mcp_tool_find(const char *name)
{
        for (size_t i = 0; name && i < ARRAY_SIZE(tools); i++)
                if (strcmp(tools[i].name, name) == 0)
                        return &tools[i];
        return NULL;
}

void mcp_tool_unknown(const char *name, char *buf, size_t size)
{
        size_t n = (size_t)snprintf(buf, size, "Unknown tool: %.200s (this server has ", name);
        for (size_t i = 0; i < ARRAY_SIZE(tools) && n < size; i++)
                n += (size_t)snprintf(buf + n, size - n, "%s%s",
                                      i == 0                       ? ""
                                      : i + 1 == ARRAY_SIZE(tools) ? " and "
                                                                   : ", ",
                                      tools[i].name);
        if (n < size)
                snprintf(buf + n, size - n, ")");
}

static json_t *annotations(const mcp_tool *t, bool open_world)
{
        return json_pack("{s:s, s:b, s:b, s:b, s:b}", "title", t->title, "readOnlyHint",
                         t->read_only, "destructiveHint", t->destructive, "idempotentHint",
                         t->idempotent, "openWorldHint", open_world);
}

json_t *mcp_tools_list(const mcp_sessions *m, const json_t *desc, bool open_world)
{
        json_t *list = json_array();
        for (size_t i = 0; list && i < ARRAY_SIZE(tools); i++) {
                const mcp_tool *t = &tools[i];
                json_t *entry;
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
                }
                if (!entry || json_array_append_new(list, entry) < 0)
                        json_decref(TAKE_PTR(list));
        }
        return list;
}

json_t *mcp_tool_call(const mcp_tool *t, mcp_sessions *m, const json_t *args, const char *owner)
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
        return t->call(m, args, owner);
}
