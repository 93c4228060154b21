/* Pieces of `airlock mcp` shared between its files: the tool entry served by
 * tools/list and the conversion of a run's result into an MCP tool result. */
#ifndef AIRLOCK_CLI_MCP_H
#define AIRLOCK_CLI_MCP_H

#include <jansson.h>
#include <stdint.h>

#include "airlock.h"
#include "jsonrpc.h"
#include "mcp_session.h"

/* Where a run's files can be read back: MCP_URI_PREFIX, the run's id (32
 * hex digits from getrandom, so a URI cannot be guessed), then the file's
 * path percent-encoded: airlock://run/3f0c.../output/a%20b.csv. Under
 * `airlock serve` with peers the id starts with the instance's name and
 * "_", as a session handle does (airlock://run/h1_3f0c.../output/a.csv):
 * the host that holds the run's files, to which another instance forwards
 * a resources/read (http/serve_forward.c). */
#define MCP_URI_PREFIX "airlock://run/"
#define MCP_RUN_ID_LEN 32 /* the random part's hex digits */
#define MCP_RUN_ID_MAX (MCP_INSTANCE_MAX + 1 + MCP_RUN_ID_LEN)
/* The _meta key of the run record of a CallToolResult, sent when the
 * tools/call request's params._meta has this key set to true. */
#define MCP_META_RUN "dev.airlock/run"
/* The _meta key of the usage record (docs/design.md, the result JSON's
 * "usage"), sent when the request's params._meta has it, or MCP_META_RUN,
 * set to true. */
#define MCP_META_USAGE "dev.airlock/usage"
/* The _meta key of the handle in the results of session_open and
 * session_close. */
#define MCP_META_SESSION "dev.airlock/session"

/* The CallToolResult of a finished run, each payload once: content items
 * (stdout text; one item per file of /output, sorted: an image item for
 * PNG, JPEG, GIF and WebP, an embedded text resource for text files, a blob
 * resource for the rest, each with its run's URI; on success stderr as
 * text, on failure one text item with stderr and how the run ended; a line
 * for stdout or stderr cut at max_stdout bytes; a line naming what /output
 * refused), isError when the run failed, and, with run_record, _meta[MCP_META_RUN]: {id,
 * status, exit_code, duration_ms, stdout_bytes, stdout_truncated,
 * stderr_bytes, stderr_truncated, files [{path, uri, media_type, size}],
 * refused [{path, reason}], parts (the kind of each content item: "stdout",
 * "file", "stderr", "error", "notice", "refused" or "empty")}. NULL when out
 * of memory. */
json_t *mcp_tool_result(const airlock_result *res, const char *run_id, uint64_t max_stdout,
                        bool run_record);

/* Adds res's usage record to result (a CallToolResult of mcp_tool_result)
 * as _meta[MCP_META_USAGE]. */
void mcp_result_add_usage(json_t *result, const airlock_result *res);

/* A CallToolResult that reports a failure to run at all (isError, one text
 * item). */
json_t *mcp_tool_error(const char *message);
/* mcp_tool_error of the formatted message (at most 1 KiB), made valid UTF-8:
 * it may quote what the client sent. */
json_t *mcp_tool_refusal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* MCP_URI_PREFIX run_id path, every byte of path outside the unreserved set
 * and '/' percent-encoded. Malloc'd. */
char *mcp_resource_uri(const char *run_id, const char *path);

/* The contents entry of a file for resources/read and embedded resources:
 * {uri, mimeType, text} when the file is text (by its media type, or an
 * application/octet-stream file that is valid UTF-8 without U+0000, served
 * as text/plain), else {uri, mimeType, blob}. The bytes are never altered:
 * a text-typed file that is not valid UTF-8 goes as a blob. */
json_t *mcp_resource_contents(const airlock_file *f, const char *uri);
/* The media type a file is served as text with (see above), or NULL when it
 * goes as a blob. */
const char *mcp_text_type(const airlock_file *f);

/* The files of recent runs, for resources/read and resources/list, bounded
 * in runs, bytes and age (the caps are in mcp_resources.c). Thread-safe. */
typedef struct mcp_store mcp_store;

int mcp_store_new(mcp_store **ret);
void mcp_store_free(mcp_store *st);
/* Run ids made from now on name instance ("<instance>_" before the random
 * part): `airlock serve` with peers. Called before any run. */
void mcp_store_name_runs(mcp_store *st, const char *instance);
/* A new run id: the store's instance and "_" if it names one, then
 * MCP_RUN_ID_LEN hex digits, and a NUL. Returns 0 or -errno. */
int mcp_run_id(const mcp_store *st, char out[MCP_RUN_ID_MAX + 1]);
/* Copies the instance a resource URI's run id names to out; false when it
 * names none (the form without peers, or not a URI of a run at all). */
bool mcp_resource_uri_instance(const char *uri, char out[MCP_INSTANCE_MAX + 1]);

/* Raises this process's soft limit on open files to its hard limit (at
 * most 1 << 20): a server holds a few fds for each workspace it has staged
 * (a tenant's, kept while idle), and 1024 is the usual soft default. */
void mcp_raise_fd_limit(void);
/* Keeps a copy of the files of res under run_id (none when it has no
 * files or they are larger than the store) and frees res; drops the oldest
 * runs past the caps. */
void mcp_store_keep(mcp_store *st, const char *run_id, const char *owner, airlock_result *res);
/* Drops every run of owner (a tenant removed from the tokens file). */
void mcp_store_forget(mcp_store *st, const char *owner);
/* The longest owner (mcp_sink.owner) a session or a stored run records. */
#ifndef MCP_OWNER_MAX
#define MCP_OWNER_MAX 64
#endif
/* owner (mcp_sink.owner, NULL on stdio) is who made the run, or who asks:
 * a run's files answer only to the same owner. */
/* The result of resources/list: the files held, newest run first, a page
 * at a time (cursor NULL for the first), or NULL with the JSON-RPC error
 * code in *ret_code and the message in err. */
json_t *mcp_store_list(mcp_store *st, const char *owner, const char *cursor, int *ret_code,
                       airlock_error *err);
/* The result of resources/read for uri, or NULL with the JSON-RPC error
 * code in *ret_code and the message in err. */
json_t *mcp_store_read(mcp_store *st, const char *owner, const char *uri, int *ret_code,
                       airlock_error *err);

#endif
