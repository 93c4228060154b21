/* airlock's results as jansson values, for programs that use jansson
 * themselves (the library links it). Kept out of airlock.h so that the core
 * API names no other library's types. */
#ifndef AIRLOCK_JANSSON_H
#define AIRLOCK_JANSSON_H

#include <jansson.h>

#include "airlock.h"

#ifdef __cplusplus
extern "C" {
#endif

/* airlock_result_to_json's object as a jansson value, for a program that
 * goes on building on it (an MCP server's tool result) instead of parsing
 * the text again, which costs seconds for a result with tens of MiB of
 * files. The caller owns the reference (json_decref). NULL when out of
 * memory. */
AIRLOCK_PUBLIC json_t *airlock_result_to_jansson(const airlock_result *result);

#ifdef __cplusplus
}
#endif
#endif
