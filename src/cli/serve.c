/* airlock serve: the MCP server over Streamable HTTP (src/mcp/http/serve.c),
 * run through the server's face (mcp_service.h). This file owns what is
 * the command's: its options (parsed again for each reload), its signals
 * and its exit status. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cli.h"
#include "trace.h"
#include "mcp_service.h"

/* The command's arguments as given, kept before the parser permutes argv:
 * a reload parses them all again and takes the configuration. */
typedef struct serve_argv {
        int argc;
        char **argv;
} serve_argv;

static void cli_options_freep(cli_options *o)
{
        cli_options_free(o);
}

static void mcp_service_freep(mcp_service **svc)
{
        mcp_service_free(*svc);
}

/* The reload callback (mcp_reload_fn): the configuration from the same
 * configuration options, read again. */
static int reload_config(void *arg, airlock_config **ret, airlock_error *err)
{
        const serve_argv *a = arg;
        /* The parser permutes its argv: a fresh copy each time. */
        _cleanup_free_ char **av = calloc((size_t)a->argc + 1, sizeof(*av));
        if (!av)
                return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -ENOMEM, NULL, "out of memory");
        memcpy(av, a->argv, (size_t)a->argc * sizeof(*av));
        _cleanup_(cli_options_freep) cli_options o = {0};
        int r = cli_parse_options(a->argc, av, CLI_SERVE, &o, err);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(o.cfg);
        return 0;
}

/* The options the server takes, from the command's. */
static mcp_service_options service_options(const cli_options *o, int signal_fd)
{
        return (mcp_service_options){
            .caps = o->caps,
            .audit = o->audit,
            .tenants_dir = o->tenants_dir,
            .tenant = o->tenant,
            .ws_max_files = o->ws_max_files,
            .ws_max_bytes = o->ws_max_bytes,
            .has_servers = o->has_servers,
            .http = o->serve,
            .signal_fd = signal_fd,
        };
}

int cmd_serve(int argc, char **argv)
{
        _cleanup_free_ char **cfg_argv = calloc((size_t)argc + 1, sizeof(*cfg_argv));
        if (!cfg_argv) {
                fprintf(stderr, "airlock serve: out of memory\n");
                return EXIT_SANDBOX;
        }
        memcpy(cfg_argv, argv, (size_t)argc * sizeof(*cfg_argv));
        serve_argv again = {.argc = argc, .argv = cfg_argv};

        _cleanup_(cli_options_freep) cli_options o = {0};
        airlock_error err = {0};
        int r = cli_parse_options(argc, argv, CLI_SERVE, &o, &err);
        if (r == 1) {
                cli_usage(CLI_SERVE, stdout);
                return EXIT_OK;
        }
        if (r < 0) {
                fprintf(stderr, "airlock serve: %s\n", err.message);
                return EXIT_USAGE;
        }
        serve_quota_defaults(&o.serve, o.caps.max_sessions);
        signal(SIGPIPE, SIG_IGN);
        int sig_fd = cli_signal_pipe(true);
        if (sig_fd < 0) {
                fprintf(stderr, "airlock serve: cannot watch signals: %s\n", strerror(-sig_fd));
                return EXIT_SANDBOX;
        }

        mcp_service_options so = service_options(&o, sig_fd);
        _cleanup_(mcp_service_freep) mcp_service *svc = NULL;
        r = mcp_service_new(TAKE_PTR(o.cfg), &so, &svc, &err);
        if (r >= 0)
                r = mcp_service_run_http(svc, reload_config, &again, &err);
        /* What the server's end traced (its sessions' closes), then the
         * spans still queued, within the grace the calls had. */
        mcp_service_free(TAKE_PTR(svc));
        al_trace_shutdown((unsigned)(so.http.grace_s * 1000));
        if (r < 0) {
                fprintf(stderr, "airlock serve: %s\n", err.message);
                return cli_exit_status(&err);
        }
        return EXIT_OK;
}
