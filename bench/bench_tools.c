/* What a host tool call costs on top of the command itself.
 *
 * For each command: the median time of tools_call() (validation, spawn,
 * stdin, stdout, JSON parse, reap) against the median time of starting the
 * same command alone with posix_spawn() and waiting for it (stdin and
 * stdout /dev/null). Also a C callback tool, where only validation and JSON
 * work remain. Usage: bench_tools [N] (default 200 runs each). */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "host/tools.h"
#include "core/util.h"

extern char **environ;

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

static double median_us(uint64_t *v, int n)
{
        qsort(v, (size_t)n, sizeof(*v), cmp_u64);
        return (double)v[n / 2] / 1000.0;
}

/* The command alone: spawn, wait. */
static double bare(char *const argv[], int n)
{
        uint64_t *t = calloc((size_t)n, sizeof(*t));
        for (int i = 0; i < n; i++) {
                posix_spawn_file_actions_t fa;
                posix_spawn_file_actions_init(&fa);
                posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
                posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
                uint64_t t0 = al_now_ns();
                pid_t pid;
                if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) == 0)
                        waitpid(pid, NULL, 0);
                t[i] = al_now_ns() - t0;
                posix_spawn_file_actions_destroy(&fa);
        }
        double m = median_us(t, n);
        free(t);
        return m;
}

static double via_registry(const tool_registry *reg, const char *name, int n)
{
        uint64_t *t = calloc((size_t)n, sizeof(*t));
        json_t *args = json_pack("{s:s,s:i}", "text", "hello", "n", 42);
        for (int i = 0; i < n; i++) {
                json_t *res = NULL;
                char *msg = NULL;
                uint64_t t0 = al_now_ns();
                tool_fail f = tools_call(reg, name, args, &res, &msg);
                t[i] = al_now_ns() - t0;
                if (f != TOOL_OK) {
                        fprintf(stderr, "bench_tools: %s failed: %s\n", name, msg);
                        exit(1);
                }
                json_decref(res);
        }
        json_decref(args);
        double m = median_us(t, n);
        free(t);
        return m;
}

static int echo_fn(void *userdata, const char *args, char **ret, char **ret_err)
{
        *ret = strdup(args);
        return 0;
}

int main(int argc, char **argv)
{
        int n = argc > 1 ? atoi(argv[1]) : 200;
        if (n < 1)
                n = 1;
        char dir[] = "/tmp/airlock-bench-tools-XXXXXX";
        if (!mkdtemp(dir))
                return 1;
        char file[128];
        snprintf(file, sizeof(file), "%s/tools.json", dir);
        FILE *f = fopen(file, "w");
        fputs("{\"tools\":[{\"name\":\"cat\",\"command\":[\"/bin/cat\"],"
              "\"parameters\":{\"properties\":{\"text\":{\"type\":\"string\"},"
              "\"n\":{\"type\":\"integer\"}},\"required\":[\"text\"]}},"
              "{\"name\":\"py\",\"parameters\":{\"additionalProperties\":true},\"command\":[\"/usr/"
              "bin/python3\",\"-S\",\"-c\","
              "\"import sys; sys.stdout.write(sys.stdin.read())\"]}]}",
              f);
        fclose(f);
        tool_registry *reg;
        airlock_error err = {0};
        airlock_tool_def def = {.size = sizeof(airlock_tool_def),
                                .name = "callback",
                                .parameters_json = "{\"additionalProperties\":true}",
                                .fn = echo_fn};
        if (tools_new(&reg, &err) < 0 || tools_load_file(reg, file, 30, &err) < 0 ||
            tools_add_callback(reg, &def, &err) < 0) {
                fprintf(stderr, "bench_tools: %s\n", err.message);
                return 1;
        }
        char *cat[] = {"/bin/cat", NULL};
        char *py[] = {"/usr/bin/python3", "-S", "-c",
                      "import sys; sys.stdout.write(sys.stdin.read())", NULL};
        double cat_bare = bare(cat, n), cat_call = via_registry(reg, "cat", n);
        int pn = n > 50 ? 50 : n;
        double py_bare = bare(py, pn), py_call = via_registry(reg, "py", pn);
        double cb = via_registry(reg, "callback", n);
        printf("%-34s %12s %12s %12s\n", "command tool (median of runs)", "alone us", "call us",
               "overhead us");
        printf("%-34s %12.1f %12.1f %12.1f\n", "/bin/cat", cat_bare, cat_call, cat_call - cat_bare);
        printf("%-34s %12.1f %12.1f %12.1f\n", "/usr/bin/python3 -S -c ...", py_bare, py_call,
               py_call - py_bare);
        printf("%-34s %12s %12.1f %12s\n", "C callback tool", "-", cb, "-");
        tools_free(reg);
        unlink(file);
        rmdir(dir);
        return 0;
}
