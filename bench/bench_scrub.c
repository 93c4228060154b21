/* The scrub's cost per byte (secrets_scrub, host/secrets.c) on texts that
 * hold no value, which is what almost every response is: 1 MiB of JSON,
 * 1 MiB of base64, 1 MiB of percent-escaped text, with one secret of 40
 * bytes and with one of 1700 (a PEM key's body), and a text that repeats
 * a value's first 11 bytes. Medians of N rounds (default 15), in ms per MiB.
 * Build and run: bench/bench_scrub.sh [BUILD_DIR] [N]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"
#include "host/secrets.h"

static int cmp_d(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

static double ms_now(void)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void fill(char *t, size_t n, const char *alphabet, unsigned seed)
{
        size_t a = strlen(alphabet);
        for (size_t i = 0; i < n; i++) {
                seed = seed * 1103515245u + 12345u;
                t[i] = alphabet[(seed >> 16) % a];
        }
}

int main(int argc, char **argv)
{
        int rounds = argc > 1 ? atoi(argv[1]) : 15;
        size_t n = 1u << 20;
        static const char b64[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        char *v40 = malloc(41), *v1700 = malloc(1701);
        fill(v40, 40, b64, 7);
        fill(v1700, 1700, b64, 9);
        const char *targets[] = {"api.example.com", NULL};
        secret_store *s40 = NULL, *s1700 = NULL;
        airlock_error e;
        secrets_new(&s40, &e);
        secrets_new(&s1700, &e);
        if (secrets_add(s40, "K", v40, 40, 0, targets, &e) < 0 ||
            secrets_add(s1700, "K", v1700, 1700, 0, targets, &e) < 0) {
                fprintf(stderr, "%s\n", e.message);
                return 1;
        }
        char *json = malloc(n), *base = malloc(n), *pct = malloc(n), *near = malloc(n);
        /* JSON: keys and words, as an API answers. */
        for (size_t i = 0; i < n;) {
                int k = snprintf(json + i, n - i,
                                 "{\"name\": \"item %zu\", \"ok\": true, "
                                 "\"text\": \"the quick brown fox\"}, ",
                                 i);
                if (k < 0 || (size_t)k >= n - i)
                        break;
                i += (size_t)k;
        }
        memset(json + strlen(json), ' ', n - strlen(json));
        fill(base, n, b64, 11);
        for (size_t i = 0; i + 3 <= n; i += 3)
                memcpy(pct + i, (i / 3) % 3 ? "%2F" : "a+b", 3);
        for (size_t i = 0; i + 12 <= n; i += 12) {
                memcpy(near + i, v40, 11);
                near[i + 11] = ' ';
        }
        struct {
                const char *name;
                secret_store *s;
                const char *text;
        } cases[] = {
            {"JSON, 40-byte secret", s40, json},
            {"JSON, 1700-byte secret", s1700, json},
            {"base64, 40-byte secret", s40, base},
            {"base64, 1700-byte secret", s1700, base},
            {"percent-escaped, 40-byte secret", s40, pct},
            {"a value's first 11 bytes, repeated, 40-byte secret", s40, near},
        };
        printf("| text (1 MiB) | ms per MiB (median of %d) |\n|---|---|\n", rounds);
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                double *v = calloc((size_t)rounds, sizeof(double));
                for (int r = 0; r < rounds; r++) {
                        char *out = NULL;
                        size_t on = 0;
                        double t0 = ms_now();
                        int x = secrets_scrub(cases[c].s, cases[c].text, n, &out, &on);
                        v[r] = ms_now() - t0;
                        if (x > 0)
                                free(out);
                }
                qsort(v, (size_t)rounds, sizeof(double), cmp_d);
                printf("| %s | %.1f |\n", cases[c].name, v[rounds / 2]);
                free(v);
        }
        return 0;
}
