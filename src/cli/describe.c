/* airlock describe: prints the execute_code tool description and the agent
 * instructions that `airlock mcp` would serve for the same options. It
 * starts the sandbox, so that the packages it names are the guest's own. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

int cmd_describe(int argc, char **argv)
{
        cli_options o;
        airlock_error err = {0};
        int r = cli_parse_options(argc, argv, CLI_DESCRIBE, &o, &err);
        if (r == 1) {
                cli_usage(CLI_DESCRIBE, stdout);
                return EXIT_OK;
        }
        if (r < 0) {
                fprintf(stderr, "airlock describe: %s\n", err.message);
                return EXIT_USAGE;
        }
        int status = EXIT_OK;
        airlock_sandbox *sb = NULL;
        r = airlock_sandbox_new(o.cfg, &sb, &err);
        if (r < 0 && err.kind == AIRLOCK_ERROR_INPUT) {
                fprintf(stderr, "airlock describe: %s\n", err.message);
                cli_options_free(&o);
                return EXIT_USAGE;
        }
        /* Without a sandbox (a kernel feature is missing), the texts say
         * what the configuration alone tells. */
        if (r < 0)
                fprintf(stderr, "airlock describe: warning: %s; the packages are not listed\n",
                        err.message);
        print_warnings(airlock_sandbox_warnings(sb), "airlock describe");
        if (o.json) {
                char *text = sb ? airlock_sandbox_describe_json(sb, &err)
                                : airlock_describe_json(o.cfg, &err);
                if (text) {
                        printf("%s\n", text);
                        free(text);
                } else {
                        status = EXIT_USAGE;
                }
        } else {
                char *desc = NULL, *instr = NULL;
                r = sb ? airlock_sandbox_describe(sb, &desc, &instr, &err)
                       : airlock_describe(o.cfg, &desc, &instr, &err);
                if (r >= 0) {
                        printf("# Tool: execute_code\n\n%s\n# Agent instructions\n\n%s", desc,
                               instr);
                        free(desc);
                        free(instr);
                } else {
                        status = EXIT_USAGE;
                }
        }
        airlock_sandbox_close(sb);
        if (status != EXIT_OK)
                fprintf(stderr, "airlock describe: %s\n", err.message);
        if (fflush(stdout) != 0 && status == EXIT_OK) {
                fprintf(stderr, "airlock describe: cannot write to standard output\n");
                status = EXIT_USAGE;
        }
        cli_options_free(&o);
        return status;
}
