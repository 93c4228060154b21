/* Rotating a secret through the library, against real sandboxes and a real
 * server on loopback (tests/helpers/httpd.py, whose /mirror route answers
 * with a digest of the Authorization header it received): the cache's next
 * run after airlock_config_add_secret() with a new value sends the new value
 * under the same placeholder, a sandbox made before keeps the value it was
 * made with, and the run's usage record lists the request. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "airlock.h"

extern char **environ;

static pid_t srv_pid = -1;
static int srv_port;

static int setup(void **state)
{
        (void)state;
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -1;
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, p[1], 1);
        /* The helper beside the build folder, wherever the test runs from. */
        static char helper[PATH_MAX];
        char exe[PATH_MAX - 64];
        ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        exe[len > 0 ? len : 0] = '\0';
        snprintf(helper, sizeof(helper), "tests/helpers/httpd.py");
        for (char *slash = strrchr(exe, '/'); slash; slash = strrchr(exe, '/')) {
                *slash = '\0';
                char probe[PATH_MAX];
                snprintf(probe, sizeof(probe), "%s/tests/helpers/httpd.py", exe);
                if (access(probe, R_OK) == 0) {
                        snprintf(helper, sizeof(helper), "%s", probe);
                        break;
                }
        }
        char *argv[] = {"/usr/bin/python3", helper, "127.0.0.1", NULL};
        int r = posix_spawn(&srv_pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        close(p[1]);
        char buf[32] = "";
        size_t n = 0;
        while (r == 0 && n < sizeof(buf) - 1 && !strchr(buf, '\n')) {
                struct pollfd pfd = {.fd = p[0], .events = POLLIN};
                if (poll(&pfd, 1, 20000) <= 0)
                        break;
                ssize_t k = read(p[0], buf + n, sizeof(buf) - 1 - n);
                if (k <= 0)
                        break;
                n += (size_t)k;
        }
        close(p[0]);
        srv_port = atoi(buf);
        return srv_port > 0 ? 0 : -1;
}

static int teardown(void **state)
{
        (void)state;
        if (srv_pid > 0) {
                kill(srv_pid, SIGTERM);
                waitpid(srv_pid, NULL, 0);
        }
        return 0;
}

/* The guest's code: the placeholder, then the digest the server got. */
static char code[512];

/* Runs code in the cache (or in sb when not NULL); returns "PH DIGEST". */
static char *digest_run(airlock_cache *cache, airlock_sandbox *sb, const airlock_config *cfg)
{
        airlock_error err;
        airlock_result *res = NULL;
        int r = sb ? airlock_sandbox_run(sb, code, strlen(code), NULL, &res, &err)
                   : airlock_cache_run(cache, cfg, code, strlen(code), NULL, &res, &err);
        if (r < 0)
                fail_msg("run: %s", err.message);
        if (!res->success)
                fail_msg("run failed: %.*s", (int)res->stderr_len, res->stderr_data);
        /* The usage record has the request, without its query. */
        assert_int_equal(res->usage.n_http, 1);
        assert_string_equal(res->usage.http[0].method, "GET");
        assert_int_equal(res->usage.http[0].status, 200);
        assert_true(res->usage.http[0].allowed);
        assert_null(strchr(res->usage.http[0].url, '?'));
        char *out = strndup(res->stdout_data, res->stdout_len);
        airlock_result_free(res);
        return out;
}

static void set_value(airlock_config *cfg, const char *value)
{
        char target[64];
        snprintf(target, sizeof(target), "http://localhost:%d/mirror=GET", srv_port);
        const char *t[] = {target, NULL};
        airlock_error err;
        if (airlock_config_add_secret(cfg, "K", value, strlen(value), 0, t, &err) < 0)
                fail_msg("add_secret: %s", err.message);
}

static void test_rotation(void **state)
{
        (void)state;
        snprintf(code, sizeof(code),
                 "import airlock\n"
                 "p = airlock.secret('K')\n"
                 "r = http_get('http://localhost:%d/mirror?x=1', headers={'Authorization': p})\n"
                 "print(p, r['body'].splitlines()[0])\n",
                 srv_port);
        airlock_error err;
        airlock_config *cfg = NULL;
        airlock_cache *cache = NULL;
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        char allow[64];
        snprintf(allow, sizeof(allow), "localhost:%d", srv_port);
        assert_int_equal(airlock_config_allow(cfg, allow, NULL, &err), 0);
        set_value(cfg, "first-value-0001");
        assert_int_equal(airlock_cache_new(4, 60, &cache, &err), 0);
        airlock_sandbox *before = NULL;
        if (airlock_sandbox_new(cfg, &before, &err) < 0)
                fail_msg("sandbox: %s", err.message);

        char *a = digest_run(cache, NULL, cfg);
        set_value(cfg, "second-value-002");
        char *b = digest_run(cache, NULL, cfg);
        char *old = digest_run(NULL, before, cfg);
        set_value(cfg, "first-value-0001");
        char *c = digest_run(cache, NULL, cfg);

        char ph[128];
        assert_int_equal(airlock_secret_placeholder("K", ph, sizeof(ph)), 0);
        /* One placeholder throughout; the digest follows the value. */
        for (char **s = (char *[]){a, b, old, c, NULL}; *s; s++)
                assert_int_equal(strncmp(*s, ph, strlen(ph)), 0);
        assert_string_not_equal(a, b);
        assert_string_equal(a, c);
        assert_string_equal(a, old); /* the sandbox made before keeps its value */
        free(a);
        free(b);
        free(c);
        free(old);
        airlock_sandbox_close(before);
        airlock_cache_close(cache);
        airlock_config_free(cfg);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_rotation),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
