/* The Jupyter kernel's one face, as mcp_service.h is the MCP server's: what
 * its front-end (the command line's `airlock kernel`, src/cli/kernel.c)
 * needs to run it, and nothing more. new, then one run, then free.
 *
 * The kernel never parses a command line: the front-end parses its own,
 * hands over the configuration and the connection file, and owns the
 * process's signals (a pipe the kernel watches), what is printed of an
 * error and the exit status (from the error record's kind). While it runs
 * the kernel logs to standard error itself, one line per event, as a
 * server does. */
#ifndef AIRLOCK_KERNEL_SERVICE_H
#define AIRLOCK_KERNEL_SERVICE_H

#include "airlock.h"

typedef struct kernel kernel;

/* Takes cfg (freed by kernel_service_free, and on failure), reads the
 * connection file (jupyter_client's), opens libzmq, starts a sandbox of cfg
 * and its session and loads the kernel's Python side into it. Returns 0 or
 * -errno with err filled: err->kind is AIRLOCK_ERROR_INPUT when the
 * connection file, libzmq or the configuration are at fault. *ret needs
 * kernel_service_free either way. */
int kernel_service_new(airlock_config *cfg, const char *conn_file, kernel **ret,
                       airlock_error *err);

/* The sandbox's warnings (airlock_sandbox_warnings), for the front-end to
 * print; NULL when there are none. */
const char *kernel_service_warnings(const kernel *k);

/* Binds the connection file's sockets and serves Jupyter's messages until a
 * shutdown_request, a signal on sig_fd (readable with one byte, the
 * signal's number, for each signal: SIGINT interrupts the cell, SIGTERM and
 * SIGHUP end the kernel; -1 for none) or the session's end. Returns 0 after
 * a shutdown or a signal, 1 when the session or ZeroMQ failed (the kernel
 * logged why), or -errno with err filled when it could not start: kind
 * AIRLOCK_ERROR_INPUT when a socket could not be bound, AIRLOCK_ERROR_SANDBOX
 * when this process lacked the resources. */
int kernel_service_run(kernel *k, int sig_fd, airlock_error *err);

void kernel_service_free(kernel *k);

#endif
