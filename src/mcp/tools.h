/* The MCP server's tools, as one table (tools.c): tools/list, the dispatch
 * of tools/call, the message for an unknown tool and the check of every
 * tool's arguments come from it, and test_mcp_core checks the tests'
 * fixture (tests/mcp/fixtures/tools.json) against it. Adding a tool is a
 * row and its handler here, the fixture, and its contract in
 * docs/design.md. */
#ifndef AIRLOCK_MCP_TOOLS_H
#define AIRLOCK_MCP_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "mcp_session.h"
#include "tenant_workspace.h"

/* What a tool's call handler may use: the session table, the tenants'
 * workspaces (NULL without --tenants-dir), who calls (owner, NULL on
 * stdio: what sessions are keyed by) and the tenant whose workspace that
 * is (the owner, or the server's one tenant). */
typedef struct mcp_tool_ctx {
        mcp_sessions *sessions;
        mcp_workspaces *workspaces;
        const char *owner;
        const char *tenant;
} mcp_tool_ctx;

typedef struct mcp_tool {
        const char *name;
        const char *title;
        /* The annotations (MCP's hints to a client). openWorldHint is
         * computed for execute_code: whether the allow-list names any
         * target. */
        bool read_only, destructive, idempotent;
        /* inputSchema as a JSON literal, or NULL for execute_code, whose
         * schema and description are the library's (airlock_describe). */
        const char *schema;
        /* outputSchema as a JSON literal (the result then carries
         * structuredContent), or NULL. */
        const char *output_schema;
        /* Listed and callable only with --tenants-dir. */
        bool workspace;
        /* The description, or NULL when describe makes it (it depends on
         * the server's caps) or the library does (execute_code). */
        const char *description;
        json_t *(*describe)(const mcp_sessions *m);
        /* Answers a call at once; NULL for execute_code, which the core
         * runs on a worker (mcp_calls.c). args is checked against the schema
         * first (mcp_tool_check). */
        json_t *(*call)(const mcp_tool_ctx *ctx, const json_t *args);
        /* What the refusal of a missing or mistyped required argument says
         * after "NAME needs " (the schema says which arguments are required,
         * their JSON type and how many items an array holds), and, for a
         * tool that works all or nothing, what was not done ("written":
         * "; nothing was written" ends each refusal of its arguments). */
        const char *needs;
        const char *undone;
        /* Names a missing required argument before one the schema does not
         * name (execute_code has always answered so); the others the other
         * way round. */
        bool required_first;
} mcp_tool;

/* The tool called name, or NULL (a workspace tool is NULL unless
 * workspaces). */
const mcp_tool *mcp_tool_find(const char *name, bool workspaces);
/* The i-th tool in the table's (and tools/list's) order, or NULL past the
 * last. */
const mcp_tool *mcp_tool_at(size_t i);
/* "Unknown tool: NAME (this server has A, B, C and D)" into buf. */
void mcp_tool_unknown(const char *name, bool workspaces, char *buf, size_t size);
/* The tools/list entries: execute_code's from the library's description
 * (desc, the object of airlock_describe_json) with the session argument
 * added to its schema, then the others from the table. NULL when out of
 * memory. */
json_t *mcp_tools_list(const mcp_sessions *m, const json_t *desc, bool open_world, bool workspaces);
/* The library's instructions (airlock_describe) for this server: their
 * first sentence, which speaks of execute_code alone, counts and names the
 * tools that tools/list gives (the workspace tools with workspaces).
 * malloc'd, or NULL when out of memory; NULL in, NULL out. */
char *mcp_tools_instructions(const char *library, bool workspaces);
/* Checks a call's arguments against the tool's schema, parsed once (for
 * execute_code, the library's schema and "session"): an argument the schema
 * does not name, and each required one (present, of its type, an array
 * within minItems and maxItems), in the order the row says. Returns NULL, or the tool error
 * that names the first fault, for the model to fix. */
json_t *mcp_tool_check(const mcp_tool *t, const json_t *args);
/* Answers a call of a tool with a call handler: mcp_tool_check, then the
 * handler. */
json_t *mcp_tool_call(const mcp_tool *t, const mcp_tool_ctx *ctx, const json_t *args);

#endif
