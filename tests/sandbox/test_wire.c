/* The guest channel's protocol seen from both sides, against a real
 * sandbox: the guest runtime's constants (generated at build time from
 * core/wire_table.h) say what the host's tables say, every kind the host
 * may send is a built-in exception the guest raises, and a MemoryError of
 * the host's (ENOMEM in WIRE_ERRORS) is an ordinary failed call in the
 * guest, not the run exceeding its memory limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "airlock.h"
#include "core/util.h"
#include "core/wire.h"
#include "host/gateway.h"

static airlock_sandbox *sb;

/* Every name resolves, and always for want of memory. */
static int resolve_no_memory(const char *host, struct sockaddr_storage *addrs, size_t max)
{
        (void)host, (void)addrs, (void)max;
        return -ENOMEM;
}

static int setup(void **state)
{
        airlock_error err;
        airlock_config *cfg;
        if (airlock_config_new(&cfg, &err) < 0)
                return -1;
        int r = airlock_config_allow(cfg, "http://example.test", NULL, &err);
        if (r >= 0)
                r = airlock_sandbox_new(cfg, &sb, &err);
        if (r < 0)
                print_error("sandbox: %s\n", err.message);
        airlock_config_free(cfg);
        gateway_set_resolver(resolve_no_memory);
        return r < 0 ? -1 : 0;
}

static int teardown(void **state)
{
        gateway_set_resolver(NULL);
        airlock_sandbox_close(sb);
        return 0;
}

static airlock_result *run(const char *code)
{
        airlock_error err;
        airlock_result *res = NULL;
        int r = airlock_sandbox_run(sb, code, strlen(code), NULL, &res, &err);
        if (r < 0)
                print_error("run: %s\n", err.message);
        assert_int_equal(r, 0);
        return res;
}

/* Runs the code built in code, expects it to succeed and print exactly
 * want, and frees both. */
static void expect_output(dynbuf *code, dynbuf *want)
{
        airlock_result *res = run(code->data);
        if (!res->success)
                print_error("%s\n", res->stderr_data);
        assert_true(res->success);
        assert_string_equal(res->stdout_data, want->data);
        airlock_result_free(res);
        dynbuf_free(code);
        dynbuf_free(want);
}

/* Appends a line of Python to b that prints what the runtime holds under
 * name, for the host's value to be compared with. */
static void ask(dynbuf *b, dynbuf *want, const char *name, const char *value)
{
        assert_int_equal(dynbuf_appendf(b, "print(rt.%s)\n", name), 0);
        assert_int_equal(dynbuf_appendf(want, "%s\n", value), 0);
}

/* The runtime's constants are the host's: each op, reply key, status and
 * guest name, and the set of kinds. */
static void test_runtime_follows_the_host_tables(void **state)
{
        dynbuf code, want;
        dynbuf_init(&code, 1 << 16);
        dynbuf_init(&want, 1 << 16);
        assert_int_equal(
            dynbuf_appendf(&code, "import sys\nrt = sys.modules['_airlock_runtime']\n"), 0);
#define ASK_OP(id)     ask(&code, &want, "_OP_" #id, WIRE_OP_##id);
#define ASK_KEY(id)    ask(&code, &want, "_KEY_" #id, WIRE_KEY_##id);
#define ASK_STATUS(id) ask(&code, &want, "_STATUS_" #id, WIRE_STATUS_##id);
#define ASK_GUEST(id)  ask(&code, &want, "_" #id, id);
        WIRE_OPS(ASK_OP)
        WIRE_KEYS(ASK_KEY)
        WIRE_STATUSES(ASK_STATUS)
        WIRE_GUEST(ASK_GUEST)
        /* The kinds as one sorted line: the guest has exactly these. */
        assert_int_equal(dynbuf_appendf(&code, "print(' '.join(sorted(rt._KINDS)))\n"), 0);
        static const char *const kinds[] = {
#define KIND_NAME(id) WIRE_KIND_##id,
            WIRE_KINDS(KIND_NAME)};
        const char *sorted[ARRAY_SIZE(kinds)];
        memcpy(sorted, kinds, sizeof(kinds));
        for (size_t i = 1; i < ARRAY_SIZE(sorted); i++)
                for (size_t k = i; k > 0 && strcmp(sorted[k - 1], sorted[k]) > 0; k--) {
                        const char *t = sorted[k];
                        sorted[k] = sorted[k - 1];
                        sorted[k - 1] = t;
                }
        for (size_t i = 0; i < ARRAY_SIZE(sorted); i++)
                assert_int_equal(dynbuf_appendf(&want, "%s%s", i ? " " : "", sorted[i]), 0);
        assert_int_equal(dynbuf_append(&want, "\n", 1), 0);

        expect_output(&code, &want);
}

/* Both sides dispatch the guest's requests from the rows of WIRE_REQUESTS:
 * the guest sends exactly their ops (and refuses to send another), and the
 * host answers an op of WIRE_OPS outside them as an unknown request. */
static void test_guest_requests_are_the_hosts_rows(void **state)
{
        dynbuf code, want;
        dynbuf_init(&code, 1 << 16);
        dynbuf_init(&want, 1 << 16);
        assert_int_equal(dynbuf_appendf(&code,
                                        "import sys\nrt = sys.modules['_airlock_runtime']\n"
                                        "print(' '.join(sorted(rt._REQUESTS)))\n"
                                        "try:\n    rt._ask('nope', {})\n"
                                        "except RuntimeError as e:\n    print(e)\n"
                                        "print(rt._exchange({'op': '%s'}))\n",
                                        WIRE_OP_RUN),
                         0);
        static const char *const ops[] = {
#define REQUEST_OP(id, handler, slow) WIRE_OP_##id,
            WIRE_REQUESTS(REQUEST_OP)};
        const char *sorted[ARRAY_SIZE(ops)];
        memcpy(sorted, ops, sizeof(ops));
        for (size_t i = 1; i < ARRAY_SIZE(sorted); i++)
                for (size_t k = i; k > 0 && strcmp(sorted[k - 1], sorted[k]) > 0; k--) {
                        const char *t = sorted[k];
                        sorted[k] = sorted[k - 1];
                        sorted[k - 1] = t;
                }
        for (size_t i = 0; i < ARRAY_SIZE(sorted); i++)
                assert_int_equal(dynbuf_appendf(&want, "%s%s", i ? " " : "", sorted[i]), 0);
        assert_int_equal(
            dynbuf_appendf(&want,
                           "\nairlock: 'nope' is not a request the host serves\n"
                           "{'%s': False, '%s': '%s', '%s': 'unknown request to the host'}\n",
                           WIRE_KEY_OK, WIRE_KEY_KIND, WIRE_KIND_VALUE, WIRE_KEY_ERROR),
            0);
        expect_output(&code, &want);
}

/* Each kind the host may send is a built-in exception of the guest's
 * Python, and the guest raises exactly it; a name outside the table is a
 * RuntimeError. */
static void test_every_kind_is_a_guest_exception(void **state)
{
        dynbuf code, want;
        dynbuf_init(&code, 1 << 16);
        dynbuf_init(&want, 1 << 16);
        assert_int_equal(dynbuf_appendf(&code, "import builtins, sys\n"
                                               "rt = sys.modules['_airlock_runtime']\n"
                                               "def check(k):\n"
                                               "    e = rt._refusal({'ok': False, 'kind': k})\n"
                                               "    b = getattr(builtins, k, None)\n"
                                               "    print(type(e).__name__, type(e) is b)\n"),
                         0);
#define ASK_KIND(id)                                                                               \
        assert_int_equal(dynbuf_appendf(&code, "check('%s')\n", WIRE_KIND_##id), 0);               \
        assert_int_equal(dynbuf_appendf(&want, "%s True\n", WIRE_KIND_##id), 0);
        WIRE_KINDS(ASK_KIND)
        assert_int_equal(dynbuf_appendf(&code, "check('print')\n"), 0);
        assert_int_equal(dynbuf_appendf(&want, "RuntimeError False\n"), 0);
        expect_output(&code, &want);
}

/* ENOMEM of the host is MemoryError in the guest (WIRE_ERRORS), which the
 * code may catch; left uncaught, the run fails as with any exception, with
 * the host's message, and is not reported as exceeding its own memory
 * limit. */
static void test_host_out_of_memory_is_not_the_runs(void **state)
{
        airlock_result *res = run("try:\n"
                                  "    http_get('http://example.test/x')\n"
                                  "except MemoryError as e:\n"
                                  "    print(type(e).__name__)\n");
        assert_true(res->success);
        assert_string_equal(res->stdout_data, "MemoryError\n");
        airlock_result_free(res);

        res = run("http_get('http://example.test/x')\n");
        assert_false(res->success);
        assert_int_equal(res->status, AIRLOCK_STATUS_ERROR);
        assert_non_null(strstr(res->stderr_data, "MemoryError: GET http://example.test/x"));
        assert_null(strstr(res->stderr_data, "exceeded its memory limit"));
        airlock_result_free(res);

        /* The run's own MemoryError is still the run's memory. */
        res = run("raise MemoryError('mine')\n");
        assert_int_equal(res->status, AIRLOCK_STATUS_MEMORY);
        airlock_result_free(res);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_runtime_follows_the_host_tables),
            cmocka_unit_test(test_guest_requests_are_the_hosts_rows),
            cmocka_unit_test(test_every_kind_is_a_guest_exception),
            cmocka_unit_test(test_host_out_of_memory_is_not_the_runs),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
