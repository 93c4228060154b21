/* What a secret adds to the gateway's own time.
 *
 * 1. The rewrite functions alone, on a typical request and response: the
 *    header values of a request (ten headers, one of them "Authorization:
 *    Bearer PLACEHOLDER") through secrets_substitute(), and a response (ten
 *    header values and a 4 KiB JSON body) through secrets_scrub(), with one
 *    secret declared and with none (the gateway's path without secrets).
 * 2. End to end: gateway_request_full() against a real server on loopback
 *    (tests/helpers/httpd.py /echo), a request with the placeholder on a
 *    secret's target against the same request with no secret declared,
 *    interleaved in one run so that both see the same machine.
 * Medians of N rounds (default 2000 and 400). Usage: bench_secrets [N]. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util.h"
#include "host/gateway.h"
#include "host/secrets.h"

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

static const char *const header_values[] = {
    "application/json",
    "gzip, deflate, br",
    "en-GB,en;q=0.9",
    "no-cache",
    "python-requests/2.31.0",
    "keep-alive",
    "1",
    "https://example.com/page",
    "text/html,application/xhtml+xml",
    NULL, /* the Authorization header's slot */
};

/* One request's header rewrite: every value through secrets_substitute. */
static void request_headers(const secret_store *ss, const url_parts *u, const char *auth)
{
        for (size_t i = 0; i < ARRAY_SIZE(header_values); i++) {
                const char *v = header_values[i] ? header_values[i] : auth;
                char *out = NULL;
                size_t n = 0;
                if (secrets_substitute(ss, "GET", u, SECRET_IN_HEADER, v, strlen(v), &out, &n) > 0)
                        secrets_wipe_free(out, n);
        }
}

/* One response's scrub: ten header values and the body. */
static void response_scrub(const secret_store *ss, const char *body, size_t len)
{
        for (size_t i = 0; i + 1 < ARRAY_SIZE(header_values); i++) {
                char *out = NULL;
                size_t n = 0;
                if (secrets_scrub(ss, header_values[i], strlen(header_values[i]), &out, &n) > 0)
                        free(out);
        }
        char *out = NULL;
        size_t n = 0;
        if (secrets_scrub(ss, body, len, &out, &n) > 0)
                free(out);
}

static int server_start(pid_t *pid)
{
        int p[2];
        if (pipe(p) < 0)
                return -1;
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, p[1], 1);
        posix_spawn_file_actions_addclose(&fa, p[0]);
        char *argv[] = {"/usr/bin/python3", "tests/helpers/httpd.py", "127.0.0.1", NULL};
        int r = posix_spawn(pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        close(p[1]);
        if (r) {
                close(p[0]);
                return -1;
        }
        char buf[32] = "";
        size_t n = 0;
        while (n < sizeof(buf) - 1 && !strchr(buf, '\n')) {
                struct pollfd pfd = {.fd = p[0], .events = POLLIN};
                if (poll(&pfd, 1, 20000) <= 0)
                        break;
                ssize_t k = read(p[0], buf + n, sizeof(buf) - 1 - n);
                if (k <= 0)
                        break;
                n += (size_t)k;
        }
        close(p[0]);
        return atoi(buf);
}

int main(int argc, char **argv)
{
        int n = argc > 1 ? atoi(argv[1]) : 2000;
        if (n < 10)
                n = 10;
        airlock_error e;
        secret_store *none = NULL, *one = NULL;
        const char *t[] = {"http://localhost/v1=GET", NULL};
        const char *value = "sk-live-0123456789abcdefghijklmnopqrstuvwxyzABCDEF";
        if (secrets_new(&none, &e) < 0 || secrets_new(&one, &e) < 0 ||
            secrets_add(one, "API_KEY", value, strlen(value), 0, t, &e) < 0) {
                fprintf(stderr, "bench_secrets: %s\n", e.message);
                return 1;
        }
        char ph[SECRET_PLACEHOLDER_SIZE], auth[SECRET_PLACEHOLDER_SIZE + 16];
        secrets_placeholder("API_KEY", ph);
        snprintf(auth, sizeof(auth), "Bearer %s", ph);
        url_parts u = {0};
        if (allowlist_parse_url("http://localhost/v1/models", &u, &e) < 0)
                return 1;
        /* A 4 KiB JSON body that does not echo the secret. */
        char body[4096];
        for (size_t i = 0; i < sizeof(body); i++)
                body[i] = "{\"id\": \"model-1\", \"object\": \"model\"},\n"[i % 38];

        uint64_t *a = calloc((size_t)n, sizeof(*a)), *b = calloc((size_t)n, sizeof(*b));
        uint64_t *c = calloc((size_t)n, sizeof(*c)), *d = calloc((size_t)n, sizeof(*d));
        for (int i = 0; i < n; i++) {
                uint64_t t0 = al_now_ns();
                request_headers(none, &u, auth);
                response_scrub(none, body, sizeof(body));
                uint64_t t1 = al_now_ns();
                request_headers(one, &u, auth);
                uint64_t t2 = al_now_ns();
                response_scrub(one, body, sizeof(body));
                uint64_t t3 = al_now_ns();
                a[i] = t1 - t0;
                b[i] = t2 - t1;
                c[i] = t3 - t2;
                d[i] = t3 - t1;
        }
        double m_none = median_us(a, n), m_req = median_us(b, n), m_resp = median_us(c, n),
               m_both = median_us(d, n);
        printf("| rewrite (median of %d) | us |\n|---|---|\n", n);
        printf("| no secret: request headers + response scrub | %.2f |\n", m_none);
        printf("| one secret: request headers (substituted) | %.2f |\n", m_req);
        printf("| one secret: response scrub (10 headers, 4 KiB body, every encoded form) | %.2f "
               "|\n",
               m_resp);
        printf("| one secret: both, added to the gateway's own time | **%.2f** |\n\n",
               m_both - m_none);

        /* End to end through the gateway. */
        pid_t pid;
        int port = server_start(&pid);
        if (port <= 0) {
                fprintf(stderr, "bench_secrets: the test server did not start\n");
                return 1;
        }
        net_allowlist *al = NULL;
        secret_store *e2e = NULL;
        char target[64], url[128];
        snprintf(target, sizeof(target), "http://localhost:%d/echo", port);
        snprintf(url, sizeof(url), "http://localhost:%d/echo/x", port);
        const char *tt[] = {target, NULL};
        if (allowlist_new(&al, &e) < 0 || allowlist_add(al, target, NULL, &e) < 0 ||
            secrets_new(&e2e, &e) < 0 ||
            secrets_add(e2e, "API_KEY", value, strlen(value), 0, tt, &e) < 0) {
                fprintf(stderr, "bench_secrets: %s\n", e.message);
                return 1;
        }
        json_t *req =
            json_pack("{s:s, s:s, s:{s:s, s:s}, s:s}", "method", "GET", "url", url, "headers",
                      "Authorization", auth, "Accept", "application/json", "body_base64", "");
        /* The library's default limits, as a run's would be. */
        airlock_limits lim;
        airlock_limits_default(&lim);
        int m = n / 2 < 100 ? 100 : n / 2;
        uint64_t *w = calloc((size_t)m, sizeof(*w)), *s = calloc((size_t)m, sizeof(*s));
        int fails = 0;
        for (int i = -20; i < m; i++) { /* 20 rounds of warm-up */
                for (int with = 0; with < 2; with++) {
                        json_t *resp = NULL;
                        uint64_t t0 = al_now_ns();
                        int r = gateway_request_full(al, with ? e2e : NULL, &lim, req, 0, -1, NULL,
                                                     &resp, &e);
                        uint64_t dt = al_now_ns() - t0;
                        fails += r < 0;
                        json_decref(resp);
                        if (i >= 0)
                                (with ? s : w)[i] = dt;
                }
        }
        double e_without = median_us(w, m), e_with = median_us(s, m);
        printf("| gateway request on loopback (median of %d, interleaved) | us |\n|---|---|\n", m);
        printf("| without a secret | %.1f |\n| with the secret substituted and scrubbed | %.1f |\n",
               e_without, e_with);
        printf("| difference (noise of a loopback round trip included) | %.1f |\n",
               e_with - e_without);
        if (fails)
                printf("\n%d requests failed: %s\n", fails, e.message);
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        json_decref(req);
        allowlist_free(al);
        secrets_free(e2e);
        secrets_free(one);
        secrets_free(none);
        allowlist_url_free(&u);
        free(a);
        free(b);
        free(c);
        free(d);
        free(w);
        free(s);
        return fails ? 1 : 0;
}
