/* The sandbox cache: fingerprints that change with every component of a
 * configuration, LRU and idle eviction, rebuilding after a template died,
 * parallel runs, and closing. Most tests use fake sandboxes (cache_set_ops)
 * and a fake clock, so they are exact and fast; the last ones use real
 * sandboxes and are skipped when the kernel offers no isolation. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <grp.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "sandbox/selfexe.h"
#include "config/config.h"
#include "core/util.h"
#include "common/airlock_test.h"
#include "common/proc.h"

/* ---- helpers ----------------------------------------------------------- */

static char tmp_root[64];

static char *fingerprint(const airlock_config *cfg)
{
        char *text = NULL;
        airlock_error err = {0};
        int r = cache_fingerprint(cfg, &text, &err);
        if (r < 0)
                fail_msg("cache_fingerprint: %s", err.message);
        return text;
}

static int setup_tmp(void **state)
{
        snprintf(tmp_root, sizeof(tmp_root), "/tmp/airlock-cache-XXXXXX");
        return mkdtemp(tmp_root) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_root);
        return system(cmd) == 0 ? 0 : -1;
}

static int cb_tool(void *ud, const char *args, char **ret, char **ret_err)
{
        *ret = strdup("1");
        return 0;
}

/* ---- fingerprint ------------------------------------------------------- */

/* Applies one change to a configuration and checks that the fingerprint
 * moved, then that a fresh identical configuration has the new text too. */
static void test_fingerprint_components(void **state)
{
        airlock_error err = {0};
        char ws[128], f[160], mnt[160];
        snprintf(ws, sizeof(ws), "%s/ws", tmp_root);
        assert_int_equal(mkdir(ws, 0755), 0);
        snprintf(f, sizeof(f), "%s/data.csv", ws);
        write_text(f, "a,b\n");
        snprintf(mnt, sizeof(mnt), "%s/extra.txt", tmp_root);
        write_text(mnt, "extra");

        airlock_config *cfg = new_config();
        char *prev = fingerprint(cfg);
        char *again = fingerprint(cfg);
        assert_string_equal(prev, again);
        free(again);

        airlock_config *copy = NULL;
        assert_int_equal(config_clone(cfg, &copy, &err), 0);
        again = fingerprint(copy);
        assert_string_equal(prev, again);
        free(again);
        airlock_config_free(copy);

        airlock_limits lim;
        airlock_tool_def def = {
            .size = sizeof(airlock_tool_def), .name = "t1", .description = "d", .fn = cb_tool};
        char tools[160];
        snprintf(tools, sizeof(tools), "%s/tools.json", tmp_root);
        write_text(tools, "{\"tools\": [{\"name\": \"t2\", \"description\": \"d\", "
                          "\"command\": [\"true\"]}]}");
        /* Every setter must change the fingerprint, also once the text of the
         * configuration has been kept from the step before. */
        for (int step = 0; step < 15; step++) {
                switch (step) {
                case 0:
                        assert_int_equal(airlock_config_set_workspace(cfg, ws, &err), 0);
                        break;
                case 1:
                        write_text(f, "a,b\n1,2\n"); /* content of the workspace */
                        break;
                case 2:
                        assert_int_equal(airlock_config_add_mount(cfg, mnt, "m/extra.txt", &err),
                                         0);
                        break;
                case 3:
                        assert_int_equal(airlock_config_add_mount(cfg, mnt, "m/other.txt", &err),
                                         0);
                        break;
                case 4:
                        assert_int_equal(airlock_config_add_tool(cfg, &def, &err), 0);
                        break;
                case 5:
                        def.description = "another description";
                        assert_int_equal(airlock_config_add_tool(cfg, &def, &err), 0);
                        break;
                case 6:
                        airlock_config_set_approval(cfg, AIRLOCK_APPROVAL_ALWAYS);
                        break;
                case 7:
                        assert_int_equal(airlock_config_allow(cfg, "example.com", "GET", &err), 0);
                        break;
                case 8:
                        assert_int_equal(airlock_config_allow(cfg, "example.com", "GET,POST", &err),
                                         0);
                        break;
                case 9:
                        airlock_config_get_limits(cfg, &lim);
                        lim.timeout_s = 31;
                        assert_int_equal(airlock_config_set_limits(cfg, &lim, &err), 0);
                        break;
                case 10:
                        airlock_config_get_limits(cfg, &lim);
                        lim.max_output_files = 7;
                        assert_int_equal(airlock_config_set_limits(cfg, &lim, &err), 0);
                        break;
                case 11:
                        assert_int_equal(airlock_config_add_preload(cfg, "json", &err), 0);
                        break;
                case 12:
                        assert_int_equal(airlock_config_remove_tool(cfg, "t1", &err), 0);
                        break;
                case 13:
                        assert_int_equal(airlock_config_load_tools(cfg, tools, &err), 0);
                        break;
                case 14:
                        /* A clone starts without the memo and keeps its own. */
                        assert_int_equal(config_clone(cfg, &copy, &err), 0);
                        airlock_config_free(cfg);
                        cfg = copy;
                        assert_int_equal(airlock_config_add_mount(cfg, mnt, "m/third.txt", &err),
                                         0);
                        break;
                }
                char *next = fingerprint(cfg);
                if (strcmp(prev, next) == 0)
                        fail_msg("step %d did not change the fingerprint", step);
                free(prev);
                prev = next;
        }
        free(prev);
        airlock_config_free(cfg);
}

/* An edit that keeps the size and the modification time (same tick) must
 * still change the fingerprint: small files are hashed by content. */
static void test_fingerprint_same_size_same_mtime(void **state)
{
        char ws[128], f[160];
        snprintf(ws, sizeof(ws), "%s/ws2", tmp_root);
        assert_int_equal(mkdir(ws, 0755), 0);
        snprintf(f, sizeof(f), "%s/data.txt", ws);
        write_text(f, "aaaa");
        struct stat st;
        assert_int_equal(stat(f, &st), 0);
        struct timespec times[2] = {st.st_atim, st.st_mtim};

        airlock_config *cfg = new_config();
        airlock_error err = {0};
        assert_int_equal(airlock_config_set_workspace(cfg, ws, &err), 0);
        char *before = fingerprint(cfg);

        /* Same size; mtime put back to the exact nanosecond. */
        int fd = open(f, O_WRONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, "bbbb", 4, 0), 4);
        assert_int_equal(futimens(fd, times), 0);
        close(fd);
        struct stat st2;
        assert_int_equal(stat(f, &st2), 0);
        assert_int_equal(st2.st_size, st.st_size);
        assert_int_equal(st2.st_mtim.tv_nsec, st.st_mtim.tv_nsec);
        assert_int_equal(st2.st_mtim.tv_sec, st.st_mtim.tv_sec);

        char *after = fingerprint(cfg);
        assert_string_not_equal(before, after);
        free(before);
        free(after);
        airlock_config_free(cfg);
}

/* A tree that cannot be staged cannot be fingerprinted: the error names it. */
static void test_fingerprint_error_names_path(void **state)
{
        char ws[128], link[160];
        snprintf(ws, sizeof(ws), "%s/ws3", tmp_root);
        assert_int_equal(mkdir(ws, 0755), 0);
        snprintf(link, sizeof(link), "%s/escape", ws);
        assert_int_equal(symlink("/etc/passwd", link), 0);
        airlock_config *cfg = new_config();
        airlock_error err = {0};
        assert_int_equal(airlock_config_set_workspace(cfg, ws, &err), 0);
        char *text = (char *)0x1;
        assert_true(cache_fingerprint(cfg, &text, &err) < 0);
        assert_ptr_equal(text, (char *)0x1);
        if (!strstr(err.message, "escape") && !strstr(err.path, "escape"))
                fail_msg("error does not name the link: %s (%s)", err.message, err.path);
        airlock_config_free(cfg);
}

/* ---- fake sandboxes ---------------------------------------------------- */

#define MAX_FAKES 64

struct airlock_sandbox {
        int id;
        bool closed;
        int runs;
        int die_next;   /* run_ex returns -EPIPE this many more times */
        int prev_id;    /* the sandbox it was built from (sandbox_new's prev), or -1 */
        bool prev_open; /* that one was still open while this one was built */
};

static struct {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        airlock_sandbox fakes[MAX_FAKES];
        int n;
        int fail_new;   /* sandbox_new fails this many more times */
        int die_each;   /* the next die_budget new sandboxes die on their first */
        int die_budget; /* die_each runs */
        /* Blocking runs: a run waits while block is set. */
        bool block;
        int inside, max_inside;
        uint64_t now;
        int closed_order[MAX_FAKES];
        int n_closed;
        int violations;   /* a closed sandbox was used or closed again */
        bool watch_armed; /* the last run got the call's watch not yet fired */
} fk = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void fake_reset(void)
{
        pthread_mutex_lock(&fk.lock);
        memset(fk.fakes, 0, sizeof(fk.fakes));
        fk.n = fk.fail_new = fk.die_each = fk.die_budget = fk.inside = fk.max_inside = fk.n_closed =
            0;
        fk.violations = 0;
        fk.block = false;
        fk.now = 1000000000ull;
        pthread_mutex_unlock(&fk.lock);
}

static int fake_new(const airlock_config *cfg, airlock_sandbox *prev, airlock_sandbox **ret,
                    airlock_error *err)
{
        pthread_mutex_lock(&fk.lock);
        if (fk.fail_new > 0) {
                fk.fail_new--;
                pthread_mutex_unlock(&fk.lock);
                return al_error(err, -ENOSYS, NULL, "fake: no namespaces here");
        }
        if (fk.n >= MAX_FAKES) {
                pthread_mutex_unlock(&fk.lock);
                return al_error(err, -ENOMEM, NULL, "fake: too many sandboxes");
        }
        airlock_sandbox *sb = &fk.fakes[fk.n];
        sb->id = fk.n++;
        sb->prev_id = prev ? prev->id : -1;
        sb->prev_open = prev && !prev->closed;
        sb->die_next = fk.die_budget > 0 ? fk.die_each : 0;
        if (fk.die_budget > 0)
                fk.die_budget--;
        pthread_mutex_unlock(&fk.lock);
        *ret = sb;
        return 0;
}

static int fake_run(airlock_sandbox *sb, const char *code, size_t len,
                    const airlock_run_options *opts, al_watch *w, airlock_result **ret,
                    airlock_error *err)
{
        /* No cmocka assertion here: runs happen on other threads. */
        pthread_mutex_lock(&fk.lock);
        if (sb->closed)
                fk.violations++;
        if (sb->die_next > 0) {
                sb->die_next--;
                pthread_mutex_unlock(&fk.lock);
                return al_error(err, -EPIPE, NULL, "fake: template died");
        }
        sb->runs++;
        /* The run fires the call's watch as the real one may, more than
         * once: only the first may reach the caller. */
        fk.watch_armed = w && w->fn;
        pthread_mutex_unlock(&fk.lock);
        al_watch_fire(w);
        al_watch_fire(w);
        pthread_mutex_lock(&fk.lock);
        fk.inside++;
        if (fk.inside > fk.max_inside)
                fk.max_inside = fk.inside;
        pthread_cond_broadcast(&fk.cond);
        /* Runs of code "fast..." never block. */
        while (fk.block && strncmp(code, "fast", 4) != 0)
                pthread_cond_wait(&fk.cond, &fk.lock);
        if (sb->closed)
                fk.violations++;
        fk.inside--;
        pthread_mutex_unlock(&fk.lock);
        airlock_result *r = calloc(1, sizeof(*r));
        r->success = true;
        /* The result names the sandbox and echoes the code, so results
         * that mix between threads would show. */
        r->stdout_len = (size_t)asprintf(&r->stdout_data, "%d:%.*s", sb->id, (int)len, code);
        *ret = r;
        return 0;
}

static void fake_close(airlock_sandbox *sb)
{
        pthread_mutex_lock(&fk.lock);
        if (sb->closed)
                fk.violations++;
        sb->closed = true;
        fk.closed_order[fk.n_closed++] = sb->id;
        pthread_mutex_unlock(&fk.lock);
}

static uint64_t fake_now(void)
{
        pthread_mutex_lock(&fk.lock);
        uint64_t n = fk.now;
        pthread_mutex_unlock(&fk.lock);
        return n;
}

static void advance(double seconds)
{
        pthread_mutex_lock(&fk.lock);
        fk.now += (uint64_t)(seconds * 1e9);
        pthread_mutex_unlock(&fk.lock);
}

static const cache_ops fake_ops = {
    .sandbox_new = fake_new,
    .sandbox_run = fake_run,
    .sandbox_close = fake_close,
    .now_ns = fake_now,
};

static airlock_cache *fake_cache(unsigned max, double idle)
{
        fake_reset();
        airlock_cache *c = NULL;
        airlock_error err = {0};
        assert_int_equal(airlock_cache_new(max, idle, &c, &err), 0);
        cache_set_ops(c, &fake_ops);
        return c;
}

/* Configurations that differ only in their timeout: cheap distinct keys. */
static airlock_config *config_n(int n)
{
        airlock_config *cfg = new_config();
        airlock_limits lim;
        airlock_error err = {0};
        airlock_config_get_limits(cfg, &lim);
        lim.timeout_s = 10 + n;
        assert_int_equal(airlock_config_set_limits(cfg, &lim, &err), 0);
        return cfg;
}

/* Runs code with cfg and returns the id of the sandbox that ran it. */
static int run_on(airlock_cache *c, const airlock_config *cfg, const char *code)
{
        airlock_result *res = NULL;
        airlock_error err = {0};
        int r = airlock_cache_run(c, cfg, code, strlen(code), NULL, &res, &err);
        if (r < 0)
                fail_msg("airlock_cache_run: %d %s", r, err.message);
        int id = -1;
        char tail[256];
        assert_int_equal(sscanf(res->stdout_data, "%d:%255s", &id, tail), 2);
        assert_string_equal(tail, code);
        airlock_result_free(res);
        return id;
}

static void test_same_config_reuses_sandbox(void **state)
{
        airlock_cache *c = fake_cache(4, -1);
        airlock_config *a = config_n(1);
        airlock_config *a2 = config_n(1);
        assert_int_equal(run_on(c, a, "x"), 0);
        assert_int_equal(run_on(c, a, "y"), 0);
        assert_int_equal(run_on(c, a2, "z"), 0); /* an equal configuration */
        cache_stats st;
        cache_get_stats(c, &st);
        assert_int_equal(st.created, 1);
        assert_int_equal(st.hits, 2);
        assert_int_equal(fk.fakes[0].runs, 3);
        airlock_cache_close(c);
        assert_true(fk.fakes[0].closed);
        airlock_config_free(a);
        airlock_config_free(a2);
}

static void count_watch(void *arg)
{
        (*(int *)arg)++;
}

/* One public call, one watch: the cache and the sandbox's run it calls
 * share the watch the call's options ask for, so the hook fires once per
 * call whichever layer fires it first, and again on the next call. */
static void test_watch_fires_once_per_call(void **state)
{
        airlock_cache *c = fake_cache(4, -1);
        airlock_config *a = config_n(1);
        int fired = 0;
        airlock_run_options o = AIRLOCK_RUN_OPTIONS_INIT;
        o.on_watch = count_watch;
        o.watch_arg = &fired;
        airlock_result *res = NULL;
        airlock_error err = {0};
        /* The first call builds: the cache fires before the build, and the
         * run gets the watch spent. */
        assert_int_equal(airlock_cache_run(c, a, "x", 1, &o, &res, &err), 0);
        airlock_result_free(res);
        assert_int_equal(fired, 1);
        assert_false(fk.watch_armed);
        /* The second finds the sandbox built: the run gets the watch armed
         * and fires it, twice, which reaches the caller once. */
        res = NULL;
        assert_int_equal(airlock_cache_run(c, a, "y", 1, &o, &res, &err), 0);
        airlock_result_free(res);
        assert_int_equal(fired, 2);
        assert_true(fk.watch_armed);
        /* Without on_watch there is nothing to fire. */
        res = NULL;
        assert_int_equal(airlock_cache_run(c, a, "z", 1, NULL, &res, &err), 0);
        airlock_result_free(res);
        assert_int_equal(fired, 2);
        assert_false(fk.watch_armed);
        airlock_cache_close(c);
        airlock_config_free(a);
}

static void test_lru_eviction_order(void **state)
{
        airlock_cache *c = fake_cache(2, -1);
        airlock_config *a = config_n(1), *b = config_n(2), *d = config_n(3);
        assert_int_equal(run_on(c, a, "1"), 0);
        assert_int_equal(run_on(c, b, "2"), 1);
        assert_int_equal(run_on(c, a, "3"), 0); /* a is now the most recent */
        assert_int_equal(run_on(c, d, "4"), 2); /* evicts b, the least recent */
        assert_int_equal(fk.n_closed, 1);
        assert_int_equal(fk.closed_order[0], 1);
        assert_int_equal(run_on(c, a, "5"), 0);
        assert_int_equal(run_on(c, b, "6"), 3); /* b comes back as a new sandbox, evicts d */
        assert_int_equal(fk.n_closed, 2);
        assert_int_equal(fk.closed_order[1], 2);
        cache_stats st;
        cache_get_stats(c, &st);
        assert_int_equal(st.sandboxes, 2);
        airlock_cache_close(c);
        assert_int_equal(fk.n_closed, 4);
        airlock_config_free(a);
        airlock_config_free(b);
        airlock_config_free(d);
}

static void test_default_cap_is_four(void **state)
{
        airlock_cache *c = fake_cache(0, -1);
        airlock_config *cfgs[6];
        for (int i = 0; i < 6; i++) {
                cfgs[i] = config_n(i);
                run_on(c, cfgs[i], "x");
        }
        cache_stats st;
        cache_get_stats(c, &st);
        assert_int_equal(st.sandboxes, CACHE_DEFAULT_MAX_SANDBOXES);
        assert_int_equal(fk.n_closed, 2);
        assert_int_equal(fk.closed_order[0], 0);
        assert_int_equal(fk.closed_order[1], 1);
        airlock_cache_close(c);
        for (int i = 0; i < 6; i++)
                airlock_config_free(cfgs[i]);
}

static void test_idle_timeout(void **state)
{
        airlock_cache *c = fake_cache(4, 10.0);
        airlock_config *a = config_n(1), *b = config_n(2);
        assert_int_equal(run_on(c, a, "1"), 0);
        advance(6);
        assert_int_equal(run_on(c, b, "2"), 1);
        advance(6); /* a idle 12 s, b 6 s */
        cache_reap(c);
        assert_true(fk.fakes[0].closed);
        assert_false(fk.fakes[1].closed);
        /* The next call reaps too, and a comes back as a new sandbox. */
        advance(11);
        assert_int_equal(run_on(c, a, "3"), 2);
        assert_true(fk.fakes[1].closed);
        cache_stats st;
        cache_get_stats(c, &st);
        assert_int_equal(st.sandboxes, 1);
        airlock_cache_close(c);
        airlock_config_free(a);
        airlock_config_free(b);
}

/* The reaper thread closes an idle sandbox without any cache call. */
static void test_reaper_thread(void **state)
{
        airlock_cache *c = fake_cache(4, 10.0);
        airlock_config *a = config_n(1);
        assert_int_equal(run_on(c, a, "1"), 0);
        advance(11);
        /* The reaper wakes at least once a second; allow it plenty. */
        bool closed = false;
        for (int i = 0; i < 300 && !closed; i++) {
                pthread_mutex_lock(&fk.lock);
                closed = fk.fakes[0].closed;
                pthread_mutex_unlock(&fk.lock);
                if (!closed)
                        usleep(100000);
        }
        assert_true(closed);
        cache_stats st;
        cache_get_stats(c, &st);
        assert_int_equal(st.sandboxes, 0);
        airlock_cache_close(c);
        airlock_config_free(a);
}

static void test_dead_template_rebuilt_once(void **state)
{
        airlock_cache *c = fake_cache(4, -1);
        airlock_config *a = config_n(1);
        fk.die_each = 1; /* the first sandbox dies on its first run */
        fk.die_budget = 1;
        assert_int_equal(run_on(c, a, "x"), 1);
        assert_true(fk.fakes[0].closed);
        cache_stats st;
        cache_get_stats(c, &st);
        assert_int_equal(st.rebuilds, 1);
        assert_int_equal(st.sandboxes, 1);

        /* Dying twice in a row is reported, not retried forever. */
        airlock_config *b = config_n(2);
        fk.die_each = 5;
        fk.die_budget = 2;
        airlock_result *res = NULL;
        airlock_error err = {0};
        assert_int_equal(airlock_cache_run(c, b, "y", 1, NULL, &res, &err), -EPIPE);
        assert_null(res);
        assert_int_equal(fk.n, 4); /* the first try and one rebuild */
        assert_true(fk.fakes[2].closed);
        assert_true(fk.fakes[3].closed);
        airlock_cache_close(c);
        airlock_config_free(a);
        airlock_config_free(b);
}

static void test_failed_build_not_cached(void **state)
{
        airlock_cache *c = fake_cache(4, -1);
        airlock_config *a = config_n(1);
        fk.fail_new = 1;
        airlock_result *res = NULL;
        airlock_error err = {0};
        assert_int_equal(airlock_cache_run(c, a, "x", 1, NULL, &res, &err), -ENOSYS);
        assert_string_equal(err.message, "fake: no namespaces here");
        assert_int_equal(run_on(c, a, "x"), 0); /* tried again, works */
        airlock_cache_close(c);
        airlock_config_free(a);
}

typedef struct run_arg {
        airlock_cache *c;
        const airlock_config *cfg;
        char code[16];
        int id;
} run_arg;

/* The thread version of run_on: records instead of asserting (cmocka's
 * assertions work only on the main thread). id -1: the run failed; -2: its
 * result was not its own. */
static void *run_thread(void *p)
{
        run_arg *a = p;
        airlock_result *res = NULL;
        airlock_error err = {0};
        a->id = -1;
        if (airlock_cache_run(a->c, a->cfg, a->code, strlen(a->code), NULL, &res, &err) < 0)
                return NULL;
        int id = -1;
        char tail[256];
        if (sscanf(res->stdout_data, "%d:%255s", &id, tail) == 2 && strcmp(tail, a->code) == 0)
                a->id = id;
        else
                a->id = -2;
        airlock_result_free(res);
        return NULL;
}

/* Waits (bounded, so a bug fails instead of hanging) until n runs are
 * inside the fake sandbox at once. */
static bool wait_inside(int n)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 30;
        pthread_mutex_lock(&fk.lock);
        int r = 0;
        while (fk.inside < n && r == 0)
                r = pthread_cond_timedwait(&fk.cond, &fk.lock, &ts);
        bool ok = fk.inside >= n;
        pthread_mutex_unlock(&fk.lock);
        return ok;
}

static void unblock(void)
{
        pthread_mutex_lock(&fk.lock);
        fk.block = false;
        pthread_cond_broadcast(&fk.cond);
        pthread_mutex_unlock(&fk.lock);
}

static void test_parallel_runs_share_one_sandbox(void **state)
{
        airlock_cache *c = fake_cache(4, -1);
        cache_set_max_parallel(c, 8);
        airlock_config *a = config_n(1);
        fk.block = true;
        pthread_t t[6];
        run_arg args[6];
        for (int i = 0; i < 6; i++) {
                args[i] = (run_arg){.c = c, .cfg = a};
                snprintf(args[i].code, sizeof(args[i].code), "run%d", i);
                pthread_create(&t[i], NULL, run_thread, &args[i]);
        }
        /* All six are inside the sandbox at the same time: the cache holds
         * no lock across runs. */
        bool all_inside = wait_inside(6);
        unblock();
        for (int i = 0; i < 6; i++)
                pthread_join(t[i], NULL); /* run_on checks each result is its own */
        assert_true(all_inside);
        assert_int_equal(fk.n, 1);
        for (int i = 0; i < 6; i++)
                assert_int_equal(args[i].id, 0);
        airlock_cache_close(c);
        airlock_config_free(a);
}

static void test_parallel_limit(void **state)
{
        airlock_cache *c = fake_cache(4, -1);
        cache_set_max_parallel(c, 2);
        airlock_config *a = config_n(1);
        fk.block = true;
        pthread_t t[5];
        run_arg args[5];
        for (int i = 0; i < 5; i++) {
                args[i] = (run_arg){.c = c, .cfg = a};
                snprintf(args[i].code, sizeof(args[i].code), "p%d", i);
                pthread_create(&t[i], NULL, run_thread, &args[i]);
        }
        assert_true(wait_inside(2));
        unblock();
        for (int i = 0; i < 5; i++)
                pthread_join(t[i], NULL);
        assert_int_equal(fk.max_inside, 2);
        assert_int_equal(fk.fakes[0].runs, 5);
        for (int i = 0; i < 5; i++)
                assert_int_equal(args[i].id, 0);
        airlock_cache_close(c);
        airlock_config_free(a);
}

/* A sandbox evicted while it runs is closed only when that run ends. */
static void test_eviction_waits_for_running(void **state)
{
        airlock_cache *c = fake_cache(1, -1);
        airlock_config *a = config_n(1), *b = config_n(2);
        fk.block = true;
        pthread_t t;
        run_arg arg = {.c = c, .cfg = a, .code = "slow"};
        pthread_create(&t, NULL, run_thread, &arg);
        assert_true(wait_inside(1));
        /* b evicts a (cap 1) while a's run is still going. */
        airlock_result *res = NULL;
        airlock_error err = {0};
        assert_int_equal(airlock_cache_run(c, b, "fast", 4, NULL, &res, &err), 0);
        airlock_result_free(res);
        pthread_mutex_lock(&fk.lock);
        bool a_closed_early = fk.fakes[0].closed;
        pthread_mutex_unlock(&fk.lock);
        unblock();
        pthread_join(t, NULL);
        assert_false(a_closed_early);
        assert_true(fk.fakes[0].closed);
        assert_false(fk.fakes[1].closed);
        assert_int_equal(arg.id, 0);
        airlock_cache_close(c);
        assert_true(fk.fakes[1].closed);
        assert_int_equal(fk.violations, 0);
        airlock_config_free(a);
        airlock_config_free(b);
}

/* A workspace edit makes a new sandbox and retires the stale one at once. */
static void test_workspace_edit_replaces_sandbox(void **state)
{
        char ws[128], f[160];
        snprintf(ws, sizeof(ws), "%s/ws_edit", tmp_root);
        assert_int_equal(mkdir(ws, 0755), 0);
        snprintf(f, sizeof(f), "%s/a.txt", ws);
        write_text(f, "one");
        airlock_cache *c = fake_cache(4, -1);
        airlock_config *a = new_config();
        airlock_config *other = config_n(1);
        airlock_error err = {0};
        assert_int_equal(airlock_config_set_workspace(a, ws, &err), 0);
        assert_int_equal(run_on(c, a, "1"), 0);
        assert_int_equal(run_on(c, other, "2"), 1);
        assert_int_equal(run_on(c, a, "3"), 0);
        write_text(f, "two");
        assert_int_equal(run_on(c, a, "4"), 2);
        cache_wait_later_closes(c);
        assert_true(fk.fakes[0].closed);  /* the stale version */
        assert_false(fk.fakes[1].closed); /* another configuration */
        /* The new version was built from the stale one (to reuse its
         * staged copy), which was closed only after that build; the
         * other configuration's was built from nothing. */
        assert_int_equal(fk.fakes[0].prev_id, -1);
        assert_int_equal(fk.fakes[1].prev_id, -1);
        assert_int_equal(fk.fakes[2].prev_id, 0);
        assert_true(fk.fakes[2].prev_open);
        cache_stats st;
        cache_get_stats(c, &st);
        assert_int_equal(st.sandboxes, 2);
        airlock_cache_close(c);
        airlock_config_free(a);
        airlock_config_free(other);
}

/* An unchanged workspace is not walked again: the tree set's watches
 * answer; an edit makes the next call walk (and rebuild); past the watch
 * cap every call walks, and edits are still seen. */
static void test_unchanged_workspace_is_not_walked(void **state)
{
        char ws[128], f[200], sub[160];
        snprintf(ws, sizeof(ws), "%s/ws_watch", tmp_root);
        assert_int_equal(mkdir(ws, 0755), 0);
        snprintf(sub, sizeof(sub), "%s/sub", ws);
        assert_int_equal(mkdir(sub, 0755), 0);
        snprintf(f, sizeof(f), "%s/a.txt", sub);
        write_text(f, "one");
        airlock_cache *c = fake_cache(4, -1);
        airlock_config *a = new_config();
        airlock_error err = {0};
        assert_int_equal(airlock_config_set_workspace(a, ws, &err), 0);
        cache_stats st;
        for (int i = 0; i < 3; i++)
                assert_int_equal(run_on(c, a, "1"), 0);
        cache_get_stats(c, &st);
        assert_int_equal(st.tree_walks, 1);
        assert_int_equal(st.tree_checks, 2);
        write_text(f, "two");
        assert_int_equal(run_on(c, a, "2"), 1);
        assert_int_equal(run_on(c, a, "3"), 1);
        cache_get_stats(c, &st);
        assert_int_equal(st.tree_walks, 2);
        assert_int_equal(st.tree_checks, 3);

        cache_set_watch_knobs(c, 1, 0); /* two directories, one watch */
        assert_int_equal(run_on(c, a, "4"), 1);
        assert_int_equal(run_on(c, a, "5"), 1);
        cache_get_stats(c, &st);
        assert_int_equal(st.tree_walks, 4);
        write_text(f, "tri");
        assert_int_equal(run_on(c, a, "6"), 2);
        airlock_cache_close(c);
        airlock_config_free(a);
}

/* ---- real sandboxes ---------------------------------------------------- */

/* Runs code through the cache; skips the test when this machine cannot make
 * a sandbox at all. Returns stdout (malloc'd). */
static char *real_run(airlock_cache *c, const airlock_config *cfg, const char *code)
{
        airlock_result *res = NULL;
        airlock_error err = {0};
        int r = airlock_cache_run(c, cfg, code, strlen(code), NULL, &res, &err);
        if (r < 0 && err.kind == AIRLOCK_ERROR_SANDBOX) {
                print_message("no sandbox here: %s\n", err.message);
                airlock_cache_close(c);
                skip();
        }
        if (r < 0)
                fail_msg("airlock_cache_run: %s", err.message);
        if (!res->success)
                fail_msg("run failed: %s %s", res->error_message ? res->error_message : "",
                         res->stderr_data ? res->stderr_data : "");
        char *out = strndup(res->stdout_data ? res->stdout_data : "", res->stdout_len);
        airlock_result_free(res);
        return out;
}

static void test_real_reuse_edit_and_close(void **state)
{
        char ws[128], f[160];
        snprintf(ws, sizeof(ws), "%s/ws_real", tmp_root);
        assert_int_equal(mkdir(ws, 0755), 0);
        snprintf(f, sizeof(f), "%s/a.txt", ws);
        write_text(f, "one");
        struct stat st;
        assert_int_equal(stat(f, &st), 0);

        /* The program's sealed memfd copy is made once per process and kept
         * for every later template (selfexe.c): made here, it is not counted
         * as left over. */
        assert_true(selfexe_fd(NULL) >= 0);
        int fds_before = count_fds();
        int children_before = count_children();
        airlock_cache *c = NULL;
        airlock_error err = {0};
        assert_int_equal(airlock_cache_new(0, 0, &c, &err), 0);
        airlock_config *cfg = new_config();
        assert_int_equal(airlock_config_set_workspace(cfg, ws, &err), 0);
        const char *code = "print(open('/input/a.txt').read())";
        char *out = real_run(c, cfg, code);
        assert_string_equal(out, "one\n");
        free(out);
        out = real_run(c, cfg, code);
        assert_string_equal(out, "one\n");
        free(out);
        cache_stats cs;
        cache_get_stats(c, &cs);
        assert_int_equal(cs.created, 1);
        assert_int_equal(cs.hits, 1);

        /* Same size, same mtime: still seen at the next run, in the same
         * sandbox (its template serves every version of the workspace). */
        write_text(f, "two");
        struct timespec times[2] = {st.st_atim, st.st_mtim};
        assert_int_equal(utimensat(AT_FDCWD, f, times, 0), 0);
        out = real_run(c, cfg, code);
        assert_string_equal(out, "two\n");
        free(out);
        cache_wait_later_closes(c);
        cache_get_stats(c, &cs);
        assert_int_equal(cs.created, 1);
        assert_int_equal(cs.sandboxes, 1);
        assert_int_equal(cs.closed, 0);
        assert_int_equal(cs.inputs_staged, 2);

        airlock_cache_close(c);
        airlock_config_free(cfg);
        /* Nothing left: no child process, no open fd. */
        assert_int_equal(count_children(), children_before);
        assert_int_equal(count_fds(), fds_before);
}

typedef struct real_arg {
        airlock_cache *c;
        const airlock_config *cfg;
        int index;
        int wrong; /* runs whose output was not their own */
} real_arg;

static void *real_thread(void *p)
{
        real_arg *a = p;
        for (int i = 0; i < 5; i++) {
                char code[64], expect[64];
                snprintf(code, sizeof(code), "print('t%d-%d')", a->index, i);
                snprintf(expect, sizeof(expect), "t%d-%d\n", a->index, i);
                airlock_result *res = NULL;
                airlock_error err = {0};
                if (airlock_cache_run(a->c, a->cfg, code, strlen(code), NULL, &res, &err) < 0 ||
                    !res->stdout_data || strcmp(res->stdout_data, expect) != 0)
                        a->wrong++;
                airlock_result_free(res);
        }
        return NULL;
}

static void test_real_threads_results_never_mix(void **state)
{
        airlock_cache *c = NULL;
        airlock_error err = {0};
        assert_int_equal(airlock_cache_new(0, 0, &c, &err), 0);
        airlock_config *cfg = new_config();
        free(real_run(c, cfg, "pass")); /* skips when there is no sandbox */
        pthread_t t[8];
        real_arg args[8];
        for (int i = 0; i < 8; i++) {
                args[i] = (real_arg){.c = c, .cfg = cfg, .index = i};
                pthread_create(&t[i], NULL, real_thread, &args[i]);
        }
        for (int i = 0; i < 8; i++)
                pthread_join(t[i], NULL);
        for (int i = 0; i < 8; i++)
                assert_int_equal(args[i].wrong, 0);
        cache_stats cs;
        cache_get_stats(c, &cs);
        assert_int_equal(cs.created, 1);
        airlock_cache_close(c);
        airlock_config_free(cfg);
}

typedef struct watch_state {
        int calls;
        pthread_t thread; /* the thread on_watch ran on */
} watch_state;

static void on_watch(void *arg)
{
        watch_state *w = arg;
        w->calls++;
        w->thread = pthread_self();
}

static int watched_run(airlock_cache *c, const airlock_config *cfg, const char *code, int fd,
                       watch_state *w)
{
        airlock_run_options opts = {.size = sizeof(airlock_run_options),
                                    .cancel_fd = -1,
                                    .watch_fd = fd,
                                    .on_watch = on_watch,
                                    .watch_arg = w};
        airlock_result *res = NULL;
        airlock_error err = {0};
        int r = airlock_cache_run(c, cfg, code, strlen(code), &opts, &res, &err);
        if (r < 0 && err.kind == AIRLOCK_ERROR_SANDBOX) {
                print_message("no sandbox here: %s\n", err.message);
                skip();
        }
        if (r >= 0)
                r = res->success ? 0 : -EIO;
        airlock_result_free(res);
        return r;
}

static void *write_later(void *p)
{
        usleep(300000);
        assert_int_equal(write(*(int *)p, "x", 1), 1);
        return NULL;
}

/* The watch of a caller that lends its thread: called once, on that
 * thread, for input during the run and before a build; never for a run
 * that neither waits nor sees input. */
static void test_real_watch(void **state)
{
        airlock_cache *c = NULL;
        airlock_error err = {0};
        assert_int_equal(airlock_cache_new(0, 0, &c, &err), 0);
        airlock_config *cfg = new_config();
        int p[2];
        assert_int_equal(pipe(p), 0);

        /* The first run builds the sandbox: the watch fires first. */
        watch_state w = {0};
        assert_int_equal(watched_run(c, cfg, "print(1)", p[0], &w), 0);
        assert_int_equal(w.calls, 1);
        assert_true(pthread_equal(w.thread, pthread_self()));

        /* A ready copy and no input: the run keeps the thread. The next
         * copy is prepared at idle priority, so a busy machine may need a
         * few tries before one is ready. */
        w.calls = -1;
        for (int i = 0; i < 50 && w.calls != 0; i++) {
                usleep(200000);
                memset(&w, 0, sizeof(w));
                assert_int_equal(watched_run(c, cfg, "print(1)", p[0], &w), 0);
                assert_true(w.calls <= 1);
        }
        assert_int_equal(w.calls, 0);

        /* Input while the code runs: once, on this thread. */
        usleep(500000);
        memset(&w, 0, sizeof(w));
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, write_later, &p[1]), 0);
        assert_int_equal(watched_run(c, cfg, "import time\ntime.sleep(1.5)", p[0], &w), 0);
        pthread_join(t, NULL);
        assert_int_equal(w.calls, 1);
        assert_true(pthread_equal(w.thread, pthread_self()));

        close(p[0]);
        close(p[1]);
        airlock_cache_close(c);
        airlock_config_free(cfg);
}

static void test_close_without_runs(void **state)
{
        airlock_cache *c = NULL;
        airlock_error err = {0};
        assert_int_equal(airlock_cache_new(0, 0, &c, &err), 0);
        airlock_cache_close(c);
        airlock_cache_close(NULL);
}

/* ---- one template, many workspaces ----------------------------------------- */

/* The staging areas in dir (the runs' TMPDIR): one per staged version. */
static int count_entries(const char *dir)
{
        DIR *d = opendir(dir);
        if (!d)
                return -1;
        int n = 0;
        for (struct dirent *e; (e = readdir(d));)
                n += e->d_name[0] != '.';
        closedir(d);
        return n;
}

/* Runs code with cfg and returns its stdout, or NULL (*why says why). */
static char *try_run(airlock_cache *c, const airlock_config *cfg, const char *code, char *why,
                     size_t n)
{
        airlock_result *res = NULL;
        airlock_error err = {0};
        if (airlock_cache_run(c, cfg, code, strlen(code), NULL, &res, &err) < 0) {
                snprintf(why, n, "run: %s", err.message);
                return NULL;
        }
        char *out = res->success
                        ? strndup(res->stdout_data ? res->stdout_data : "", res->stdout_len)
                        : NULL;
        if (!out)
                snprintf(why, n, "run failed: %s", res->stderr_data ? res->stderr_data : "");
        airlock_result_free(res);
        return out;
}

#define CHECK(cond, ...)                                                                           \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        snprintf(why, n, __VA_ARGS__);                                             \
                        goto out;                                                                  \
                }                                                                                  \
        } while (0)

/* The scenario of the two tests below, as whoever runs it (root, or an
 * unprivileged user whose overlays the mounter makes): three workspaces,
 * one template; each run sees its own files only and no host path; an
 * edit is a new version of one input, not a new sandbox; a session keeps
 * the version it opened with; nothing is left behind. 0, or -1 with why. */
static int many_workspaces(const char *root, char *why, size_t n)
{
        char stage[128], ws[3][128], f[192];
        snprintf(stage, sizeof(stage), "%s/stage", root);
        if (mkdir(stage, 0700) < 0 || setenv("TMPDIR", stage, 1) < 0) {
                snprintf(why, n, "cannot make %s", stage);
                return -1;
        }
        airlock_cache *c = NULL;
        airlock_config *base = NULL, *cfg[3] = {NULL, NULL, NULL};
        airlock_session *s = NULL;
        char *out = NULL, sub[2048] = "";
        int r = -1;
        airlock_error err = {0};
        CHECK(airlock_cache_new(0, 0, &c, &err) == 0, "cache: %s", err.message);
        CHECK(airlock_config_new(&base, &err) == 0, "config: %s", err.message);
        for (int i = 0; i < 3; i++) {
                snprintf(ws[i], sizeof(ws[i]), "%s/ws%d", root, i);
                CHECK(mkdir(ws[i], 0755) == 0, "mkdir %s", ws[i]);
                snprintf(f, sizeof(f), "%s/own%d.txt", ws[i], i);
                FILE *fp = fopen(f, "we");
                CHECK(fp && fprintf(fp, "v1-%d", i) > 0 && fclose(fp) == 0, "write %s", f);
                CHECK(airlock_config_copy(base, &cfg[i], &err) == 0, "copy: %s", err.message);
                CHECK(airlock_config_set_workspace(cfg[i], ws[i], &err) == 0, "ws: %s",
                      err.message);
        }
        const char *list = "import os\nprint(sorted(os.listdir('/input')), "
                           "[open('/input/'+f).read() for f in sorted(os.listdir('/input'))])";
        for (int round = 0; round < 2; round++)
                for (int i = 0; i < 3; i++) {
                        char expect[128];
                        snprintf(expect, sizeof(expect), "['own%d.txt'] ['v1-%d']\n", i, i);
                        out = try_run(c, cfg[i], list, sub, sizeof(sub));
                        CHECK(out && strcmp(out, expect) == 0, "workspace %d saw %s", i,
                              out ? out : sub);
                        free(out);
                        out = NULL;
                }
        cache_stats cs;
        cache_get_stats(c, &cs);
        CHECK(cs.created == 1 && cs.inputs_staged == 3, "created %llu sandboxes, staged %llu",
              (unsigned long long)cs.created, (unsigned long long)cs.inputs_staged);

        /* Nothing of the host's staging shows, and /input is a file system
         * of its own. */
        out = try_run(c, cfg[1], "print(open('/proc/self/mountinfo').read())", sub, sizeof(sub));
        CHECK(out, "mountinfo: %s", sub);
        CHECK(!strstr(out, stage) && !strstr(out, root) && !strstr(out, "airlock-stage"),
              "mountinfo names a host path: %s", out);
        CHECK(strstr(out, " / /input ro,"), "no /input overlay in %s", out);
        free(out);
        out = NULL;

        /* A session keeps the version it opened with. */
        CHECK(airlock_cache_session_open(c, cfg[2], &s, &err) == 0, "session: %s", err.message);
        snprintf(f, sizeof(f), "%s/own2.txt", ws[2]);
        FILE *fp = fopen(f, "we");
        CHECK(fp && fputs("v2-2", fp) >= 0 && fclose(fp) == 0, "write %s", f);
        out = try_run(c, cfg[2], list, sub, sizeof(sub));
        CHECK(out && strcmp(out, "['own2.txt'] ['v2-2']\n") == 0, "edit not seen: %s",
              out ? out : sub);
        free(out);
        out = NULL;
        airlock_result *res = NULL;
        CHECK(airlock_session_run(s, list, strlen(list), NULL, &res, &err) == 0 && res->success &&
                  res->stdout_data && strcmp(res->stdout_data, "['own2.txt'] ['v1-2']\n") == 0,
              "the session saw %s", res && res->stdout_data ? res->stdout_data : err.message);
        airlock_result_free(res);
        cache_get_stats(c, &cs);
        CHECK(cs.created == 1 && cs.inputs_staged == 4,
              "after the edit: %llu sandboxes, %llu "
              "staged",
              (unsigned long long)cs.created, (unsigned long long)cs.inputs_staged);
        /* The version after an edit, with the session holding the one
         * before, staged only the edited file: a layer of it over the held
         * version (issue 40), not a tree of links to every file. */
        CHECK(cs.input_files_staged == 3 + 1, "%llu files staged for 4 versions",
              (unsigned long long)cs.input_files_staged);
        /* Four staging areas while the session holds the old version (the
         * new one is a layer over it). */
        CHECK(count_entries(stage) == 4, "%d staging areas with the session open",
              count_entries(stage));
        /* More files, then one edited and one removed, the session still
         * open on the first version: each new version stages what changed
         * (a file added, edited or removed: one each), and the runs see
         * the edit, the removal and every unchanged file. */
        for (int k = 0; k < 20; k++) {
                snprintf(f, sizeof(f), "%s/more%02d.txt", ws[2], k);
                fp = fopen(f, "we");
                CHECK(fp && fprintf(fp, "m%d", k) > 0 && fclose(fp) == 0, "write %s", f);
        }
        out = try_run(c, cfg[2], "import os\nprint(len(os.listdir('/input')))", sub, sizeof(sub));
        CHECK(out && strcmp(out, "21\n") == 0, "after adding 20 files: %s", out ? out : sub);
        free(out);
        out = NULL;
        cache_get_stats(c, &cs);
        uint64_t before = cs.input_files_staged;
        snprintf(f, sizeof(f), "%s/more07.txt", ws[2]);
        fp = fopen(f, "we");
        CHECK(fp && fputs("edited", fp) >= 0 && fclose(fp) == 0, "write %s", f);
        const char *all = "import os\nn=sorted(os.listdir('/input'))\n"
                          "print(len(n), open('/input/more07.txt').read(), "
                          "open('/input/more08.txt').read(), open('/input/own2.txt').read())";
        out = try_run(c, cfg[2], all, sub, sizeof(sub));
        CHECK(out && strcmp(out, "21 edited m8 v2-2\n") == 0, "after an edit: %s", out ? out : sub);
        free(out);
        out = NULL;
        cache_get_stats(c, &cs);
        CHECK(cs.input_files_staged == before + 1, "an edit of one file of 21 staged %llu files",
              (unsigned long long)(cs.input_files_staged - before));
        snprintf(f, sizeof(f), "%s/more03.txt", ws[2]);
        CHECK(unlink(f) == 0, "unlink %s", f);
        out = try_run(c, cfg[2],
                      "import os\nprint(len(os.listdir('/input')), "
                      "os.path.exists('/input/more03.txt'), open('/input/more07.txt').read())",
                      sub, sizeof(sub));
        CHECK(out && strcmp(out, "20 False edited\n") == 0, "after a removal: %s", out ? out : sub);
        free(out);
        out = NULL;
        cache_get_stats(c, &cs);
        CHECK(cs.input_files_staged == before + 1, "a removal staged %llu files",
              (unsigned long long)(cs.input_files_staged - before - 1));
        res = NULL;
        CHECK(airlock_session_run(s, list, strlen(list), NULL, &res, &err) == 0 && res->success &&
                  res->stdout_data && strcmp(res->stdout_data, "['own2.txt'] ['v1-2']\n") == 0,
              "the session then saw %s", res && res->stdout_data ? res->stdout_data : err.message);
        airlock_result_free(res);
        airlock_session_close(s);
        s = NULL;
        /* Removed beside the runs, on a thread of its own; the held
         * version's files stay while the layer over them does. */
        cache_wait_later_closes(c);
        CHECK(count_entries(stage) == 4, "%d staging areas after the session closed",
              count_entries(stage));
        r = 0;
out:
        free(out);
        if (s)
                airlock_session_close(s);
        airlock_cache_close(c);
        if (r == 0 && count_entries(stage) != 0) {
                snprintf(why, n, "%d staging areas left after the cache closed",
                         count_entries(stage));
                r = -1;
        }
        for (int i = 0; i < 3; i++)
                airlock_config_free(cfg[i]);
        airlock_config_free(base);
        unsetenv("TMPDIR");
        return r;
}

static void test_real_many_workspaces_one_template(void **state)
{
        char root[128], why[4096] = "";
        snprintf(root, sizeof(root), "%s/many", tmp_root);
        assert_int_equal(mkdir(root, 0755), 0);
        assert_true(selfexe_fd(NULL) >= 0);
        int fds_before = count_fds();
        int children_before = count_children();
        if (many_workspaces(root, why, sizeof(why)) < 0)
                fail_msg("%s", why);
        assert_int_equal(count_children(), children_before);
        assert_int_equal(count_fds(), fds_before);
}

/* A writable /input over a late input: the run's changes are listed, the
 * staged copy and the workspace stay as they were, and the next run (of
 * another workspace on the same template, then of this one) sees neither. */
static void test_real_writable_late_input(void **state)
{
        char ws[2][128], f[320];
        airlock_error err = {0};
        airlock_cache *c = NULL;
        assert_int_equal(airlock_cache_new(0, 0, &c, &err), 0);
        airlock_config *cfg[2];
        for (int i = 0; i < 2; i++) {
                snprintf(ws[i], sizeof(ws[i]), "%s/wr%d", tmp_root, i);
                assert_int_equal(mkdir(ws[i], 0755), 0);
                snprintf(f, sizeof(f), "%s/keep%d.txt", ws[i], i);
                write_text(f, "k");
                cfg[i] = new_config();
                assert_int_equal(airlock_config_set_workspace(cfg[i], ws[i], &err), 0);
                airlock_config_set_input_writable(cfg[i], true);
        }
        const char *code = "import os\nopen('/input/new.txt', 'w').write('x')\n"
                           "os.remove('/input/keep0.txt')\nprint(sorted(os.listdir('/input')))";
        airlock_result *res = NULL;
        assert_int_equal(airlock_cache_run(c, cfg[0], code, strlen(code), NULL, &res, &err), 0);
        assert_true(res->success);
        assert_string_equal(res->stdout_data, "['new.txt']\n");
        assert_int_equal(res->n_input_changes, 2);
        airlock_result_free(res);
        char *out = real_run(c, cfg[1], "import os\nprint(sorted(os.listdir('/input')))");
        assert_string_equal(out, "['keep1.txt']\n");
        free(out);
        out = real_run(c, cfg[0], "import os\nprint(sorted(os.listdir('/input')))");
        assert_string_equal(out, "['keep0.txt']\n");
        free(out);
        snprintf(f, sizeof(f), "%s/keep0.txt", ws[0]);
        assert_int_equal(access(f, F_OK), 0);
        cache_stats cs;
        cache_get_stats(c, &cs);
        assert_int_equal(cs.created, 1);
        airlock_cache_close(c);
        airlock_config_free(cfg[0]);
        airlock_config_free(cfg[1]);
}

/* The same without root: the overlays come from the mounter. */
static void test_real_many_workspaces_unprivileged(void **state)
{
        if (geteuid() != 0) {
                char why[4096] = "", root[128];
                snprintf(root, sizeof(root), "%s/many-user", tmp_root);
                assert_int_equal(mkdir(root, 0755), 0);
                if (many_workspaces(root, why, sizeof(why)) < 0)
                        fail_msg("%s", why);
                return;
        }
        char root[128];
        snprintf(root, sizeof(root), "%s/many-nobody", tmp_root);
        assert_int_equal(mkdir(root, 0755), 0);
        assert_int_equal(chown(root, 65534, 65534), 0);
        assert_int_equal(chmod(tmp_root, 0755), 0);
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                char why[4096] = "";
                close(p[0]);
                int r = -1;
                if (setgroups(0, NULL) == 0 && setresgid(65534, 65534, 65534) == 0 &&
                    setresuid(65534, 65534, 65534) == 0)
                        r = many_workspaces(root, why, sizeof(why));
                else
                        snprintf(why, sizeof(why), "cannot become nobody: %m");
                if (r < 0)
                        (void)!write(p[1], why, strlen(why));
                _exit(r < 0 ? 1 : 0);
        }
        close(p[1]);
        char why[4096] = "";
        ssize_t k = read(p[0], why, sizeof(why) - 1);
        why[k > 0 ? k : 0] = '\0';
        close(p[0]);
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail_msg("as nobody: %s (status %d)", why, status);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_fingerprint_components),
            cmocka_unit_test(test_fingerprint_same_size_same_mtime),
            cmocka_unit_test(test_fingerprint_error_names_path),
            cmocka_unit_test(test_same_config_reuses_sandbox),
            cmocka_unit_test(test_watch_fires_once_per_call),
            cmocka_unit_test(test_lru_eviction_order),
            cmocka_unit_test(test_default_cap_is_four),
            cmocka_unit_test(test_idle_timeout),
            cmocka_unit_test(test_reaper_thread),
            cmocka_unit_test(test_dead_template_rebuilt_once),
            cmocka_unit_test(test_failed_build_not_cached),
            cmocka_unit_test(test_parallel_runs_share_one_sandbox),
            cmocka_unit_test(test_parallel_limit),
            cmocka_unit_test(test_eviction_waits_for_running),
            cmocka_unit_test(test_close_without_runs),
            cmocka_unit_test(test_workspace_edit_replaces_sandbox),
            cmocka_unit_test(test_unchanged_workspace_is_not_walked),
            cmocka_unit_test(test_real_reuse_edit_and_close),
            cmocka_unit_test(test_real_threads_results_never_mix),
            cmocka_unit_test(test_real_watch),
            cmocka_unit_test(test_real_many_workspaces_one_template),
            cmocka_unit_test(test_real_many_workspaces_unprivileged),
            cmocka_unit_test(test_real_writable_late_input),
        };
        return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
