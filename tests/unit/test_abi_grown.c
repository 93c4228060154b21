/* The growable structs' frozen minimum sizes (airlock.h, "Growable
 * structs"). This file and the library's readers of airlock_run_options and
 * airlock_tool_def are built with AIRLOCK_ABI_GROWN, which adds a field at
 * the end of each, as a later version of the library will. A program built
 * against the first version passes its smaller structs: they are described
 * here by copies of the first version's layouts, and must be accepted, with
 * the added field at its default. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "config/config.h"
#include "core/util.h"

#ifndef AIRLOCK_ABI_GROWN
#error "test_abi_grown.c is built with -DAIRLOCK_ABI_GROWN (see the Makefile)"
#endif

/* airlock_run_options and airlock_tool_def as airlock 0.1.0 declared them. */
typedef struct {
        size_t size;
        int cancel_fd;
        bool last;
        int watch_fd;
        void (*on_watch)(void *arg);
        void *watch_arg;
        airlock_output_fn on_output;
        void *output_arg;
} v1_run_options;

typedef struct {
        size_t size;
        const char *name;
        const char *description;
        const char *parameters_json;
        airlock_approval approval;
        airlock_tool_fn fn;
        void *userdata;
} v1_tool_def;

_Static_assert(sizeof(v1_run_options) == AIRLOCK_RUN_OPTIONS_SIZE_V1,
               "the run options' minimum is the first version's size");
_Static_assert(sizeof(v1_tool_def) == AIRLOCK_TOOL_DEF_SIZE_V1,
               "the tool definition's minimum is the first version's size");
_Static_assert(sizeof(airlock_run_options) > sizeof(v1_run_options),
               "this build's run options have grown");
_Static_assert(sizeof(airlock_tool_def) > sizeof(v1_tool_def),
               "this build's tool definition has grown");

static int no_tool(void *userdata, const char *args_json, char **ret_result_json, char **ret_error)
{
        return -1;
}

static void test_v1_run_options_accepted(void **state)
{
        airlock_error err = {0};
        v1_run_options v1 = {.size = sizeof(v1), .cancel_fd = 7, .last = true, .watch_fd = -1};
        airlock_run_options out;
        memset(&out, 0x5a, sizeof(out));
        assert_int_equal(al_run_options_in((const airlock_run_options *)&v1, &out, &err), 0);
        assert_int_equal(out.size, sizeof(airlock_run_options));
        assert_int_equal(out.cancel_fd, 7);
        assert_true(out.last);
        assert_int_equal(out.watch_fd, -1);
        assert_null(out.on_output);
        assert_int_equal(out.stdin_mode, AIRLOCK_STDIN_NONE);
        assert_null(out.on_input);
        assert_int_equal(out.abi_grown, 0);

        /* Below the minimum is an uninitialised struct, named as such. */
        v1.size = AIRLOCK_RUN_OPTIONS_SIZE_V1 - sizeof(void *);
        assert_int_equal(al_run_options_in((const airlock_run_options *)&v1, &out, &err), -EINVAL);
        assert_non_null(strstr(err.message, "AIRLOCK_RUN_OPTIONS_INIT"));

        /* This build's own struct, its new field set, is read whole. */
        airlock_run_options now = AIRLOCK_RUN_OPTIONS_INIT;
        now.abi_grown = 3;
        assert_int_equal(al_run_options_in(&now, &out, &err), 0);
        assert_int_equal(out.abi_grown, 3);

        /* A standard input mode needs its fd and is one of the modes. */
        airlock_run_options in = AIRLOCK_RUN_OPTIONS_INIT;
        in.stdin_mode = AIRLOCK_STDIN_STREAM;
        in.stdin_fd = -1;
        assert_int_equal(al_run_options_in(&in, &out, &err), -EINVAL);
        assert_non_null(strstr(err.message, "stdin_fd"));
        in.stdin_mode = 7;
        in.stdin_fd = 0;
        assert_int_equal(al_run_options_in(&in, &out, &err), -EINVAL);
        assert_non_null(strstr(err.message, "stdin_mode"));
        in.stdin_mode = AIRLOCK_STDIN_PROMPT;
        assert_int_equal(al_run_options_in(&in, &out, &err), 0);
}

static void test_v1_tool_def_accepted(void **state)
{
        airlock_config *cfg = NULL;
        airlock_error err = {0};
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        v1_tool_def v1 = {.size = sizeof(v1), .name = "old_tool", .fn = no_tool};
        assert_int_equal(airlock_config_add_tool(cfg, (const airlock_tool_def *)&v1, &err), 0);

        v1_tool_def small = {.size = offsetof(v1_tool_def, userdata), .name = "t2", .fn = no_tool};
        assert_int_equal(airlock_config_add_tool(cfg, (const airlock_tool_def *)&small, &err),
                         -EINVAL);
        assert_non_null(strstr(err.message, "AIRLOCK_TOOL_DEF_INIT"));

        airlock_tool_def now = AIRLOCK_TOOL_DEF_INIT;
        now.name = "new_tool";
        now.fn = no_tool;
        assert_int_equal(airlock_config_add_tool(cfg, &now, &err), 0);
        airlock_config_free(cfg);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_v1_run_options_accepted),
            cmocka_unit_test(test_v1_tool_def_accepted),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
