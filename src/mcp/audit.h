/* The audit file: one JSON line per call with what the run used, for the
 * operator (airlock mcp --audit FILE; airlock serve calls the same). */
#ifndef AIRLOCK_CLI_AUDIT_H
#define AIRLOCK_CLI_AUDIT_H

#include "airlock.h"

/* Opens path for appending (O_APPEND, created 0600, no link followed at
 * the last component): the fd, or -errno with err naming the path. */
int audit_open(const char *path, airlock_error *err);

/* Appends one line to fd (>= 0; -1 writes nothing):
 *   {"time": RFC 3339 UTC, "transport": transport, "call": call_id or null,
 *    "session": session or null, "status": the run's status or "not run",
 *    "exit_code", "usage": the result's usage record}
 * and never the code, its output, a file's contents or a secret: the usage
 * record names tools, methods and URLs without their query strings. The
 * line goes out in one write(), so that lines of concurrent calls (and of
 * other processes appending to the same file) never interleave. res may be
 * NULL for a call that did not run. Returns 0 or -errno. */
int audit_write(int fd, const char *transport, const char *call_id, const char *session,
                const airlock_result *res);

#endif
