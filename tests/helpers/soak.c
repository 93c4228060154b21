/* The soak: thousands of mixed runs through one cache (airlock_cache_run),
 * meant to be run under ASan/UBSan by tests/soak.sh (`make soak`).
 *
 * Runs succeed, fail, exit non-zero, time out, call a C tool (which
 * sometimes fails), make HTTP requests to a server on 127.0.0.1 that this
 * program serves on a thread, and write files to /output; every result is
 * checked exactly. After the warm-up runs and at the end it measures the
 * host side (resident memory, open descriptors, sandbox processes that are
 * our children) and fails when they grew; after closing the cache it checks
 * that no sandbox process, staging folder, cgroup or mount is left.
 *
 * Environment: SOAK_RUNS (default 10000), SOAK_WARMUP (default 500, at most
 * a third of the runs), SOAK_RSS_SLACK_KIB (default 1024), TMPDIR (staging;
 * the script points it at a private folder so leftovers are ours to see).
 * Prints "soak: ..." lines with the figures; exit status 0 when every check
 * passed. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "airlock.h"
#include "common/proc.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        failures++;                                                                \
                        fprintf(stderr, "soak: FAILED: " __VA_ARGS__);                             \
                        fputc('\n', stderr);                                                       \
                }                                                                                  \
        } while (0)

/* ---- an HTTP server on 127.0.0.1 ------------------------------------------ */

/* Answers every request with 200 and the request's path as the body, one
 * request per connection. Only this program's own gateway talks to it. */
static int listen_fd = -1;

static void *http_serve(void *unused)
{
        (void)unused;
        for (;;) {
                int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        return NULL; /* shut down */
                }
                char req[8192];
                size_t len = 0;
                while (len < sizeof(req) - 1) {
                        ssize_t n = recv(c, req + len, sizeof(req) - 1 - len, 0);
                        if (n <= 0)
                                break;
                        len += (size_t)n;
                        req[len] = '\0';
                        if (strstr(req, "\r\n\r\n"))
                                break;
                }
                req[len] = '\0';
                char path[256] = "?";
                sscanf(req, "%*s %255s", path);
                char resp[512];
                int n = snprintf(resp, sizeof(resp),
                                 "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                                 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                                 strlen(path), path);
                (void)!send(c, resp, (size_t)n, MSG_NOSIGNAL);
                close(c);
        }
}

static int http_start(pthread_t *thread)
{
        listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t alen = sizeof(a);
        if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
            listen(listen_fd, 64) < 0 || getsockname(listen_fd, (struct sockaddr *)&a, &alen) < 0)
                return -1;
        if (pthread_create(thread, NULL, http_serve, NULL) != 0)
                return -1;
        return ntohs(a.sin_port);
}

static void http_stop(pthread_t thread)
{
        shutdown(listen_fd, SHUT_RDWR);
        pthread_join(thread, NULL);
        close(listen_fd);
}

/* ---- the C tool ------------------------------------------------------------ */

/* Returns its arguments; n < 0 is a failure with a message. */
static int echo_tool(void *userdata, const char *args_json, char **ret_result_json,
                     char **ret_error)
{
        (void)userdata;
        if (strstr(args_json, "-"))
                return *ret_error = strdup("negative numbers are refused"), -1;
        *ret_result_json = strdup(args_json);
        return *ret_result_json ? 0 : -1;
}

/* ---- measurements ------------------------------------------------------------ */

static long rss_kib(void)
{
        FILE *f = fopen("/proc/self/status", "re");
        char line[256];
        long kib = -1;
        while (f && fgets(line, sizeof(line), f))
                if (sscanf(line, "VmRSS: %ld", &kib) == 1)
                        break;
        if (f)
                fclose(f);
        return kib;
}

static int count_dir(const char *path, const char *prefix)
{
        DIR *d = opendir(path);
        if (!d)
                return -1;
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.' &&
                    (!prefix || !strncmp(de->d_name, prefix, strlen(prefix))))
                        n++;
        closedir(d);
        return n - (strcmp(path, "/proc/self/fd") == 0); /* opendir's own fd */
}

/* Our children: all of them, and those that are sandbox processes. */
static void count_our_children(int *ret_all, int *ret_sandbox)
{
        DIR *d = opendir("/proc");
        int all = 0, sandbox = 0;
        struct dirent *de;
        while (d && (de = readdir(d))) {
                int pid = atoi(de->d_name);
                char state;
                int ppid;
                if (pid <= 0 || proc_stat(pid, &state, &ppid) < 0 || ppid != getpid())
                        continue;
                all++;
                sandbox += is_sandbox_process(pid);
        }
        if (d)
                closedir(d);
        *ret_all = all;
        *ret_sandbox = sandbox;
}

static int count_lines(const char *path)
{
        FILE *f = fopen(path, "re");
        if (!f)
                return -1;
        int n = 0, ch;
        while ((ch = fgetc(f)) != EOF)
                n += ch == '\n';
        fclose(f);
        return n;
}

typedef struct snapshot {
        long rss_kib;
        int fds, children, sandbox_children;
} snapshot;

static snapshot measure(void)
{
        /* After a run the sandboxes start their next copies on their own:
         * let them settle so the figures compare like with like. */
        sleep(1);
        snapshot s = {.rss_kib = rss_kib(), .fds = count_dir("/proc/self/fd", NULL)};
        count_our_children(&s.children, &s.sandbox_children);
        return s;
}

/* ---- runs -------------------------------------------------------------------- */

enum kind { K_OK, K_RAISE, K_EXIT, K_TOOL, K_TOOL_FAIL, K_HTTP, K_FILE, K_TIMEOUT, K_N };
static const char *kind_names[K_N] = {"ok",        "exception", "exit 3", "tool",
                                      "tool fail", "http",      "file",   "timeout"};

/* Every 25th run times out; the others cycle through the other kinds. */
static enum kind kind_of(long i)
{
        static const enum kind cycle[] = {K_OK,   K_RAISE, K_TOOL, K_HTTP, K_FILE,     K_OK,
                                          K_EXIT, K_TOOL,  K_HTTP, K_FILE, K_TOOL_FAIL};
        if (i % 25 == 24)
                return K_TIMEOUT;
        return cycle[i % (long)(sizeof(cycle) / sizeof(cycle[0]))];
}

static bool has(const char *data, size_t len, const char *needle)
{
        return data && memmem(data, len, needle, strlen(needle)) != NULL;
}

static bool sanitizer_text(const airlock_result *r)
{
        static const char *marks[] = {"Sanitizer", "runtime error:"};
        for (size_t i = 0; i < 2; i++)
                if (has(r->stdout_data, r->stdout_len, marks[i]) ||
                    has(r->stderr_data, r->stderr_len, marks[i]))
                        return true;
        return false;
}

static int wrong_shown;

static void wrong(long i, enum kind k, const airlock_result *r, const char *why)
{
        failures++;
        if (wrong_shown++ >= 10)
                return;
        fprintf(
            stderr,
            "soak: FAILED: run %ld (%s): %s: status %s exit %d stdout %.200s stderr %.300s %s\n", i,
            kind_names[k], why, airlock_status_name(r->status), r->exit_code,
            r->stdout_data ? r->stdout_data : "", r->stderr_data ? r->stderr_data : "",
            r->error_message ? r->error_message : "");
}

static void one_run(airlock_cache *cache, const airlock_config *cfg,
                    const airlock_config *cfg_timeout, int port, long i, long *counts)
{
        enum kind k = kind_of(i);
        char code[512], expect[256];
        expect[0] = '\0';
        switch (k) {
        case K_OK:
                snprintf(code, sizeof(code), "print(open('/input/a.txt').read(), %ld)", i);
                snprintf(expect, sizeof(expect), "workspace %ld\n", i);
                break;
        case K_RAISE:
                snprintf(code, sizeof(code), "raise ValueError('soak %ld')", i);
                break;
        case K_EXIT:
                snprintf(code, sizeof(code), "import sys\nprint(%ld)\nsys.exit(3)", i);
                snprintf(expect, sizeof(expect), "%ld\n", i);
                break;
        case K_TOOL:
                snprintf(code, sizeof(code), "print(call_tool('echo', n=%ld)['n'])", i);
                snprintf(expect, sizeof(expect), "%ld\n", i);
                break;
        case K_TOOL_FAIL:
                snprintf(code, sizeof(code),
                         "try:\n    call_tool('echo', n=-%ld)\nexcept RuntimeError as e:\n"
                         "    print('RuntimeError', e)",
                         i);
                snprintf(expect, sizeof(expect), "RuntimeError negative numbers are refused\n");
                break;
        case K_HTTP:
                snprintf(code, sizeof(code),
                         "r = http_get('http://127.0.0.1:%d/p%ld')\nprint(r['status'], r['body'])",
                         port, i);
                snprintf(expect, sizeof(expect), "200 /p%ld\n", i);
                break;
        case K_FILE:
                snprintf(code, sizeof(code),
                         "import os\nos.makedirs('/output/d')\n"
                         "open('/output/d/f%ld.txt', 'w').write('%ld' * 100)",
                         i, i);
                break;
        case K_TIMEOUT:
                snprintf(code, sizeof(code), "while True:\n    pass");
                break;
        default:
                abort();
        }
        airlock_result *r = NULL;
        airlock_error err;
        airlock_error_clear(&err);
        int rc = airlock_cache_run(cache, k == K_TIMEOUT ? cfg_timeout : cfg, code, strlen(code),
                                   NULL, &r, &err);
        if (rc < 0) {
                failures++;
                if (wrong_shown++ < 10)
                        fprintf(stderr, "soak: FAILED: run %ld (%s): %s\n", i, kind_names[k],
                                err.message);
                return;
        }
        counts[k]++;
        const char *out = r->stdout_data ? r->stdout_data : "";
        if (sanitizer_text(r))
                wrong(i, k, r, "a sanitizer report in the guest's output");
        switch (k) {
        case K_OK:
        case K_TOOL:
        case K_TOOL_FAIL:
        case K_HTTP:
                if (!r->success || strcmp(out, expect) != 0)
                        wrong(i, k, r, "unexpected result");
                break;
        case K_RAISE: {
                char msg[64];
                snprintf(msg, sizeof(msg), "ValueError: soak %ld", i);
                if (r->success || r->status != AIRLOCK_STATUS_ERROR ||
                    !has(r->stderr_data, r->stderr_len, msg))
                        wrong(i, k, r, "unexpected result");
                break;
        }
        case K_EXIT:
                if (r->success || r->status != AIRLOCK_STATUS_ERROR || r->exit_code != 3 ||
                    strcmp(out, expect) != 0)
                        wrong(i, k, r, "unexpected result");
                break;
        case K_FILE: {
                char path[64], data[1024] = "";
                snprintf(path, sizeof(path), "/output/d/f%ld.txt", i);
                char num[32];
                snprintf(num, sizeof(num), "%ld", i);
                for (int j = 0; j < 100; j++)
                        strcat(data, num);
                if (!r->success || r->n_files != 1 || r->n_refused != 0 ||
                    strcmp(r->files[0].path, path) != 0 || r->files[0].size != strlen(data) ||
                    memcmp(r->files[0].data, data, strlen(data)) != 0)
                        wrong(i, k, r, "unexpected files");
                break;
        }
        case K_TIMEOUT:
                if (r->success || r->status != AIRLOCK_STATUS_TIMEOUT)
                        wrong(i, k, r, "not a timeout");
                break;
        default:
                break;
        }
        airlock_result_free(r);
}

static long env_long(const char *name, long def)
{
        const char *s = getenv(name);
        return s && *s ? strtol(s, NULL, 10) : def;
}

static airlock_config *make_config(const char *ws, int port, double timeout_s)
{
        airlock_config *cfg = NULL;
        airlock_error err;
        airlock_error_clear(&err);
        char target[64];
        snprintf(target, sizeof(target), "127.0.0.1:%d", port);
        airlock_tool_def echo = {
            .size = sizeof(airlock_tool_def),
            .name = "echo",
            .description = "Returns its arguments.",
            .parameters_json = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"
                               "\"required\":[\"n\"]}",
            .fn = echo_tool,
        };
        if (airlock_config_new(&cfg, &err) < 0 || airlock_config_set_workspace(cfg, ws, &err) < 0 ||
            airlock_config_add_tool(cfg, &echo, &err) < 0 ||
            airlock_config_allow(cfg, target, "GET", &err) < 0) {
                fprintf(stderr, "soak: configuration: %s\n", err.message);
                exit(2);
        }
        airlock_limits lim;
        airlock_config_get_limits(cfg, &lim);
        lim.timeout_s = timeout_s;
        lim.cpu_s = timeout_s;
        if (airlock_config_set_limits(cfg, &lim, &err) < 0) {
                fprintf(stderr, "soak: limits: %s\n", err.message);
                exit(2);
        }
        return cfg;
}

int main(void)
{
        long runs = env_long("SOAK_RUNS", 10000);
        long warmup = env_long("SOAK_WARMUP", 500);
        long slack = env_long("SOAK_RSS_SLACK_KIB", 1024);
        if (warmup > runs / 3)
                warmup = runs / 3;
        const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

        char ws[4096];
        snprintf(ws, sizeof(ws), "%s/soak-ws-XXXXXX", tmp);
        if (!mkdtemp(ws)) {
                perror("soak: mkdtemp");
                return 2;
        }
        char file[4200];
        snprintf(file, sizeof(file), "%s/a.txt", ws);
        FILE *f = fopen(file, "we");
        if (!f || fputs("workspace", f) < 0 || fclose(f) != 0) {
                perror("soak: workspace");
                return 2;
        }
        int stage_before = count_dir(tmp, "airlock-stage-");
        int mounts_before = count_lines("/proc/self/mountinfo");
        /* The first sandbox makes the program's sealed memfd copy, which the
         * process keeps for every later one: made before the baseline, it
         * is not counted as a leak. */
        {
                airlock_config *warm = NULL;
                airlock_sandbox *sb = NULL;
                airlock_error e;
                if (airlock_config_new(&warm, &e) < 0 || airlock_sandbox_new(warm, &sb, &e) < 0) {
                        fprintf(stderr, "soak: first sandbox: %s\n", e.message);
                        return 2;
                }
                airlock_sandbox_close(sb);
                airlock_config_free(warm);
        }
        snapshot base = measure();

        pthread_t http;
        int port = http_start(&http);
        if (port < 0) {
                perror("soak: http server");
                return 2;
        }
        airlock_config *cfg = make_config(ws, port, 30);
        airlock_config *cfg_timeout = make_config(ws, port, 0.3);
        airlock_cache *cache = NULL;
        airlock_error err;
        airlock_error_clear(&err);
        if (airlock_cache_new(4, 0, &cache, &err) < 0) {
                fprintf(stderr, "soak: cache: %s\n", err.message);
                return 2;
        }

        long counts[K_N] = {0};
        snapshot warm = {0};
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long i = 0; i < runs; i++) {
                if (i == warmup)
                        warm = measure();
                one_run(cache, cfg, cfg_timeout, port, i, counts);
                if ((i + 1) % 1000 == 0) {
                        snapshot s = measure();
                        printf("soak: %ld runs: rss %ld KiB, fds %d, sandbox children %d\n", i + 1,
                               s.rss_kib, s.fds, s.sandbox_children);
                        fflush(stdout);
                }
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        snapshot end = measure();
        double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;

        printf("soak: %ld runs in %.1f s (%.1f runs/s):", runs, secs, (double)runs / secs);
        for (int k = 0; k < K_N; k++)
                printf(" %s %ld%s", kind_names[k], counts[k], k + 1 < K_N ? "," : "\n");
        printf("soak: after %ld warm-up runs: rss %ld KiB, fds %d, children %d (sandbox %d)\n",
               warmup, warm.rss_kib, warm.fds, warm.children, warm.sandbox_children);
        printf("soak: after %ld runs:         rss %ld KiB, fds %d, children %d (sandbox %d)\n",
               runs, end.rss_kib, end.fds, end.children, end.sandbox_children);
        printf("soak: growth: rss %+ld KiB (allowed %ld), fds %+d, sandbox children %+d\n",
               end.rss_kib - warm.rss_kib, slack, end.fds - warm.fds,
               end.sandbox_children - warm.sandbox_children);
        CHECK(end.rss_kib - warm.rss_kib <= slack, "resident memory grew by %ld KiB",
              end.rss_kib - warm.rss_kib);
        CHECK(end.fds <= warm.fds, "open descriptors grew from %d to %d", warm.fds, end.fds);
        CHECK(end.sandbox_children <= warm.sandbox_children, "sandbox processes grew from %d to %d",
              warm.sandbox_children, end.sandbox_children);
        CHECK(end.children <= warm.children, "child processes grew from %d to %d", warm.children,
              end.children);

        airlock_cache_close(cache);
        airlock_config_free(cfg);
        airlock_config_free(cfg_timeout);
        http_stop(http);
        snapshot closed = measure();
        int stage_after = count_dir(tmp, "airlock-stage-");
        int mounts_after = count_lines("/proc/self/mountinfo");
        int cgroups = our_cgroups();
        printf("soak: after closing: fds %d (before the cache %d), children %d, staging folders "
               "%d (before %d), mounts %d (before %d), cgroups left %d\n",
               closed.fds, base.fds, closed.children, stage_after, stage_before, mounts_after,
               mounts_before, cgroups);
        CHECK(closed.fds == base.fds, "descriptors left open: %d, before %d", closed.fds, base.fds);
        CHECK(closed.children == 0, "%d child processes left", closed.children);
        CHECK(stage_after == stage_before, "staging folders left: %d, before %d", stage_after,
              stage_before);
        CHECK(mounts_after == mounts_before, "mounts: %d, before %d", mounts_after, mounts_before);
        CHECK(cgroups == 0, "%d cgroups left", cgroups);

        unlink(file);
        rmdir(ws);
        printf("soak: %s (%d failed checks)\n", failures ? "FAILED" : "passed", failures);
        return failures ? 1 : 0;
}
