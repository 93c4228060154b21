/* Fuzzes the command-line parser: the input is split at NUL bytes into argv
 * (argv[0] fixed), the first byte picks the command. */
#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* glibc keeps a pointer into the last argv between getopt calls unless
 * optind is 0; cli_parse_options sets optind to 1, so a parse that stopped
 * inside a cluster ("-hy") would leave a pointer into this input's freed
 * argv. A real process parses once; here we reset fully after each input. */
static void reset_getopt(void)
{
        static char arg0[] = "x";
        char *argv[] = {arg0, NULL};
        optind = 0;
        opterr = 0;
        while (getopt(1, argv, "") != -1) {
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1 || size > 4096)
                return 0;
        static const cli_command cmds[] = {CLI_RUN, CLI_MCP, CLI_SERVE, CLI_DESCRIBE, CLI_REPL};
        cli_command cmd = cmds[data[0] % 5];
        char *buf = malloc(size);
        if (!buf)
                return 0;
        memcpy(buf, data + 1, size - 1);
        buf[size - 1] = '\0';
        size_t len = size - 1;
        /* At most len / 1 + 2 entries: one per NUL-terminated piece. */
        char **argv = calloc(len + 3, sizeof(char *));
        if (!argv) {
                free(buf);
                return 0;
        }
        int argc = 0;
        static char name[] = "run";
        argv[argc++] = name;
        for (size_t i = 0; i < len;) {
                argv[argc++] = buf + i;
                i += strlen(buf + i) + 1;
        }
        argv[argc] = NULL;
        cli_options o;
        memset(&o, 0xa5, sizeof(o));
        airlock_error err = {0};
        int r = cli_parse_options(argc, argv, cmd, &o, &err);
        if (r < 0 && !err.message[0])
                abort();
        if (r == 0)
                cli_options_free(&o);
        reset_getopt();
        free(argv);
        free(buf);
        return 0;
}
