/* Measures throughput through the sandbox cache: print(1) back to back from
 * 1, 2 and 8 threads on one configuration (one cached sandbox, runs in
 * parallel), in runs per second, and checks that every result is the
 * caller's own. Prints one JSON object.
 *
 * usage: bench_cache [RUNS_PER_ROUND]
 * build: cc -std=c11 -D_GNU_SOURCE -Iinclude bench/bench_cache.c build/libairlock.a \
 *        $(pkg-config --libs libseccomp jansson libcurl python3-embed) -lpthread */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "airlock.h"

static double now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef struct worker {
        airlock_cache *cache;
        const airlock_config *cfg;
        int index;
        int runs;
        int failures; /* runs that failed or returned someone else's output */
} worker;

static void *worker_main(void *arg)
{
        worker *w = arg;
        char code[64], expect[64];
        for (int i = 0; i < w->runs; i++) {
                snprintf(code, sizeof(code), "print(%d)", w->index * 1000000 + i);
                snprintf(expect, sizeof(expect), "%d\n", w->index * 1000000 + i);
                airlock_result *res = NULL;
                airlock_error err = {0};
                int r = airlock_cache_run(w->cache, w->cfg, code, strlen(code), NULL, &res, &err);
                if (r < 0 || !res->success || !res->stdout_data ||
                    strcmp(res->stdout_data, expect) != 0) {
                        if (w->failures++ == 0)
                                fprintf(stderr, "bench_cache: run failed: %s\n",
                                        r < 0 ? err.message : "wrong or failed result");
                }
                airlock_result_free(res);
        }
        return NULL;
}

/* Runs `total` runs split over `threads` threads; returns runs per second. */
static double round_rps(airlock_cache *cache, const airlock_config *cfg, int threads, int total,
                        int *failures)
{
        pthread_t t[64];
        worker w[64];
        double t0 = now_ms();
        for (int i = 0; i < threads; i++) {
                w[i] = (worker){.cache = cache, .cfg = cfg, .index = i, .runs = total / threads};
                pthread_create(&t[i], NULL, worker_main, &w[i]);
        }
        int done = 0;
        for (int i = 0; i < threads; i++) {
                pthread_join(t[i], NULL);
                *failures += w[i].failures;
                done += w[i].runs;
        }
        double secs = (now_ms() - t0) / 1e3;
        return done / secs;
}

int main(int argc, char **argv)
{
        int runs = argc > 1 ? atoi(argv[1]) : 400;
        if (runs < 8)
                runs = 8;
        airlock_error err = {0};
        airlock_config *cfg = NULL;
        airlock_cache *cache = NULL;
        if (airlock_config_new(&cfg, &err) < 0 || airlock_cache_new(0, 0, &cache, &err) < 0) {
                fprintf(stderr, "bench_cache: %s\n", err.message);
                return 1;
        }
        /* The first run builds the sandbox; it is not part of any round. */
        double t0 = now_ms();
        airlock_result *res = NULL;
        if (airlock_cache_run(cache, cfg, "pass", 4, NULL, &res, &err) < 0) {
                fprintf(stderr, "bench_cache: %s\n", err.message);
                return 3;
        }
        airlock_result_free(res);
        double first_ms = now_ms() - t0;
        int failures = 0;
        const int threads[] = {1, 2, 8};
        double rps[3];
        for (int i = 0; i < 3; i++)
                rps[i] = round_rps(cache, cfg, threads[i], runs, &failures);
        printf("{\"bench\": \"cache\", \"runs_per_round\": %d, \"first_run_ms\": %.2f, "
               "\"rps_1\": %.1f, \"rps_2\": %.1f, \"rps_8\": %.1f, \"speedup_8\": %.2f, "
               "\"failures\": %d}\n",
               runs, first_ms, rps[0], rps[1], rps[2], rps[2] / rps[0], failures);
        airlock_cache_close(cache);
        airlock_config_free(cfg);
        return failures ? 1 : 0;
}
