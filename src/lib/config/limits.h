/* The limits table: every field of airlock_limits, once, with everything the
 * code says about it. The defaults, the checks of airlock_config_set_limits,
 * the cache fingerprint, the template's parameters, the command line's
 * options and usage lines and the tool description are all generated from
 * it, so that a limit cannot be added to one of them and forgotten in the
 * others. limits.c fails the build when this table and the struct in
 * airlock.h disagree (a field in one and not the other, another order or
 * another type).
 *
 * Columns of X(name, type, default, min, max, tpl, option, unit, help, rank,
 * before, after):
 *   name      the field of airlock_limits; rows are in the struct's order
 *   type      D (double), U32 (uint32_t) or U64 (uint64_t)
 *   default   what airlock_limits_default sets
 *   min, max  the range airlock_config_set_limits accepts, both included
 *   tpl       1 when the template needs the value (sent in its parameters)
 *   option    the command line's --OPTION, or NULL when it has none
 *   unit      the unit of the option's value: SEC, MIB, KIB, N (and B, bytes,
 *             for rows without an option)
 *   help      the usage line of the option
 *   rank      the place of the limit in the tool description (1 first), or 0
 *   before, after  the description's words around the value
 */
#ifndef AIRLOCK_CONFIG_LIMITS_H
#define AIRLOCK_CONFIG_LIMITS_H

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "airlock.h"

#define LIMIT_KIB (1ull << 10)
#define LIMIT_MIB (1ull << 20)
#define LIMIT_GIB (1ull << 30)
#define LIMIT_TIB (1ull << 40)

/* clang-format off */
#define AIRLOCK_LIMITS(X)                                                                          \
        X(timeout_s, D, 30, 0.001, 86400, 1, "timeout", SEC, "wall-clock limit of one run",       \
          1, "", " wall clock, ")                                                                  \
        /* 0: the wall-clock limit (template.c) */                                                 \
        X(cpu_s, D, 0, 0, HUGE_VAL, 1, NULL, SEC, "", 0, "", "")                                   \
        X(memory_bytes, U64, 512 * LIMIT_MIB, 16 * LIMIT_MIB, LIMIT_TIB, 1, "memory", MIB,        \
          "memory limit of one run", 2, "", " of memory, ")                                        \
        X(pids, U32, 64, 1, 65536, 1, "pids", N, "process/thread limit",                           \
          3, "", " processes and threads; ")                                                       \
        X(open_files, U32, 256, 16, UINT32_MAX, 1, NULL, N, "", 0, "", "")                         \
        /* 0: the larger of tmp_bytes and output_fs_bytes (limits_resolve_sizes) */              \
        X(max_file_bytes, U64, 0, 0, UINT64_MAX, 1, NULL, B, "", 0, "", "")                        \
        /* 0: memory_bytes (limits_resolve_sizes) */                                               \
        X(tmp_bytes, U64, 0, 0, UINT64_MAX, 1, NULL, B, "", 0, "", "")                             \
        /* 0: max_output_total + 1 MiB (sandbox.c) */                                              \
        X(output_fs_bytes, U64, 0, 0, UINT64_MAX, 1, NULL, B, "", 0, "", "")                       \
        X(max_output_file, U64, 16 * LIMIT_MIB, 0, LIMIT_TIB, 0, "max-output-file", MIB,          \
          "capture cap per file", 6, "", " each, ")                                                \
        X(max_output_total, U64, 64 * LIMIT_MIB, 0, LIMIT_TIB, 0, "max-output-total", MIB,        \
          "capture cap in total", 7, "", " in total.")                                             \
        X(max_output_files, U32, 1000, 1, 1000000, 1, "max-output-files", N,                       \
          "capture cap on files", 5, "/output returns at most ", " files, ")                       \
        X(max_output_depth, U32, 64, 0, UINT32_MAX, 0, NULL, N, "", 0, "", "")                     \
        X(max_stdout, U64, 1 * LIMIT_MIB, 1, 4 * LIMIT_GIB, 0, "max-stdout", KIB,                  \
          "cap on each of stdout and stderr", 4, "stdout and stderr are each cut at ", "; ")       \
        X(max_stage_bytes, U64, 4 * LIMIT_GIB, 0, UINT64_MAX, 0, NULL, B, "", 0, "", "")          \
        X(max_stage_files, U64, 100000, 0, UINT64_MAX, 0, NULL, N, "", 0, "", "")                  \
        X(max_stage_depth, U32, 256, 0, UINT32_MAX, 0, NULL, N, "", 0, "", "")                     \
        X(tool_timeout_s, D, 30, 0, HUGE_VAL, 0, NULL, SEC, "", 0, "", "")                         \
        X(http_max_request, U64, 16 * LIMIT_MIB, 0, UINT64_MAX, 0, NULL, B, "", 0, "", "")        \
        X(http_max_response, U64, 16 * LIMIT_MIB, 0, UINT64_MAX, 0, NULL, B, "", 0, "", "")       \
        X(http_timeout_s, D, 30, 0, HUGE_VAL, 0, NULL, SEC, "", 0, "", "")                         \
        /* 1: no burst, one copy ready at a time (sandbox.c) */                                    \
        X(ready_copies, U32, 4, 1, 64, 0, "ready-copies", N,                                       \
          "most copies kept ready for a burst of calls", 0, "", "")
/* clang-format on */

/* The words of the tool description around the limits (describe.c). */
#define LIMITS_DESCRIPTION_BEFORE "\nLimits of one call: "
#define LIMITS_DESCRIPTION_AFTER  " A call that exceeds a limit is stopped and reported as failed.\n"

/* Appends to obj one member per limit the template needs, named as the
 * field: 0, or -ENOMEM. */
int limits_to_json(const airlock_limits *l, json_t *obj);
/* Reads those members back into l; a missing member leaves its field. */
void limits_from_json(airlock_limits *l, const json_t *obj);

/* Every limit as "name=value" separated by spaces, doubles printed exactly
 * (%a), so that two texts are equal exactly when the limits are: malloc'd,
 * or NULL when out of memory. */
char *limits_fingerprint_text(const airlock_limits *l);

/* The sentence of the tool description that states the limits: malloc'd,
 * or NULL when out of memory. */
char *limits_description_text(const airlock_limits *l);

/* The size of airlock_limits in the first version of the growable ABI:
 * a caller's struct is at least this large. A field added later goes at the
 * end of the struct and the table, and this stays. */
#define AIRLOCK_LIMITS_SIZE_V1 (offsetof(airlock_limits, ready_copies) + sizeof(uint32_t))

/* The library's full airlock_limits from a caller's (of in->size bytes):
 * the fields the caller lacks keep their defaults. -EINVAL for a size below
 * the first version's, -E2BIG for fields this library does not know that
 * the caller set; *out holds the defaults then. */
int limits_from_caller(const airlock_limits *in, airlock_limits *out, airlock_error *err);

/* 0 when every limit is in its range, else -EINVAL naming the first field
 * out of range, its value and the range. */
int limits_check(const airlock_limits *l, airlock_error *err);

/* Fills in the sizes whose 0 means "derived from the documented limits":
 * /output's, max_output_total + 1 MiB; /tmp's, the memory limit (a run's
 * files there are its memory); the largest file, the larger of the two,
 * so that a file is bounded by the file system it is on and by nothing
 * that the documented limits do not name. */
void limits_resolve_sizes(airlock_limits *l);

/* "16 MiB", "3 GiB", "1000 bytes": the largest unit that divides bytes. */
void limits_size_text(uint64_t bytes, char *buf, size_t size);

#endif
