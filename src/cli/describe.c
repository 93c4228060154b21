/* airlock describe: prints the execute_code tool description and the agent
 * instructions that `airlock mcp` would serve for the same options. It
 * starts the sandbox, so that the packages it names are the guest's own. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "base.h"
#include "cli.h"
#include "mcp_service.h"

/* The library's description as JSON with the server's instructions in
 * place of the library's (mcp_service_instructions), as `airlock mcp`
 * serves them. malloc'd, or NULL. */
static char *server_json(char *library_json)
{
        _cleanup_free_ char *text = library_json;
        json_t *d = text ? json_loads(text, 0, NULL) : NULL;
        _cleanup_free_ char *instr =
            mcp_service_instructions(json_string_value(json_object_get(d, "instructions")));
        char *out = NULL;
        if (instr && json_object_set_new(d, "instructions", json_string(instr)) == 0)
                out = json_dumps(d, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(d);
        return out;
}

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
                char *text = server_json(sb ? airlock_sandbox_describe_json(sb, &err)
                                            : airlock_describe_json(o.cfg, &err));
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
                _cleanup_free_ char *served = r >= 0 ? mcp_service_instructions(instr) : NULL;
                if (served) {
                        printf("# Tool: execute_code\n\n%s\n# Agent instructions\n\n%s", desc,
                               served);
                } else {
                        status = EXIT_USAGE;
                }
                free(desc);
                free(instr);
        }
        airlock_sandbox_close(sb);
        if (status != EXIT_OK && !err.message[0])
                snprintf(err.message, sizeof(err.message), "out of memory");
        if (status != EXIT_OK)
                fprintf(stderr, "airlock describe: %s\n", err.message);
        if (fflush(stdout) != 0 && status == EXIT_OK) {
                fprintf(stderr, "airlock describe: cannot write to standard output\n");
                status = EXIT_USAGE;
        }
        cli_options_free(&o);
        return status;
}
