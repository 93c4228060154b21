/* Workloads of `make bench` beyond print(1), measured through the library:
 *
 *   bench_workloads csv DIR RUNS CODE_FILE   a run over the files of DIR (staged
 *                                           once under /input) that writes a
 *                                           file to /output; the file must
 *                                           come back in the result
 *   bench_workloads tools RUNS N             one run making N host tool calls
 *                                           to a C callback
 *   bench_workloads print RUNS               restore+run of print(1), calls
 *                                           spaced 10 ms apart (every sample)
 *   bench_workloads cold RUNS                a new sandbox per sample, timed
 *                                           until its first run has finished
 *   bench_workloads serve                    one ready sandbox; for each line
 *                                           read, one restore+run of print(1),
 *                                           answered with its time in ms on a
 *                                           line (lets bench.py interleave
 *                                           airlock's samples with the peers');
 *                                           a line "echo" is answered at once
 *                                           with 0, the floor of any process
 *                                           boundary for the same client
 *   bench_workloads throughput THREADS RUNS  RUNS runs of print(1) in total,
 *                                           from THREADS threads sharing one
 *                                           sandbox
 *
 * Each mode prints one JSON object (built with jansson) with every sample in
 * milliseconds; bench/bench.py reads it. A failed run is an error (exit 1),
 * so a broken sandbox never produces a fast-looking figure. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "airlock.h"

static double now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int die(const char *what, const airlock_error *err)
{
        fprintf(stderr, "bench_workloads: %s: %s\n", what, err ? err->message : "");
        return 1;
}

/* Reads a whole small file (the benchmark's own code snippet). */
static char *read_text(const char *path)
{
        FILE *f = fopen(path, "re");
        if (!f)
                return NULL;
        char *buf = calloc(1, 65536);
        size_t n = buf ? fread(buf, 1, 65535, f) : 0;
        fclose(f);
        if (buf && n == 0) {
                free(buf);
                return NULL;
        }
        return buf;
}

/* A run counts only when it succeeded; a failure would otherwise look fast. */
static int run_checked(airlock_sandbox *sb, const char *code, airlock_result **ret,
                       airlock_error *err)
{
        airlock_result *res;
        if (airlock_sandbox_run(sb, code, strlen(code), NULL, &res, err) < 0)
                return -1;
        if (!res->success) {
                fprintf(stderr, "bench_workloads: run failed: %s\n%.*s\n",
                        res->error_message ? res->error_message : "", (int)res->stderr_len,
                        res->stderr_data ? res->stderr_data : "");
                airlock_result_free(res);
                return -1;
        }
        *ret = res;
        return 0;
}

static int mode_csv(const char *dir, int runs, const char *code_file)
{
        airlock_error err;
        airlock_config *cfg;
        char *code = read_text(code_file);
        if (!code)
                return die("cannot read the code file", NULL);
        if (airlock_config_new(&cfg, &err) < 0)
                return die("config", &err);
        double t0 = now_ms();
        if (airlock_config_set_workspace(cfg, dir, &err) < 0)
                return die("workspace", &err);
        airlock_sandbox *sb;
        if (airlock_sandbox_new(cfg, &sb, &err) < 0)
                return die("sandbox", &err);
        double setup = now_ms() - t0;

        json_t *out = json_object(), *samples = json_array();
        for (int i = 0; i < runs; i++) {
                usleep(10000);
                airlock_result *res;
                double s = now_ms();
                if (run_checked(sb, code, &res, &err) < 0)
                        return die("csv run", &err);
                double ms = now_ms() - s;
                uint64_t back = 0;
                for (size_t k = 0; k < res->n_files; k++)
                        back += res->files[k].size;
                if (back < 1048576) {
                        fprintf(stderr, "bench_workloads: only %llu bytes came back\n",
                                (unsigned long long)back);
                        return 1;
                }
                if (i == 0) {
                        json_object_set_new(out, "stdout",
                                            json_stringn(res->stdout_data, res->stdout_len));
                        json_object_set_new(out, "bytes_back", json_integer((json_int_t)back));
                }
                json_array_append_new(samples, json_real(ms));
                airlock_result_free(res);
        }
        airlock_sandbox_close(sb);
        airlock_config_free(cfg);
        free(code);
        json_object_set_new(out, "setup_ms", json_real(setup));
        json_object_set_new(out, "samples_ms", samples);
        json_dumpf(out, stdout, JSON_COMPACT);
        putchar('\n');
        json_decref(out);
        return 0;
}

/* The host tool: {"a": int, "b": int} -> {"sum": a + b}. */
static int tool_add(void *userdata, const char *args_json, char **ret_result_json, char **ret_error)
{
        (void)userdata;
        json_error_t jerr;
        json_t *args = json_loads(args_json, 0, &jerr);
        if (!args) {
                *ret_error = strdup("arguments are not JSON");
                return -1;
        }
        json_int_t sum = json_integer_value(json_object_get(args, "a")) +
                         json_integer_value(json_object_get(args, "b"));
        json_decref(args);
        json_t *r = json_pack("{sI}", "sum", sum);
        *ret_result_json = json_dumps(r, JSON_COMPACT);
        json_decref(r);
        return *ret_result_json ? 0 : -1;
}

static int mode_tools(int runs, int calls)
{
        airlock_error err;
        airlock_config *cfg;
        if (airlock_config_new(&cfg, &err) < 0)
                return die("config", &err);
        airlock_tool_def def = {
            .size = sizeof(airlock_tool_def),
            .name = "add",
            .description = "Add two integers.",
            .parameters_json = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
                               "\"integer\"},\"b\":{\"type\":\"integer\"}},"
                               "\"required\":[\"a\",\"b\"]}",
            .approval = AIRLOCK_APPROVAL_NEVER,
            .fn = tool_add,
        };
        if (airlock_config_add_tool(cfg, &def, &err) < 0)
                return die("add tool", &err);
        airlock_sandbox *sb;
        if (airlock_sandbox_new(cfg, &sb, &err) < 0)
                return die("sandbox", &err);
        char code[256];
        snprintf(code, sizeof(code),
                 "s = 0\nfor i in range(%d):\n    s += call_tool('add', a=i, b=1)['sum']\n"
                 "print(s)\n",
                 calls);
        char want[32];
        snprintf(want, sizeof(want), "%lld\n", (long long)calls * (calls + 1) / 2);

        json_t *out = json_object(), *samples = json_array();
        for (int i = 0; i < runs; i++) {
                usleep(10000);
                airlock_result *res;
                double s = now_ms();
                if (run_checked(sb, code, &res, &err) < 0)
                        return die("tools run", &err);
                double ms = now_ms() - s;
                if (res->stdout_len != strlen(want) ||
                    memcmp(res->stdout_data, want, strlen(want))) {
                        fprintf(stderr, "bench_workloads: tool sum is wrong: %.*s\n",
                                (int)res->stdout_len, res->stdout_data);
                        return 1;
                }
                json_array_append_new(samples, json_real(ms));
                airlock_result_free(res);
        }
        airlock_sandbox_close(sb);
        airlock_config_free(cfg);
        json_object_set_new(out, "calls_per_run", json_integer(calls));
        json_object_set_new(out, "samples_ms", samples);
        json_dumpf(out, stdout, JSON_COMPACT);
        putchar('\n');
        json_decref(out);
        return 0;
}

static int mode_print(int runs, bool cold)
{
        airlock_error err;
        airlock_config *cfg;
        airlock_result *res;
        if (airlock_config_new(&cfg, &err) < 0)
                return die("config", &err);
        airlock_sandbox *sb = NULL;
        /* Restore+run samples start after the first run, which is the cold start. */
        if (!cold) {
                if (airlock_sandbox_new(cfg, &sb, &err) < 0)
                        return die("sandbox", &err);
                if (run_checked(sb, "print(1)", &res, &err) < 0)
                        return die("first run", &err);
                airlock_result_free(res);
        }
        json_t *out = json_object(), *samples = json_array();
        for (int i = 0; i < runs; i++) {
                usleep(10000);
                double s = now_ms();
                if (cold && airlock_sandbox_new(cfg, &sb, &err) < 0)
                        return die("sandbox", &err);
                if (run_checked(sb, "print(1)", &res, &err) < 0)
                        return die("print run", &err);
                double ms = now_ms() - s;
                if (res->stdout_len != 2 || memcmp(res->stdout_data, "1\n", 2))
                        return die("print(1) wrote something else", NULL);
                airlock_result_free(res);
                if (cold) {
                        airlock_sandbox_close(sb);
                        sb = NULL;
                }
                json_array_append_new(samples, json_real(ms));
        }
        if (sb)
                airlock_sandbox_close(sb);
        airlock_config_free(cfg);
        json_object_set_new(out, "samples_ms", samples);
        json_dumpf(out, stdout, JSON_COMPACT);
        putchar('\n');
        json_decref(out);
        return 0;
}

static int mode_serve(void)
{
        airlock_error err;
        airlock_config *cfg;
        airlock_result *res;
        airlock_sandbox *sb;
        char line[64];
        if (airlock_config_new(&cfg, &err) < 0)
                return die("config", &err);
        if (airlock_sandbox_new(cfg, &sb, &err) < 0)
                return die("sandbox", &err);
        if (run_checked(sb, "print(1)", &res, &err) < 0)
                return die("first run", &err);
        airlock_result_free(res);
        printf("ready\n");
        fflush(stdout);
        while (fgets(line, sizeof(line), stdin)) {
                if (strcmp(line, "echo\n") == 0) {
                        printf("0\n");
                        fflush(stdout);
                        continue;
                }
                double s = now_ms();
                if (run_checked(sb, "print(1)", &res, &err) < 0)
                        return die("print run", &err);
                double ms = now_ms() - s;
                if (res->stdout_len != 2 || memcmp(res->stdout_data, "1\n", 2))
                        return die("print(1) wrote something else", NULL);
                airlock_result_free(res);
                printf("%.4f\n", ms);
                fflush(stdout);
        }
        airlock_sandbox_close(sb);
        airlock_config_free(cfg);
        return 0;
}

struct worker {
        pthread_t thread;
        airlock_sandbox *sb;
        int runs;
        int failed;
};

static void *worker_main(void *arg)
{
        struct worker *w = arg;
        airlock_error err;
        for (int i = 0; i < w->runs; i++) {
                airlock_result *res;
                if (run_checked(w->sb, "print(1)", &res, &err) < 0) {
                        w->failed = 1;
                        break;
                }
                airlock_result_free(res);
        }
        return NULL;
}

static int mode_throughput(int threads, int runs)
{
        airlock_error err;
        airlock_config *cfg;
        if (airlock_config_new(&cfg, &err) < 0)
                return die("config", &err);
        airlock_sandbox *sb;
        if (airlock_sandbox_new(cfg, &sb, &err) < 0)
                return die("sandbox", &err);
        struct worker *w = calloc((size_t)threads, sizeof(*w));
        double t0 = now_ms();
        for (int i = 0; i < threads; i++) {
                w[i].sb = sb;
                w[i].runs = runs / threads + (i < runs % threads);
                if (pthread_create(&w[i].thread, NULL, worker_main, &w[i]) != 0)
                        return die("pthread_create", NULL);
        }
        int failed = 0;
        for (int i = 0; i < threads; i++) {
                pthread_join(w[i].thread, NULL);
                failed |= w[i].failed;
        }
        double elapsed = now_ms() - t0;
        airlock_sandbox_close(sb);
        airlock_config_free(cfg);
        free(w);
        if (failed)
                return die("a concurrent run failed", NULL);
        json_t *out = json_pack("{sisisfsf}", "threads", threads, "runs", runs, "elapsed_ms",
                                elapsed, "runs_per_s", runs * 1000.0 / elapsed);
        json_dumpf(out, stdout, JSON_COMPACT);
        putchar('\n');
        json_decref(out);
        return 0;
}

int main(int argc, char **argv)
{
        if (argc == 5 && !strcmp(argv[1], "csv"))
                return mode_csv(argv[2], atoi(argv[3]), argv[4]);
        if (argc == 4 && !strcmp(argv[1], "tools"))
                return mode_tools(atoi(argv[2]), atoi(argv[3]));
        if (argc == 3 && !strcmp(argv[1], "print"))
                return mode_print(atoi(argv[2]), false);
        if (argc == 2 && !strcmp(argv[1], "serve"))
                return mode_serve();
        if (argc == 3 && !strcmp(argv[1], "cold"))
                return mode_print(atoi(argv[2]), true);
        if (argc == 4 && !strcmp(argv[1], "throughput"))
                return mode_throughput(atoi(argv[2]), atoi(argv[3]));
        fprintf(stderr,
                "usage: bench_workloads print RUNS | cold RUNS | serve | csv DIR RUNS CODE_FILE | "
                "tools RUNS N | "
                "throughput THREADS RUNS\n");
        return 2;
}
