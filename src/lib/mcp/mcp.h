/* Upstream MCP servers ("code mode"): the servers file, the client that
 * talks to each server, the Python stubs made from their tool lists, and
 * the hub that a sandbox keeps of them (docs/design.md, "Upstream MCP
 * servers (code mode)").
 *
 * A configuration holds server specs (mcp_specs: what the servers files
 * say, checked when added). A sandbox, when it is built, starts each
 * server on the host (mcp_hub_start), lists its tools, writes the Python
 * stubs into a folder that the guest sees read-only, and forwards the
 * guest's calls of "SERVER.TOOL" to the server (mcp_hub_call). The hub
 * belongs to the sandbox: its processes are never shared with another
 * configuration, and stop when the sandbox closes. */
#ifndef AIRLOCK_MCP_H
#define AIRLOCK_MCP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "airlock.h"
#include "core/util.h"
#include "host/secrets.h"
#include "host/tools.h"

#define MCP_MAX_SERVERS     32
#define MCP_MAX_TOOLS       1024 /* tools of all servers of one sandbox */
#define MCP_MAX_FILE        (1u << 20)
#define MCP_NAME_MAX        64
#define MCP_DEFAULT_TIMEOUT 60.0
#define MCP_DEFAULT_RESULT  (1u << 20)
#define MCP_MAX_RESULT      (16u << 20)
/* A result line past its call's cap is read and dropped, not held, so the
 * server and its state stay; past this it is a flood, and the server is
 * killed (mcp_client_stdio.c, read_some). */
#define MCP_DISCARD_MAX (256u << 20)
/* One server's tools/list, all its pages together: its bytes, what they
 * cost parsed (JSONRPC_VALUE_COST a JSON value, plus the bytes), its
 * tools, and one tool's description. A real server's list is some
 * hundreds of KiB; a hostile one fails the build at the first page past
 * a cap (mcp_client.c, mcp_upstream_start). */
#define MCP_LIST_BYTES      (4u << 20)
#define MCP_LIST_COST       (64u << 20)
#define MCP_LIST_TOOLS      4096
#define MCP_DESC_MAX        (32u << 10)
#define MCP_DEFAULT_CALLS   1000
#define MCP_START_TIMEOUT_S 30.0
#define MCP_STDERR_RING     8192
#define MCP_PROTOCOL_LATEST "2025-11-25"
/* Calls in flight at once within a run (the stubs' asyncio variant and
 * threads): MCP_OP_START starts calls on host threads and answers at once
 * with their tickets, MCP_OP_WAIT collects their outcomes (mcp_hub.c).
 * "servers" is never a server's module name, so these never clash. */
#define MCP_OP_START "servers._start"
#define MCP_OP_WAIT  "servers._wait"
/* A started call holds a slot from its _start until its outcome is
 * collected or its run ends, running or done. */
#define MCP_MAX_JOBS     256 /* calls started and not collected, of all runs of a hub */
#define MCP_MAX_RUN_JOBS 64  /* of one run */
/* Fairness: a run that holds MCP_RUN_JOBS_FAIR slots or more takes
 * another only while more than MCP_JOBS_RESERVE stay free, so that a few
 * greedy runs leave room for every other run's first calls, and the
 * sandbox's cap is reached only by many runs together. */
#define MCP_RUN_JOBS_FAIR 8
#define MCP_JOBS_RESERVE  64
#define MCP_WAIT_BYTES    (16u << 20) /* the results of one wait's reply */
/* The host-side budget of one run: the bytes the host may hold for it at
 * once, beyond its fixed state: the raw results of its calls not yet
 * collected (mcp_hub.c) and the parse of the request frame being served
 * (run.c, at JSONRPC_VALUE_COST a JSON value). Half the run's memory limit
 * (--memory), so that what a run makes the host hold grows with what the
 * operator lets it use, at least MCP_RUN_BUDGET_MIN, which holds the
 * largest frame (CHANNEL_MAX_FRAME) of one string, an HTTP body. */
#define MCP_RUN_BUDGET_MIN  (32ull << 20)
#define MCP_RUN_BUDGET_TEXT "half of --memory, at least 32 MiB"
static inline uint64_t mcp_run_budget(uint64_t memory_bytes)
{
        return memory_bytes / 2 > MCP_RUN_BUDGET_MIN ? memory_bytes / 2 : MCP_RUN_BUDGET_MIN;
}
#define MCP_PROTOCOL_NEXT "2026-07-28"

/* ---- the servers files (mcp_config.c) ---- */

typedef struct mcp_spec {
        char *name;   /* as the file names it */
        char *module; /* the Python module name: name made an identifier */
        char *file;   /* the absolute path of the file that declared it, or NULL */
        char *dir;    /* where relative paths resolve: cwd, else the file's folder, else "." */
        json_t *json; /* the server's object, as checked */
} mcp_spec;

typedef struct mcp_specs {
        mcp_spec *v;
        size_t n;
} mcp_specs;

void mcp_specs_free(mcp_specs *s);
int mcp_specs_clone(const mcp_specs *src, mcp_specs *dst, airlock_error *err);
/* Checks one server's object and adds it; file (may be NULL) names where it
 * came from in messages. A name that is there already is -EEXIST. */
int mcp_specs_add(mcp_specs *s, const char *name, const json_t *server, const char *file,
                  airlock_error *err);
/* Reads a servers file ({"mcpServers": {...}} or VS Code's {"servers":
 * {...}}) and adds every server in it, all or nothing. */
int mcp_specs_load_file(mcp_specs *s, const char *path, airlock_error *err);
/* The same for the servers JSON as text; relative paths resolve against
 * the working folder. */
int mcp_specs_load_text(mcp_specs *s, const char *text, airlock_error *err);
/* The specs as one JSON object {NAME: server} (fingerprints, to_json). */
json_t *mcp_specs_to_json(const mcp_specs *s);

/* name made a Python identifier: every character other than ASCII letters,
 * digits and '_' becomes '_', a leading digit gets '_' before it, and a
 * keyword (or a name the stubs use themselves) gets '_' after it. Writes
 * at most size - 1 bytes. */
void mcp_identifier(const char *name, char *buf, size_t size);

/* ---- one upstream server (mcp_client.c; its transports mcp_client_stdio.c and mcp_client_http.c)
 * ---- */

typedef struct mcp_upstream mcp_upstream;

/* The bounds of one request, besides the server's own timeout. */
typedef struct mcp_bounds {
        uint64_t deadline_ns; /* CLOCK_MONOTONIC, 0 for none */
        int cancel_fd;        /* stops the request when readable; -1 for none */
        size_t max_result;    /* the largest result line accepted */
        /* The most the parse of one reply may hold (its JSON values times
         * JSONRPC_VALUE_COST plus its bytes): the run's host budget. A
         * reply past it is dropped unparsed. 0 for no cap. */
        uint64_t max_cost;
} mcp_bounds;

/* Starts the server of spec (its command, args, env with the secrets'
 * values put in, cwd), initialises it and lists its tools (every page).
 * *ret_tools is the array of tools as the server gave them. */
int mcp_upstream_start(const mcp_spec *spec, const secret_store *secrets, mcp_upstream **ret,
                       json_t **ret_tools, airlock_error *err);
/* Calls a tool. 0 with *ret_result the CallToolResult; or a negative errno
 * with a message in err (a timeout, a crash, a reply that is not
 * JSON-RPC, an error reply): the server is then restarted at the next call
 * (after a crash, with a backoff). Thread-safe: calls of one server are
 * in flight at once, over stdio (each with its own JSON-RPC id, answered
 * in any order) and at a URL (each its own POST in the session). */
int mcp_upstream_call(mcp_upstream *u, const char *tool, const json_t *args, double timeout_s,
                      const mcp_bounds *b, json_t **ret_result, airlock_error *err);
/* True once the server has sent notifications/tools/list_changed since it
 * started (since its tool list made the stubs). */
bool mcp_upstream_list_changed(const mcp_upstream *u);
/* Stops the server (stdin closed, then SIGTERM, then SIGKILL to its
 * process group) and frees u. */
void mcp_upstream_stop(mcp_upstream *u);
/* mcp_upstream_stop for n servers at once (one grace period for all). */
void mcp_upstream_stop_all(mcp_upstream *const *v, size_t n);

/* ---- the stubs (mcp_stubs.c) ---- */

typedef struct mcp_tool {
        char *server;    /* the spec's name */
        char *module;    /* its Python module */
        char *name;      /* the tool's name upstream */
        char *ident;     /* its Python function name */
        char *host_name; /* "module.ident": what call_tool takes */
        char *description;
        json_t *input_schema;
        json_t *output_schema; /* NULL when the tool declares none */
        json_t *params_map;    /* {upstream argument name: python name} */
        tool_info info;        /* for tools_validate */
        size_t server_index;
        double timeout_s;
        size_t max_result;
        uint32_t max_calls;
        bool needs_approval;
        const char *approval_why; /* a static phrase: why it needs approval */
} mcp_tool;

/* Writes the package "servers" into the folder dir_fd: __init__.py (the
 * helpers) and one module per server, from the tools. Text from servers
 * is escaped; nothing of it is ever code. */
int mcp_stubs_write(int dir_fd, const mcp_tool *tools, size_t n, const char *const *modules,
                    const char *const *servers, size_t n_servers, airlock_error *err);

/* ---- the hub of a sandbox (mcp_hub.c) ---- */

typedef struct mcp_hub mcp_hub;

/* Starts every server of specs, lists its tools, applies the allow and
 * deny lists, names the tools for Python, writes the stubs into a new
 * folder (*ret_dir, malloc'd, removed by mcp_hub_free) and returns the
 * hub. Warnings (a tool left out) are appended to warnings. */
int mcp_hub_start(const mcp_specs *specs, const secret_store *secrets, mcp_hub **ret,
                  char **ret_dir, dynbuf *warnings, airlock_error *err);
void mcp_hub_free(mcp_hub *h);
/* True when name is a tool of the hub ("module.ident"). */
bool mcp_hub_owns(const mcp_hub *h, const char *name);
/* The per-run call counters a run keeps: one per server and one per tool;
 * and the run's identity in the hub, to which its tickets are bound. */
typedef struct mcp_run_counts {
        uint32_t server[MCP_MAX_SERVERS];
        uint32_t *tool;  /* MCP_MAX_TOOLS, allocated by the run when first needed */
        uint64_t run_id; /* given by the hub at the run's first call; 0 before */
        /* The bytes the host may hold for the run at once (the outcomes of
         * its calls not yet collected, a request being parsed): set by the
         * run from its memory limit (mcp_run_budget, in run.c's run_init). */
        uint64_t budget;
} mcp_run_counts;
/* The run has ended: its calls still running are cancelled upstream, and
 * its outcomes nobody collected are dropped now; its tickets name nothing
 * any more. Safe to call for a run that made no call. */
void mcp_hub_run_end(mcp_hub *h, mcp_run_counts *counts);
/* The bytes the hub holds now for the run: the raw results of its calls
 * that are done and not collected. */
uint64_t mcp_hub_run_held(mcp_hub *h, const mcp_run_counts *counts);
/* Forwards a guest's call of name with args: validation, the allow list,
 * approval, the per-run caps, the call, and the result made what the
 * stubs expect. On failure *ret_message (and *ret_type, the name of the
 * exception class in the stubs) are malloc'd. */
tool_fail mcp_hub_call(mcp_hub *h, const char *name, const json_t *args,
                       const tool_call_bounds *bounds, mcp_run_counts *counts,
                       airlock_tool_approver_fn approver, void *approver_data, json_t **ret_result,
                       char **ret_message, char **ret_type);
/* The time mcp_hub_start spent making the stubs from the tool lists (naming
 * the tools, writing the package), without the servers' start: for bench. */
uint64_t mcp_hub_stubs_ns(const mcp_hub *h);
/* For the description: the number of servers, and each one's module name
 * and tool count. */
size_t mcp_hub_servers(const mcp_hub *h);
const char *mcp_hub_server_module(const mcp_hub *h, size_t i);
const char *mcp_hub_server_name(const mcp_hub *h, size_t i);
size_t mcp_hub_server_tools(const mcp_hub *h, size_t i);

#endif
