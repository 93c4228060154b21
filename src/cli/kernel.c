/* airlock kernel: the Jupyter kernel (src/kernel/kernel.c, docs/jupyter.md),
 * run through the kernel's face (kernel_service.h). This file owns what is
 * the command's: its options, its signals and its exit status;
 * `airlock kernel install` is kernel_install.c. */
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "cli.h"
#include "kernel_service.h"

static void cli_options_freep(cli_options *o)
{
        cli_options_free(o);
}

static void kernel_service_freep(kernel **k)
{
        kernel_service_free(*k);
}

static void kernel_usage(FILE *f)
{
        cli_usage(CLI_KERNEL, f);
        fputs(
            "\nJupyter starts `airlock kernel -f CONNECTION_FILE [OPTIONS]` from the kernelspec "
            "that\n"
            "`airlock kernel install [--user | --prefix DIR] [--name NAME] [--display-name TEXT]\n"
            "[OPTIONS]` writes, with the sandbox's OPTIONS in it. A failed cell rolls back.\n",
            f);
}

/* Takes -f FILE / --connection-file FILE out of argv (the option table's
 * row is for the help; the sandbox's options go to the shared parser). */
static int take_connection_file(int *argc, char **argv, const char **ret)
{
        int out = 1;
        for (int i = 1; i < *argc; i++) {
                const char *a = argv[i];
                if ((strcmp(a, "-f") == 0 || strcmp(a, "--connection-file") == 0) &&
                    i + 1 < *argc) {
                        *ret = argv[++i];
                        continue;
                }
                if (strncmp(a, "--connection-file=", 18) == 0) {
                        *ret = a + 18;
                        continue;
                }
                if (strncmp(a, "-f", 2) == 0 && a[2]) {
                        *ret = a + 2;
                        continue;
                }
                argv[out++] = argv[i];
        }
        argv[out] = NULL;
        *argc = out;
        return 0;
}

int cmd_kernel(int argc, char **argv)
{
        if (argc > 1 && strcmp(argv[1], "install") == 0)
                return kernel_install(argc - 1, argv + 1);
        for (int i = 1; i < argc; i++)
                if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
                        kernel_usage(stdout);
                        return EXIT_OK;
                }
        const char *conn_file = NULL;
        take_connection_file(&argc, argv, &conn_file);
        _cleanup_(cli_options_freep) cli_options o = {0};
        airlock_error err = {0};
        int r = cli_parse_options(argc, argv, CLI_KERNEL, &o, &err);
        if (r == 1) {
                kernel_usage(stdout);
                return EXIT_OK;
        }
        if (r < 0) {
                fprintf(stderr, "airlock kernel: %s\n", err.message);
                return EXIT_USAGE;
        }
        if (!conn_file) {
                fprintf(stderr, "airlock kernel: -f CONNECTION_FILE is required (Jupyter passes "
                                "it: see airlock kernel install)\n");
                return EXIT_USAGE;
        }
        _cleanup_(kernel_service_freep) kernel *k = NULL;
        r = kernel_service_new(TAKE_PTR(o.cfg), conn_file, &k, &err);
        if (r >= 0) {
                print_warnings(kernel_service_warnings(k), "airlock kernel");
                r = kernel_service_run(k, cli_signal_pipe(true), &err);
        }
        if (r < 0) {
                fprintf(stderr, "airlock kernel: %s\n", err.message);
                return cli_exit_status(&err);
        }
        return r == 0 ? EXIT_OK : EXIT_SANDBOX;
}
