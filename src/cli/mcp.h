/* Pieces of `airlock mcp` shared between its files: the tool entry served by
 * tools/list and the conversion of a run's result into an MCP tool result. */
#ifndef AIRLOCK_CLI_MCP_H
#define AIRLOCK_CLI_MCP_H

#include <jansson.h>

#include "airlock.h"

/* The JSON Schema of structuredContent: the result JSON of DESIGN.md. */
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

#endif
