/* airlock: the command line. Each command lives in its own file. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "trace.h"

/* The spans still queued get at most 2 s to reach the collector at exit
 * (serve gives them its --grace, cmd_serve). */
#define TRACE_EXIT_MS 2000

static int command(int argc, char **argv);

int main(int argc, char **argv)
{
        int status = command(argc, argv);
        al_trace_shutdown(TRACE_EXIT_MS);
        return status;
}

static int command(int argc, char **argv)
{
        if (argc < 2) {
                cli_usage_main(stderr);
                return EXIT_USAGE;
        }
        const char *cmd = argv[1];
        if (strcmp(cmd, "run") == 0)
                return cmd_run(argc - 1, argv + 1);
        if (strcmp(cmd, "mcp") == 0)
                return cmd_mcp(argc - 1, argv + 1);
        if (strcmp(cmd, "serve") == 0)
                return cmd_serve(argc - 1, argv + 1);
        if (strcmp(cmd, "describe") == 0)
                return cmd_describe(argc - 1, argv + 1);
        if (strcmp(cmd, "repl") == 0)
                return cmd_repl(argc - 1, argv + 1);
        if (strcmp(cmd, "kernel") == 0)
                return cmd_kernel(argc - 1, argv + 1);
        if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
                printf("airlock %s\n", AIRLOCK_VERSION);
                return EXIT_OK;
        }
        if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
                /* The option table for other readers: the man page, the
                 * documents' table, the shell's completion. */
                const char *what = argc > 2 ? argv[2] : "";
                if (strcmp(what, "--man") == 0)
                        cli_print_man(stdout);
                else if (strcmp(what, "--markdown") == 0)
                        cli_print_markdown(stdout);
                else if (strcmp(what, "--bash") == 0)
                        cli_print_bash(stdout);
                else if (!*what)
                        cli_usage_main(stdout);
                else {
                        fprintf(stderr, "airlock help: '%s' is not --man, --markdown or --bash\n",
                                what);
                        return EXIT_USAGE;
                }
                return EXIT_OK;
        }
        fprintf(
            stderr,
            "airlock: unknown command '%s' (run, mcp, serve, describe, repl, kernel, version)\n",
            cmd);
        return EXIT_USAGE;
}
