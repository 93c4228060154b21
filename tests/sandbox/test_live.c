/* Live output of a run (airlock_run_options.on_output): the hook sees the code's
 * stdout and stderr while the code still runs, on the calling thread, every
 * byte of each stream in order, and the result keeps them all the same.
 * Uses a real sandbox; skipped when the kernel offers no isolation. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "airlock.h"

typedef struct seen {
        pthread_t thread;
        bool other_thread;
        char out[4096], err[4096];
        size_t out_len, err_len;
        int bad_stream;
        atomic_bool early; /* "early" has reached the hook */
} seen;

static void on_output(void *arg, int stream, const char *data, size_t len)
{
        seen *s = arg;
        if (!pthread_equal(s->thread, pthread_self()))
                s->other_thread = true;
        char *buf = stream == 1 ? s->out : s->err;
        size_t *n = stream == 1 ? &s->out_len : &s->err_len;
        if (stream != 1 && stream != 2) {
                s->bad_stream++;
                return;
        }
        size_t room = sizeof(s->out) - 1 - *n;
        size_t k = len < room ? len : room;
        memcpy(buf + *n, data, k);
        *n += k;
        buf[*n] = '\0';
        if (stream == 1 && strstr(s->out, "early"))
                atomic_store(&s->early, true);
}

/* The tool the code asks, while it runs, whether its flushed line has
 * reached the hook yet: the code waits for a yes, so the run ends only if
 * the hook saw the line while the code still ran (else it times out). */
static int tool_seen(void *userdata, const char *args_json, char **ret_result_json,
                     char **ret_error)
{
        seen *s = userdata;
        *ret_result_json = strdup(atomic_load(&s->early) ? "true" : "false");
        return *ret_result_json ? 0 : -1;
}

static void test_live_output(void **state)
{
        (void)state;
        airlock_cache *c = NULL;
        airlock_config *cfg = NULL;
        airlock_error err = {0};
        assert_int_equal(airlock_cache_new(0, 0, &c, &err), 0);
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        static const char code[] = "import sys, time\n"
                                   "print('early', flush=True)\n"
                                   "print('to stderr', file=sys.stderr)\n"
                                   "while not call_tool('seen'):\n"
                                   "    time.sleep(0.01)\n"
                                   "print('late')\n"
                                   "sys.stdout.write('x' * 100000)\n";
        seen s = {.thread = pthread_self()};
        airlock_tool_def tool = AIRLOCK_TOOL_DEF_INIT;
        tool.name = "seen";
        tool.fn = tool_seen;
        tool.userdata = &s;
        assert_int_equal(airlock_config_add_tool(cfg, &tool, &err), 0);
        airlock_result *res = NULL;
        airlock_run_options opts = AIRLOCK_RUN_OPTIONS_INIT;
        opts.on_output = on_output;
        opts.output_arg = &s;
        int r = airlock_cache_run(c, cfg, code, strlen(code), &opts, &res, &err);
        if (r < 0 && err.kind == AIRLOCK_ERROR_SANDBOX) {
                print_message("no sandbox here: %s\n", err.message);
                airlock_cache_close(c);
                airlock_config_free(cfg);
                skip();
        }
        assert_int_equal(r, 0);
        assert_true(res->success);
        assert_false(s.other_thread);
        assert_int_equal(s.bad_stream, 0);
        /* The flushed line came while the code still ran: it waited for
         * the tool to say so, and finished. */
        assert_true(atomic_load(&s.early));
        assert_int_equal(res->status, AIRLOCK_STATUS_OK);
        /* Every byte the hook saw is the result's, in order (the hook's copy
         * stops at its buffer). */
        assert_true(s.out_len > 0 && s.out_len <= res->stdout_len);
        assert_memory_equal(s.out, res->stdout_data, s.out_len);
        assert_true(strncmp(s.out, "early\nlate\nxxx", 14) == 0);
        assert_string_equal(s.err, "to stderr\n");
        assert_int_equal(res->stderr_len, strlen("to stderr\n"));
        airlock_result_free(res);

        /* A plain run on the same thread afterwards calls no hook. */
        memset(&s, 0, sizeof(s));
        s.thread = pthread_self();
        opts.on_output = NULL;
        assert_int_equal(airlock_cache_run(c, cfg, "print(1)", 8, &opts, &res, &err), 0);
        assert_int_equal(s.out_len + s.err_len, 0);
        airlock_result_free(res);
        airlock_cache_close(c);
        airlock_config_free(cfg);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_live_output),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
