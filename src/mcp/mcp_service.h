/* The MCP server's one face: what a front-end (the command line's `airlock
 * mcp` and `airlock serve`, a kernel) needs to run it, and nothing more:
 * the server's options and its life. new, then one run (on stdio, or over
 * Streamable HTTP with a reload callback), then free.
 *
 * The server never parses a command line: the front-end parses its own,
 * hands over the options and the configuration, and owns the process's
 * signals (a pipe the server watches) and its exit status (from the error
 * record's kind). On a reload (SIGHUP of airlock serve) the server asks the
 * front-end for a new configuration through the callback. */
#ifndef AIRLOCK_MCP_SERVICE_H
#define AIRLOCK_MCP_SERVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "airlock.h"
#include "mcp_session.h"
#include "serve.h"

typedef struct mcp_service_options {
        mcp_session_caps caps; /* the session options (--max-sessions, ...) */
        /* --audit FILE: one JSON line per call (audit.h), or NULL. */
        const char *audit;
        /* --tenants-dir DIR (or NULL), --tenant NAME (NULL: "default"),
         * and the default caps of each tenant's workspace. */
        const char *tenants_dir;
        const char *tenant;
        uint64_t ws_max_files, ws_max_bytes;
        bool has_servers; /* the configuration names upstream MCP servers */
        /* The HTTP transport's options (mcp_service_run_http only), the
         * per-token quotas already filled (serve_quota_defaults). */
        serve_options http;
        /* Readable with one byte, the signal's number, for each SIGTERM,
         * SIGINT or SIGHUP the front-end receives; -1 when none are watched.
         * On stdio any of them stops the server; over HTTP SIGHUP reloads
         * and the others drain. */
        int signal_fd;
} mcp_service_options;

typedef struct mcp_service mcp_service;

/* A new configuration for a reload: *ret gets one the caller takes, or the
 * callback returns -errno with err filled (the server keeps the old one). */
typedef int (*mcp_reload_fn)(void *arg, airlock_config **ret, airlock_error *err);

/* Takes cfg (freed by mcp_service_free, and on failure) and a copy of o;
 * the strings o points to must outlive the service. Raises the soft limit
 * on open files (mcp_raise_fd_limit). Returns 0 or -ENOMEM with err filled;
 * *ret needs mcp_service_free either way. */
int mcp_service_new(airlock_config *cfg, const mcp_service_options *o, mcp_service **ret,
                    airlock_error *err);

/* Serves MCP on standard input and output until end of input, a signal or
 * the loss of the client (mcp_stdio.c). Returns 0, or -errno with err
 * filled when the server could not start or its sandbox could not be built:
 * err->kind is AIRLOCK_ERROR_INPUT then (the options or the configuration
 * are at fault). */
int mcp_service_run_stdio(mcp_service *svc, airlock_error *err);

/* Serves MCP over Streamable HTTP (http/serve.c) until SIGTERM or SIGINT,
 * then drains; on SIGHUP reloads the tokens and the configuration, which
 * reload gives (reload_arg its argument). Returns 0, or -errno with err
 * filled: err->kind is AIRLOCK_ERROR_INPUT when the options, a file they
 * name or the configuration are at fault, AIRLOCK_ERROR_SANDBOX when this
 * process lacked the resources (memory, a watch of its connections). */
int mcp_service_run_http(mcp_service *svc, mcp_reload_fn reload, void *reload_arg,
                         airlock_error *err);

void mcp_service_free(mcp_service *svc);

/* The agent instructions `airlock mcp` serves (without --tenants-dir) for
 * the library's (airlock_describe): their first sentence names the tools
 * its tools/list gives, for `airlock describe` to print the server's very
 * text. malloc'd, or NULL when out of memory. */
char *mcp_service_instructions(const char *library);

#endif
