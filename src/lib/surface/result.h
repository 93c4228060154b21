/* The result JSON of docs/design.md as a jansson value, for the code in this
 * project that goes on building on it (the MCP server's CallToolResult)
 * instead of encoding the text and parsing it again. */
#ifndef AIRLOCK_RESULT_H
#define AIRLOCK_RESULT_H

#include <jansson.h>

#include "airlock.h"

/* The object airlock_result_to_json() encodes; NULL when out of memory. */
json_t *result_json(const airlock_result *r);
/* The result JSON's "usage" object (docs/design.md); NULL when out of memory. */
json_t *result_usage_json(const airlock_usage *u);

#endif
