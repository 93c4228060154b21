/* The error record cannot lie: every error fills all of it (code, kind,
 * message, path), and every public function clears it on entry, so that a
 * record left over from an earlier failed call changes neither the result
 * of a later call that succeeds nor the kind (the command line's exit
 * status) of a later one that fails. The sandbox half needs namespaces, as
 * test_session does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "airlock.h"
#include "core/util.h"

static char dir[64];

static int setup(void **state)
{
        snprintf(dir, sizeof(dir), "/tmp/airlock-error-XXXXXX");
        return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
        rmdir(dir);
        return 0;
}

/* What an earlier call that failed for want of isolation leaves behind. */
static void make_stale(airlock_error *err)
{
        err->code = -EPERM;
        err->kind = AIRLOCK_ERROR_SANDBOX;
        snprintf(err->message, sizeof(err->message), "stale: an earlier call failed");
        snprintf(err->path, sizeof(err->path), "/stale");
}

static void assert_clear(const airlock_error *err)
{
        assert_int_equal(err->code, 0);
        assert_int_equal(err->kind, AIRLOCK_ERROR_INPUT);
        assert_string_equal(err->message, "");
        assert_string_equal(err->path, "");
}

static void test_al_error_fills_every_field(void **state)
{
        airlock_error err;
        make_stale(&err);
        assert_int_equal(al_error(&err, -EINVAL, NULL, "bad %s", "value"), -EINVAL);
        assert_int_equal(err.code, -EINVAL);
        assert_int_equal(err.kind, AIRLOCK_ERROR_INPUT);
        assert_string_equal(err.message, "bad value");
        assert_string_equal(err.path, "");

        assert_int_equal(al_error_kind(&err, AIRLOCK_ERROR_RUN, -EIO, "/p", "broke"), -EIO);
        assert_int_equal(err.kind, AIRLOCK_ERROR_RUN);
        assert_string_equal(err.path, "/p");
        /* A non-negative code is no error code. */
        assert_int_equal(al_error(&err, 5, NULL, "x"), -EINVAL);
        assert_int_equal(err.code, -EINVAL);
        assert_int_equal(al_error(NULL, -ENOENT, NULL, "x"), -ENOENT);
}

static void test_al_error_as(void **state)
{
        airlock_error err;
        /* A callee's error, reported as the caller's kind: its message stays,
         * and the record takes the code that was returned. */
        al_error(&err, -EPROTO, NULL, "the template broke");
        assert_int_equal(al_error_as(&err, AIRLOCK_ERROR_RUN, -ECHILD), -ECHILD);
        assert_int_equal(err.code, -ECHILD);
        assert_int_equal(err.kind, AIRLOCK_ERROR_RUN);
        assert_string_equal(err.message, "the template broke");
        /* A callee that returned an error without a word. */
        airlock_error_clear(&err);
        assert_int_equal(al_error_as(&err, AIRLOCK_ERROR_RUN, -EPIPE), -EPIPE);
        assert_int_equal(err.code, -EPIPE);
        assert_int_equal(err.kind, AIRLOCK_ERROR_RUN);
        assert_string_equal(err.message, strerror(EPIPE));
}

static int tool_echo(void *userdata, const char *args_json, char **ret_result_json,
                     char **ret_error)
{
        *ret_result_json = strdup(args_json);
        return *ret_result_json ? 0 : -1;
}

/* Each configuration call that succeeds after a failed one leaves a clear
 * record; one that fails says its own kind, whatever the stale one was. */
static void test_config_calls_clear_the_record(void **state)
{
        airlock_error err;
        airlock_config *cfg = NULL;
        make_stale(&err);
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        assert_clear(&err);

        make_stale(&err);
        assert_int_equal(airlock_config_set_workspace(cfg, dir, &err), 0);
        assert_clear(&err);
        make_stale(&err);
        assert_int_equal(airlock_config_add_mount(cfg, dir, "/m", &err), 0);
        assert_clear(&err);
        make_stale(&err);
        assert_int_equal(airlock_config_allow(cfg, "https://example.test", "GET", &err), 0);
        assert_clear(&err);
        make_stale(&err);
        assert_int_equal(airlock_config_load_tools(cfg, "tests/data/tools/tools.json", &err), 0);
        assert_clear(&err);
        airlock_tool_def def = {.size = sizeof(airlock_tool_def),
                                .name = "echo",
                                .description = "echo",
                                .fn = tool_echo};
        make_stale(&err);
        assert_int_equal(airlock_config_add_tool(cfg, &def, &err), 0);
        assert_clear(&err);
        make_stale(&err);
        assert_int_equal(airlock_config_remove_tool(cfg, "echo", &err), 0);
        assert_clear(&err);
        airlock_limits lim;
        airlock_config_get_limits(cfg, &lim);
        make_stale(&err);
        assert_int_equal(airlock_config_set_limits(cfg, &lim, &err), 0);
        assert_clear(&err);
        make_stale(&err);
        assert_int_equal(airlock_config_add_preload(cfg, "json", &err), 0);
        assert_clear(&err);
        make_stale(&err);
        assert_int_equal(airlock_config_add_python_path(cfg, dir, &err), 0);
        assert_clear(&err);
        char *desc = NULL, *instr = NULL;
        make_stale(&err);
        assert_int_equal(airlock_describe(cfg, &desc, &instr, &err), 0);
        assert_clear(&err);
        free(desc);
        free(instr);
        make_stale(&err);
        char *json = airlock_describe_json(cfg, &err);
        assert_non_null(json);
        assert_clear(&err);
        free(json);

        /* A later failure is of its own kind (exit 2 on the command line),
         * not of the stale record's (exit 3). */
        make_stale(&err);
        int r = airlock_config_add_preload(cfg, "not a module", &err);
        assert_true(r < 0);
        assert_int_equal(err.code, r);
        assert_int_equal(err.kind, AIRLOCK_ERROR_INPUT);
        assert_string_not_equal(err.message, "stale: an earlier call failed");
        assert_string_equal(err.path, "");
        airlock_config_free(cfg);
}

/* The same for the calls that run code: a sandbox, its runs and sessions,
 * its description and the cache. */
static void test_run_calls_clear_the_record(void **state)
{
        airlock_error err;
        airlock_config *cfg = NULL;
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        airlock_sandbox *sb = NULL;
        make_stale(&err);
        int r = airlock_sandbox_new(cfg, &sb, &err);
        if (r < 0)
                print_error("sandbox: %s\n", err.message);
        assert_int_equal(r, 0);
        assert_clear(&err);

        airlock_result *res = NULL;
        make_stale(&err);
        assert_int_equal(airlock_sandbox_run(sb, "print(1)", 8, NULL, &res, &err), 0);
        assert_clear(&err);
        assert_true(res->success);
        airlock_result_free(res);
        airlock_run_options opts = {.size = sizeof(airlock_run_options), .cancel_fd = -1};
        make_stale(&err);
        assert_int_equal(airlock_sandbox_run(sb, "print(2)", 8, &opts, &res, &err), 0);
        assert_clear(&err);
        airlock_result_free(res);

        airlock_session *s = NULL;
        make_stale(&err);
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        assert_clear(&err);
        make_stale(&err);
        assert_int_equal(airlock_session_run(s, "x = 1", 5, NULL, &res, &err), 0);
        assert_clear(&err);
        airlock_result_free(res);
        airlock_snapshot *snap = NULL;
        make_stale(&err);
        assert_int_equal(airlock_session_snapshot(s, &snap, &err), 0);
        assert_clear(&err);
        make_stale(&err);
        assert_int_equal(airlock_session_restore(s, snap, &err), 0);
        assert_clear(&err);
        airlock_snapshot_free(snap);
        airlock_session_close(s);

        char *desc = NULL, *instr = NULL;
        make_stale(&err);
        assert_int_equal(airlock_sandbox_describe(sb, &desc, &instr, &err), 0);
        assert_clear(&err);
        free(desc);
        free(instr);
        make_stale(&err);
        char *json = airlock_sandbox_describe_json(sb, &err);
        assert_non_null(json);
        assert_clear(&err);
        free(json);
        airlock_sandbox_close(sb);

        airlock_cache *c = NULL;
        make_stale(&err);
        assert_int_equal(airlock_cache_new(1, 60, &c, &err), 0);
        assert_clear(&err);
        make_stale(&err);
        assert_int_equal(airlock_cache_run(c, cfg, "print(3)", 8, NULL, &res, &err), 0);
        assert_clear(&err);
        airlock_result_free(res);
        make_stale(&err);
        assert_int_equal(airlock_cache_run(c, cfg, "print(4)", 8, &opts, &res, &err), 0);
        assert_clear(&err);
        airlock_result_free(res);
        make_stale(&err);
        json = airlock_cache_describe_json(c, cfg, &err);
        assert_non_null(json);
        assert_clear(&err);
        free(json);
        airlock_cache_close(c);
        airlock_config_free(cfg);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_al_error_fills_every_field),
            cmocka_unit_test(test_al_error_as),
            cmocka_unit_test(test_config_calls_clear_the_record),
            cmocka_unit_test(test_run_calls_clear_the_record),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
