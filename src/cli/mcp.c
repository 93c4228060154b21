/* airlock mcp: the MCP server on stdio (src/mcp/mcp_stdio.c), run through
 * the server's face (mcp_service.h). This file owns what is the command's:
 * its options, its signals and its exit status. */
#include <signal.h>
#include <stdio.h>

#include "base.h"
#include "cli.h"
#include "mcp_service.h"

static void cli_options_freep(cli_options *o)
{
        cli_options_free(o);
}

static void mcp_service_freep(mcp_service **svc)
{
        mcp_service_free(*svc);
}

int cmd_mcp(int argc, char **argv)
{
        _cleanup_(cli_options_freep) cli_options o = {0};
        airlock_error err = {0};
        int r = cli_parse_options(argc, argv, CLI_MCP, &o, &err);
        if (r == 1) {
                cli_usage(CLI_MCP, stdout);
                return EXIT_OK;
        }
        if (r < 0) {
                fprintf(stderr, "airlock mcp: %s\n", err.message);
                return EXIT_USAGE;
        }
        /* A client that goes away must not kill the server in the middle of
         * closing its sandboxes: writes then fail with EPIPE instead. */
        signal(SIGPIPE, SIG_IGN);
        int stop_fd = cli_signal_pipe(false);
        mcp_service_options so = {
            .caps = o.caps,
            .audit = o.audit,
            .tenants_dir = o.tenants_dir,
            .tenant = o.tenant,
            .ws_max_files = o.ws_max_files,
            .ws_max_bytes = o.ws_max_bytes,
            .has_servers = o.has_servers,
            /* Without a pipe the signals keep their default action. */
            .signal_fd = stop_fd < 0 ? -1 : stop_fd,
        };
        _cleanup_(mcp_service_freep) mcp_service *svc = NULL;
        r = mcp_service_new(TAKE_PTR(o.cfg), &so, &svc, &err);
        if (r >= 0)
                r = mcp_service_run_stdio(svc, &err);
        if (r < 0) {
                fprintf(stderr, "airlock mcp: %s\n", err.message);
                return cli_exit_status(&err);
        }
        return EXIT_OK;
}
