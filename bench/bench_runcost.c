/* The library's side of bench_runcost.py ("cost of a run"): one sandbox,
 * with the preloads named on the command line, that runs CODE once for each
 * line read from standard input and answers each with a line ("ok", or
 * "error: ..." and exit). The caller times nothing here: it reads the CPU
 * of this process's whole tree from a cgroup of its own around the calls,
 * so this program is only what a library caller does per run.
 *
 * usage: bench_runcost PRELOADS|- CODE
 * PRELOADS: modules separated by commas, or "-" for none.
 *    or: bench_runcost --filter FILE
 * writes the guest's seccomp filter, as a template with a cgroup builds
 * it, to FILE (raw BPF), for the floor of the isolation
 * (bench_runcost_iso.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "airlock.h"
#include "template/template.h"

static int write_filter(const char *path)
{
        struct sock_fprog prog;
        char errbuf[256];
        if (seccomp_build_guest_filter(&prog, false, false, errbuf, sizeof(errbuf)) < 0) {
                fprintf(stderr, "bench_runcost: %s\n", errbuf);
                return 1;
        }
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(prog.filter, sizeof(prog.filter[0]), prog.len, f) != prog.len ||
            fclose(f) != 0) {
                perror(path);
                return 1;
        }
        free(prog.filter);
        return 0;
}

int main(int argc, char **argv)
{
        if (argc == 3 && strcmp(argv[1], "--filter") == 0)
                return write_filter(argv[2]);
        if (argc != 3) {
                fprintf(stderr, "usage: bench_runcost PRELOADS|- CODE\n");
                return 2;
        }
        airlock_error err;
        airlock_config *cfg;
        if (airlock_config_new(&cfg, &err) < 0)
                return 1;
        if (strcmp(argv[1], "-") != 0) {
                char *list = strdup(argv[1]);
                for (char *save = NULL, *m = strtok_r(list, ",", &save); m;
                     m = strtok_r(NULL, ",", &save))
                        if (airlock_config_add_preload(cfg, m, &err) < 0) {
                                fprintf(stderr, "bench_runcost: %s\n", err.message);
                                return 1;
                        }
                free(list);
        }
        airlock_sandbox *sb;
        if (airlock_sandbox_new(cfg, &sb, &err) < 0) {
                fprintf(stderr, "bench_runcost: %s\n", err.message);
                return 1;
        }
        const char *code = argv[2];
        char line[64];
        while (fgets(line, sizeof(line), stdin)) {
                airlock_result *res;
                if (airlock_sandbox_run(sb, code, strlen(code), NULL, &res, &err) < 0) {
                        printf("error: %s\n", err.message);
                        return 1;
                }
                if (!res->success) {
                        printf("error: the run failed: %.200s\n", res->stderr_data);
                        return 1;
                }
                airlock_result_free(res);
                printf("ok\n");
                fflush(stdout);
        }
        airlock_sandbox_close(sb);
        airlock_config_free(cfg);
        return 0;
}
