/* The limits table (config/limits.h): the defaults it generates, the ranges
 * the library checks, the options the command line sets through the public
 * API, and the template's parameters, which go through JSON and back. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <string.h>

#include "config/limits.h"
#include "core/util.h"

/* The defaults as airlock.h documents them, written out by hand once: the
 * table must not change one of them by accident. */
static void test_defaults(void **state)
{
        airlock_limits l;
        memset(&l, 0xa5, sizeof(l));
        airlock_limits_default(&l);
        assert_true(l.timeout_s == 30);
        assert_true(l.cpu_s == 0);
        assert_int_equal(l.memory_bytes, 512ull << 20);
        assert_int_equal(l.pids, 64);
        assert_int_equal(l.open_files, 256);
        assert_int_equal(l.max_file_bytes, 0);
        assert_int_equal(l.tmp_bytes, 0);
        assert_int_equal(l.output_fs_bytes, 0);
        /* Their zeros are derived from the documented limits. */
        airlock_limits r = l;
        r.memory_bytes = 4096ull << 20;
        limits_resolve_sizes(&r);
        assert_int_equal(r.output_fs_bytes, 65ull << 20);
        assert_int_equal(r.tmp_bytes, 4096ull << 20);
        assert_int_equal(r.max_file_bytes, 4096ull << 20);
        r = l;
        r.memory_bytes = 32ull << 20;
        limits_resolve_sizes(&r);
        assert_int_equal(r.tmp_bytes, 32ull << 20);
        assert_int_equal(r.max_file_bytes, 65ull << 20);
        assert_int_equal(l.max_output_file, 16ull << 20);
        assert_int_equal(l.max_output_total, 64ull << 20);
        assert_int_equal(l.max_output_files, 1000);
        assert_int_equal(l.max_output_depth, 64);
        assert_int_equal(l.max_stdout, 1ull << 20);
        assert_int_equal(l.max_stage_bytes, 4ull << 30);
        assert_int_equal(l.max_stage_files, 100000);
        assert_int_equal(l.max_stage_depth, 256);
        assert_true(l.tool_timeout_s == 30);
        assert_int_equal(l.http_max_request, 16ull << 20);
        assert_int_equal(l.http_max_response, 16ull << 20);
        assert_true(l.http_timeout_s == 30);
        airlock_error err = {0};
        assert_int_equal(limits_check(&l, &err), 0);
}

static void test_check_names_the_field(void **state)
{
        airlock_limits l;
        airlock_error err = {0};
        airlock_limits_default(&l);
        l.memory_bytes = 1ull << 20;
        assert_int_equal(limits_check(&l, &err), -EINVAL);
        assert_string_equal(err.message,
                            "limit memory_bytes = 1 MiB is out of range [16 MiB, 1024 GiB]");
        airlock_limits_default(&l);
        l.cpu_s = NAN;
        assert_int_equal(limits_check(&l, &err), -EINVAL);
        assert_non_null(strstr(err.message, "cpu_s"));
        airlock_limits_default(&l);
        l.pids = 65537;
        assert_int_equal(limits_check(&l, &err), -EINVAL);
        assert_string_equal(err.message, "limit pids = 65537 is out of range [1, 65536]");
}

static void test_options(void **state)
{
        static const char *const names[] = {
            "timeout",          "memory",           "pids",       "max-output-file",
            "max-output-total", "max-output-files", "max-stdout", "ready-copies"};
        size_t n = 0;
        while (airlock_limit_option_at(n))
                n++;
        assert_int_equal(n, ARRAY_SIZE(names));
        for (size_t i = 0; i < n; i++)
                assert_string_equal(airlock_limit_option_at(i)->name, names[i]);
        assert_string_equal(airlock_limit_option_at(1)->unit, "MIB");

        airlock_limits l;
        airlock_error err = {0};
        airlock_limits_default(&l);
        assert_int_equal(airlock_limits_set_option(&l, "memory", "100", &err), 0);
        assert_int_equal(l.memory_bytes, 100ull << 20);
        assert_int_equal(airlock_limits_set_option(&l, "max-stdout", "3", &err), 0);
        assert_int_equal(l.max_stdout, 3ull << 10);
        assert_int_equal(airlock_limits_set_option(&l, "timeout", "2.5", &err), 0);
        assert_true(l.timeout_s == 2.5);
        /* A refused value leaves the limit as it was. */
        assert_int_equal(airlock_limits_set_option(&l, "pids", "0", &err), -EINVAL);
        assert_string_equal(err.message,
                            "--pids: '0' is out of range: a whole number from 1 to 65536");
        assert_int_equal(l.pids, 64);
        assert_int_equal(airlock_limits_set_option(&l, "memory", "18446744073709551615", &err),
                         -EINVAL);
        assert_int_equal(l.memory_bytes, 100ull << 20);
        assert_int_equal(airlock_limits_set_option(&l, "open-files", "5", &err), -ENOENT);

        char buf[32];
        assert_int_equal(airlock_limits_format_option(&l, "memory", buf, sizeof(buf)), 3);
        assert_string_equal(buf, "100");
        assert_true(airlock_limits_format_option(&l, "timeout", buf, sizeof(buf)) > 0);
        assert_string_equal(buf, "2.5");
        assert_int_equal(airlock_limits_format_option(&l, "memory", buf, 2), -ENOBUFS);
        assert_int_equal(airlock_limits_format_option(&l, "nope", buf, sizeof(buf)), -ENOENT);
}

/* What the template needs crosses as JSON and comes back as it was, the
 * largest values included; what it does not need is not sent. */
static void test_template_json(void **state)
{
        airlock_limits l, back;
        airlock_limits_default(&l);
        l.timeout_s = 0.1;
        l.max_file_bytes = UINT64_MAX;
        l.pids = UINT32_MAX;
        l.max_output_total = 5;
        json_t *j = json_object();
        assert_int_equal(limits_to_json(&l, j), 0);
        assert_null(json_object_get(j, "max_output_total"));
        assert_null(json_object_get(j, "max_stage_bytes"));
        char *text = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        j = json_loads(text, 0, NULL);
        free(text);
        airlock_limits_default(&back);
        limits_from_json(&back, j);
        json_decref(j);
        assert_true(back.timeout_s == 0.1);
        assert_int_equal(back.max_file_bytes, UINT64_MAX);
        assert_int_equal(back.pids, UINT32_MAX);
        assert_int_equal(back.max_output_total, 64ull << 20);
}

/* Two sets of limits give one fingerprint text exactly when they are equal. */
static void test_fingerprint(void **state)
{
        airlock_limits a, b;
        airlock_limits_default(&a);
        b = a;
        char *ta = limits_fingerprint_text(&a), *tb = limits_fingerprint_text(&b);
        assert_string_equal(ta, tb);
        free(tb);
        b.http_timeout_s += 1e-12; /* equal in "%g", not in "%a" */
        tb = limits_fingerprint_text(&b);
        assert_string_not_equal(ta, tb);
        free(tb);
        b = a;
        b.max_stage_depth++;
        tb = limits_fingerprint_text(&b);
        assert_string_not_equal(ta, tb);
        free(ta);
        free(tb);
}

static int no_tool(void *userdata, const char *args_json, char **ret_result_json, char **ret_error)
{
        return -1;
}

/* The growable structs of airlock.h: a caller's size is read, never
 * trusted beyond what the library knows. */
static void test_growable_structs(void **state)
{
        airlock_config *cfg = NULL;
        airlock_error err = {0};
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        assert_string_equal(airlock_version(), AIRLOCK_VERSION);

        /* No size: refused, naming the initialiser. */
        airlock_limits l;
        memset(&l, 0, sizeof(l));
        l.timeout_s = 5;
        assert_int_equal(airlock_config_set_limits(cfg, &l, &err), -EINVAL);
        assert_non_null(strstr(err.message, "airlock_limits_default"));

        /* A newer caller's struct: its unknown tail may be zero, not set. */
        struct {
                airlock_limits l;
                uint64_t newer[4];
        } big;
        memset(&big, 0, sizeof(big));
        airlock_limits_init(&big.l, sizeof(big));
        assert_int_equal(big.l.size, sizeof(big));
        big.l.timeout_s = 7;
        assert_int_equal(airlock_config_set_limits(cfg, &big.l, &err), 0);
        big.newer[2] = 1;
        assert_int_equal(airlock_config_set_limits(cfg, &big.l, &err), -E2BIG);

        /* Reading back writes no more than the caller's size. */
        memset(&big, 0x5a, sizeof(big));
        airlock_config_read_limits(cfg, &big.l, sizeof(big.l));
        assert_true(big.l.timeout_s == 7);
        assert_int_equal(big.l.size, sizeof(big.l));
        assert_int_equal(big.newer[0], 0x5a5a5a5a5a5a5a5aull);

        /* An option whose field the caller's struct lacks is unknown. */
        airlock_limits_default(&l);
        l.size = offsetof(airlock_limits, ready_copies);
        assert_int_equal(airlock_limits_set_option(&l, "timeout", "3", &err), 0);
        assert_int_equal(airlock_limits_set_option(&l, "ready-copies", "2", &err), -ENOENT);
        char buf[32];
        assert_int_equal(airlock_limits_format_option(&l, "timeout", buf, sizeof(buf)), 1);
        assert_int_equal(airlock_limits_format_option(&l, "ready-copies", buf, sizeof(buf)),
                         -ENOENT);

        /* Run options and tool definitions follow the same rule. */
        airlock_cache *c = NULL;
        assert_int_equal(airlock_cache_new(1, 0, &c, &err), 0);
        airlock_run_options o = {.cancel_fd = -1};
        airlock_result *res = NULL;
        assert_int_equal(airlock_cache_run(c, cfg, "print(1)", 8, &o, &res, &err), -EINVAL);
        assert_non_null(strstr(err.message, "AIRLOCK_RUN_OPTIONS_INIT"));
        assert_null(res);
        airlock_cache_close(c);
        airlock_tool_def t = {.name = "t", .fn = no_tool};
        assert_int_equal(airlock_config_add_tool(cfg, &t, &err), -EINVAL);
        assert_non_null(strstr(err.message, "AIRLOCK_TOOL_DEF_INIT"));
        t.size = sizeof(t);
        assert_int_equal(airlock_config_add_tool(cfg, &t, &err), 0);
        airlock_config_free(cfg);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_defaults),    cmocka_unit_test(test_check_names_the_field),
            cmocka_unit_test(test_options),     cmocka_unit_test(test_template_json),
            cmocka_unit_test(test_fingerprint), cmocka_unit_test(test_growable_structs),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
