/* Host tools: registry rules, the tools file, validation messages, and
 * command and callback round trips, including tools that misbehave. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>

#include "host/tools.h"
#include "core/util.h"
#include "common/airlock_test.h"

static char data_dir[PATH_MAX + 64];   /* tests/data/tools */
static char tools_file[PATH_MAX + 64]; /* tests/data/tools/tools.json */

/* Finds tests/data/tools from the test binary's location (build/tests/...
 * or build/asan/tests/...) or the working directory. */
static int find_data(void **state)
{
        /* The tools say "python3": take Debian's, not a version manager's
         * shim that costs a third of a second a start. */
        setenv("PATH", "/usr/bin:/bin", 1);
        char exe[PATH_MAX - 64];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        assert_true(n > 0);
        exe[n] = '\0';
        for (char *slash = strrchr(exe, '/'); slash; slash = strrchr(exe, '/')) {
                *slash = '\0';
                snprintf(tools_file, sizeof(tools_file), "%s/tests/data/tools/tools.json", exe);
                if (access(tools_file, R_OK) == 0) {
                        snprintf(data_dir, sizeof(data_dir), "%s/tests/data/tools", exe);
                        return 0;
                }
        }
        snprintf(data_dir, sizeof(data_dir), "tests/data/tools");
        snprintf(tools_file, sizeof(tools_file), "tests/data/tools/tools.json");
        return access(tools_file, R_OK) == 0 ? 0 : -1;
}

static tool_registry *load_sample(void)
{
        tool_registry *reg;
        airlock_error err = {0};
        assert_int_equal(tools_new(&reg, NULL), 0);
        if (tools_load_file(reg, tools_file, 30, &err) < 0)
                fail_msg("loading %s: %s", tools_file, err.message);
        return reg;
}

static json_t *parse(const char *text)
{
        json_error_t jerr;
        json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        if (!v)
                fail_msg("bad test JSON %s: %s", text, jerr.text);
        return v;
}

/* Calls a tool and returns the failure kind; result or message as text. */
static tool_fail call(const tool_registry *reg, const char *name, const char *args, char **out)
{
        json_t *a = parse(args);
        json_t *res = NULL;
        char *msg = NULL;
        tool_fail f = tools_call(reg, name, a, &res, &msg);
        json_decref(a);
        if (f == TOOL_OK) {
                assert_null(msg);
                *out = json_dumps(res, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
                json_decref(res);
        } else {
                assert_null(res);
                assert_non_null(msg);
                *out = msg;
        }
        return f;
}

static void expect_fail(const tool_registry *reg, const char *name, const char *args,
                        tool_fail kind, const char *part)
{
        _cleanup_free_ char *out = NULL;
        tool_fail f = call(reg, name, args, &out);
        if (f != kind || !strstr(out, part))
                fail_msg("tool %s %s: got kind %d '%s', want kind %d with '%s'", name, args, f, out,
                         kind, part);
}

/* ---- command tools ------------------------------------------------------ */

static void test_compute(void **state)
{
        tool_registry *reg = load_sample();
        _cleanup_free_ char *out = NULL;
        assert_int_equal(call(reg, "compute", "{\"operation\":\"add\",\"a\":2,\"b\":3.5}", &out),
                         TOOL_OK);
        assert_string_equal(out, "{\"result\":5.5}");
        /* stderr is the message when the exit status is not zero. */
        expect_fail(reg, "compute", "{\"operation\":\"divide\",\"a\":1,\"b\":0}", TOOL_FAIL_RUNTIME,
                    "division by zero");
        const tool_info *t = tools_find(reg, "compute");
        assert_non_null(t);
        assert_true(t->timeout_s == 10);
        assert_int_equal(t->approval, AIRLOCK_APPROVAL_NEVER);
        assert_true(t->cwd_fd >= 0);
        /* The default timeout applies when the file gives none. */
        assert_true(tools_find(reg, "crash")->timeout_s == 30);
        assert_true(tools_any_requires_approval(reg));
        tools_free(reg);
}

static void test_roundtrip_values(void **state)
{
        tool_registry *reg = load_sample();
        /* Nested values, unicode, escapes and a NUL inside a string survive
         * the trip through a real process unchanged. */
        const char *args = "{\"s\":\"a\\u0000b\",\"u\":\"\\u00fc\\u20ac\\ud83d\\ude00\","
                           "\"q\":\"\\\"\\\\\\n\\t\",\"n\":{\"x\":[1,2.5,null,true,false,"
                           "{\"deep\":[[[]]]}],\"big\":9007199254740993,\"neg\":-0.125},"
                           "\"e\":{}}";
        json_t *in = parse(args);
        json_t *res = NULL;
        char *msg = NULL;
        tool_fail f = tools_call(reg, "echo", in, &res, &msg);
        if (f != TOOL_OK)
                fail_msg("echo failed: %s", msg);
        assert_true(json_equal(in, res));
        assert_int_equal(json_string_length(json_object_get(res, "s")), 3);
        json_decref(in);
        json_decref(res);
        tools_free(reg);
}

static void test_misbehaving_commands(void **state)
{
        tool_registry *reg = load_sample();
        expect_fail(reg, "crash", "{}", TOOL_FAIL_RUNTIME, "killed by signal 11");
        expect_fail(reg, "hang", "{}", TOOL_FAIL_RUNTIME, "timeout of 0.5 s");
        expect_fail(reg, "garbage", "{}", TOOL_FAIL_RUNTIME, "not one JSON value");
        expect_fail(reg, "two", "{}", TOOL_FAIL_RUNTIME, "not one JSON value");
        expect_fail(reg, "empty", "{}", TOOL_FAIL_RUNTIME, "printed nothing");
        expect_fail(reg, "huge", "{}", TOOL_FAIL_RUNTIME, "more than 16777216 bytes");
        expect_fail(reg, "fail", "{}", TOOL_FAIL_RUNTIME, "ValueError: the widget is broken");
        expect_fail(reg, "silentfail", "{}", TOOL_FAIL_RUNTIME,
                    "exit status 4 and no message on stderr");
        _cleanup_free_ char *a = NULL, *b = NULL, *c = NULL;
        assert_int_equal(call(reg, "noread", "{}", &a), TOOL_OK);
        assert_string_equal(a, "\"fine\"");
        /* A grandchild holding stdout open is killed with the tool's group. */
        assert_int_equal(call(reg, "daemon", "{}", &b), TOOL_OK);
        assert_string_equal(b, "{\"ok\":true}");
        /* So is one that left the group: the call ends when the tool does,
         * not at its 20 s timeout (whose message would say so). */
        _cleanup_free_ char *d = NULL;
        assert_int_equal(call(reg, "escape", "{}", &d), TOOL_OK);
        assert_string_equal(d, "{\"escaped\":true}");
        /* A flood on stderr is drained and dropped, not a deadlock. */
        assert_int_equal(call(reg, "stderrflood", "{}", &c), TOOL_OK);
        assert_string_equal(c, "[1]");
        tools_free(reg);
}

static void test_big_input_not_read(void **state)
{
        /* Nearly 1 MiB of arguments to a tool that never reads them: the
         * writer must not block on a full socket buffer. */
        tool_registry *reg = load_sample();
        size_t n = (1u << 20) - 64;
        char *s = malloc(n + 1);
        memset(s, 'x', n);
        s[n] = '\0';
        json_t *args = json_pack("{s:s}", "pad", s);
        free(s);
        tool_info t = *tools_find(reg, "noread");
        char *in = json_dumps(args, JSON_COMPACT);
        json_t *res = NULL;
        char *msg = NULL;
        tool_fail f = tools_run_command(&t, in, strlen(in), NULL, &res, &msg);
        if (f != TOOL_OK)
                fail_msg("noread: %s", msg);
        json_decref(res);
        free(in);
        /* The same through the echo tool, which does read: it comes back. */
        f = tools_call(reg, "echo", args, &res, &msg);
        if (f != TOOL_OK)
                fail_msg("echo: %s", msg);
        assert_true(json_equal(args, res));
        json_decref(res);
        json_decref(args);
        tools_free(reg);
}

/* The run's deadline and cancellation bound a call too. */
static void test_call_bounds(void **state)
{
        tool_registry *reg = load_sample();
        json_t *args = json_object();
        json_t *res = NULL;
        char *msg = NULL;
        /* The hang tool's own timeout is 0.5 s; a nearer run deadline wins. */
        tool_call_bounds b = {.deadline_ns = al_now_ns() + 200000000ull, .cancel_fd = -1};
        assert_int_equal(tools_call_ex(reg, "hang", args, &b, &res, &msg), TOOL_FAIL_RUNTIME);
        assert_non_null(strstr(msg, "the run's time limit was reached while it ran"));
        free(msg);
        b.deadline_ns = al_now_ns() - 1;
        assert_int_equal(tools_call_ex(reg, "hang", args, &b, &res, &msg), TOOL_FAIL_RUNTIME);
        assert_non_null(strstr(msg, "was not started"));
        free(msg);
        /* A cancel fd that is readable stops the call. */
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        assert_int_equal(write(p[1], "x", 1), 1);
        b = (tool_call_bounds){.deadline_ns = 0, .cancel_fd = p[0]};
        assert_int_equal(tools_call_ex(reg, "hang", args, &b, &res, &msg), TOOL_FAIL_RUNTIME);
        assert_non_null(strstr(msg, "the run was cancelled"));
        free(msg);
        close(p[0]);
        close(p[1]);
        /* A far deadline changes nothing. */
        b = (tool_call_bounds){.deadline_ns = al_now_ns() + 60000000000ull, .cancel_fd = -1};
        assert_int_equal(tools_call_ex(reg, "noread", args, &b, &res, &msg), TOOL_OK);
        json_decref(res);
        json_decref(args);
        tools_free(reg);
}

typedef struct thread_arg {
        const tool_registry *reg;
        int i;
        int ok;
} thread_arg;

static void *thread_call(void *p)
{
        thread_arg *a = p;
        json_t *args = json_pack("{s:s,s:i,s:i}", "operation", "multiply", "a", a->i, "b", 3);
        json_t *res = NULL;
        char *msg = NULL;
        if (tools_call(a->reg, "compute", args, &res, &msg) == TOOL_OK &&
            json_integer_value(json_object_get(res, "result")) == a->i * 3)
                a->ok = 1;
        free(msg);
        json_decref(res);
        json_decref(args);
        return NULL;
}

static void test_concurrent_calls(void **state)
{
        tool_registry *reg = load_sample();
        pthread_t th[6];
        thread_arg args[6];
        for (int i = 0; i < 6; i++) {
                args[i] = (thread_arg){.reg = reg, .i = i + 1};
                assert_int_equal(pthread_create(&th[i], NULL, thread_call, &args[i]), 0);
        }
        for (int i = 0; i < 6; i++) {
                pthread_join(th[i], NULL);
                assert_int_equal(args[i].ok, 1);
        }
        tools_free(reg);
}

static void test_no_fd_leak(void **state)
{
        tool_registry *reg = load_sample();
        int before = open("/dev/null", O_RDONLY | O_CLOEXEC);
        close(before);
        for (int i = 0; i < 3; i++) {
                _cleanup_free_ char *out = NULL;
                call(reg, i % 2 ? "garbage" : "noread", "{}", &out);
        }
        int after = open("/dev/null", O_RDONLY | O_CLOEXEC);
        close(after);
        assert_int_equal(before, after);
        tools_free(reg);
}

/* ---- validation --------------------------------------------------------- */

typedef struct validate_case {
        const char *args;
        const char *part; /* NULL: valid */
} validate_case;

static const char schema[] =
    "{\"type\":\"object\",\"properties\":{\"op\":{\"type\":\"string\",\"enum\":[\"add\","
    "\"sub\"]},\"a\":{\"type\":\"number\"},\"n\":{\"type\":\"integer\"},\"flag\":{\"type\":"
    "\"boolean\"},\"opt\":{\"type\":[\"string\",\"null\"]},\"list\":{\"type\":\"array\"},"
    "\"obj\":{\"type\":\"object\"},\"any\":{},\"tags\":{\"type\":\"array\",\"items\":{"
    "\"type\":\"string\"}},\"grid\":{\"type\":\"array\",\"items\":{\"type\":\"array\","
    "\"items\":{\"type\":\"integer\",\"enum\":[0,1]}}}},\"required\":[\"op\",\"a\"],"
    "\"additionalProperties\":false}";

/* No "additionalProperties": as in JSON Schema, other arguments are accepted
 * (a Python callable with **kwargs gets such a schema). */
static const char open_schema[] =
    "{\"type\":\"object\",\"properties\":{\"item\":{\"type\":\"string\"}},\"required\":[\"item\"]}";

static const validate_case validate_cases[] = {
    {"{\"op\":\"add\",\"a\":1}", NULL},
    {"{\"op\":\"add\",\"a\":1.5,\"n\":-3,\"flag\":false,\"opt\":null,\"list\":[],\"obj\":{},"
     "\"any\":[1]}",
     NULL},
    {"{\"op\":\"sub\",\"a\":1,\"opt\":\"x\"}", NULL},
    {"[]", "tool 'calc': the arguments must be an object of named arguments, got array"},
    {"\"x\"", "got string"},
    {"null", "got null"},
    {"{\"a\":1}", "tool 'calc': missing required argument 'op' (a string)"},
    {"{\"op\":\"add\"}", "tool 'calc': missing required argument 'a' (a number)"},
    {"{\"op\":\"add\",\"a\":\"1\"}", "tool 'calc': argument 'a' must be a number, got string"},
    {"{\"op\":\"add\",\"a\":1,\"n\":1.5}",
     "tool 'calc': argument 'n' must be an integer, got number"},
    {"{\"op\":\"add\",\"a\":1,\"n\":true}", "argument 'n' must be an integer, got boolean"},
    {"{\"op\":\"add\",\"a\":1,\"flag\":0}", "argument 'flag' must be a boolean, got integer"},
    {"{\"op\":\"add\",\"a\":1,\"opt\":3}", "argument 'opt' must be a string or null, got integer"},
    {"{\"op\":\"add\",\"a\":1,\"list\":{}}", "argument 'list' must be an array, got object"},
    {"{\"op\":\"add\",\"a\":1,\"obj\":[]}", "argument 'obj' must be an object, got array"},
    {"{\"op\":\"add\",\"a\":null}", "argument 'a' must be a number, got null"},
    {"{\"op\":1,\"a\":1}", "argument 'op' must be a string, got integer"},
    {"{\"op\":\"mul\",\"a\":1}", "argument 'op' must be one of [\"add\",\"sub\"]"},
    {"{\"op\":\"add\",\"a\":1,\"b\":2}",
     "tool 'calc': unknown argument 'b' (expected: op, a, n, flag, opt, list, obj, any, tags, "
     "grid)"},
    {"{\"op\":\"add\",\"a\":1,\"tags\":[\"x\",\"y\"],\"grid\":[[0,1],[]]}", NULL},
    {"{\"op\":\"add\",\"a\":1,\"tags\":[\"x\",1]}",
     "tool 'calc': argument 'tags' item 1 must be a string, got integer"},
    {"{\"op\":\"add\",\"a\":1,\"grid\":[[0],[1,2]]}",
     "tool 'calc': argument 'grid' item 1 item 1 must be one of [0,1]"},
};

static int dummy_fn(void *userdata, const char *args, char **ret, char **ret_err)
{
        *ret = strdup(args);
        return 0;
}

static void test_validation(void **state)
{
        tool_registry *reg;
        assert_int_equal(tools_new(&reg, NULL), 0);
        airlock_tool_def def = {.size = sizeof(airlock_tool_def),
                                .name = "calc",
                                .parameters_json = schema,
                                .fn = dummy_fn};
        airlock_error err = {0};
        if (tools_add_callback(reg, &def, &err) < 0)
                fail_msg("add: %s", err.message);
        const tool_info *t = tools_find(reg, "calc");
        for (size_t i = 0; i < ARRAY_SIZE(validate_cases); i++) {
                const validate_case *c = &validate_cases[i];
                json_t *a = parse(c->args);
                airlock_error e = {0};
                int r = tools_validate(t, a, &e);
                json_decref(a);
                if (!c->part && r < 0)
                        fail_msg("%s: refused: %s", c->args, e.message);
                if (c->part && (r != -EINVAL || !strstr(e.message, c->part)))
                        fail_msg("%s: got %d '%s', want '%s'", c->args, r, e.message, c->part);
                /* The same through a call: an invalid call is TOOL_FAIL_INVALID. */
                if (c->part)
                        expect_fail(reg, "calc", c->args, TOOL_FAIL_INVALID, c->part);
        }
        /* Without "additionalProperties", other arguments pass. */
        airlock_tool_def open = {.name = "tag", .parameters_json = open_schema, .fn = dummy_fn};
        if (tools_add_callback(reg, &open, &err) < 0)
                fail_msg("add: %s", err.message);
        json_t *extra = parse("{\"item\":\"x\",\"color\":\"red\"}");
        airlock_error oe = {0};
        if (tools_validate(tools_find(reg, "tag"), extra, &oe) < 0)
                fail_msg("open schema refused: %s", oe.message);
        json_decref(extra);
        t = tools_find(reg, "calc"); /* adding may have moved it */
        expect_fail(reg, "tag", "{\"item\":1}", TOOL_FAIL_INVALID,
                    "argument 'item' must be a string");
        /* jansson's parser refuses NUL in keys, but an object built in code
         * may have one: "a\0x" must not pass as "a". */
        json_t *nul = json_pack("{s:s,s:i}", "op", "add", "a", 1);
        json_object_setn_new(nul, "a\0x", 3, json_string("not a number"));
        airlock_error ne = {0};
        assert_int_equal(tools_validate(t, nul, &ne), -EINVAL);
        assert_non_null(strstr(ne.message, "an argument name contains a NUL"));
        json_decref(nul);
        /* Unknown tools name the tools there are. */
        expect_fail(reg, "nope", "{}", TOOL_FAIL_INVALID,
                    "unknown tool 'nope' (available: calc, tag)");
        /* The payload cap. */
        size_t n = TOOLS_MAX_PAYLOAD;
        char *s = malloc(n + 1);
        memset(s, 'y', n);
        s[n] = '\0';
        json_t *big = json_pack("{s:s,s:i,s:s}", "op", "add", "a", 1, "any", s);
        free(s);
        airlock_error e = {0};
        assert_int_equal(tools_validate(t, big, &e), -E2BIG);
        assert_non_null(strstr(e.message, "more than the limit of 1048576"));
        json_decref(big);
        tools_free(reg);
}

/* ---- callback tools ----------------------------------------------------- */

static int cb_tool(void *userdata, const char *args, char **ret, char **ret_err)
{
        const char *mode = userdata;
        if (strcmp(mode, "echo") == 0) {
                *ret = strdup(args);
        } else if (strcmp(mode, "fail") == 0) {
                *ret_err = strdup("the database is down");
                return -1;
        } else if (strcmp(mode, "failnomsg") == 0) {
                return -5;
        } else if (strcmp(mode, "garbage") == 0) {
                *ret = strdup("{not json");
        } else if (strcmp(mode, "scalar") == 0) {
                *ret = strdup("42");
        }
        return 0;
}

static void test_callbacks(void **state)
{
        tool_registry *reg;
        assert_int_equal(tools_new(&reg, NULL), 0);
        const char *modes[] = {"echo", "fail", "failnomsg", "garbage", "scalar", "none"};
        for (size_t i = 0; i < ARRAY_SIZE(modes); i++) {
                airlock_tool_def def = {.size = sizeof(airlock_tool_def),
                                        .name = modes[i],
                                        .description = "test",
                                        .parameters_json = "{\"additionalProperties\":true}",
                                        .fn = cb_tool,
                                        .userdata = (void *)modes[i]};
                assert_int_equal(tools_add_callback(reg, &def, NULL), 0);
        }
        json_t *in = parse("{\"s\":\"x\\u0000y\\u00e9\",\"l\":[{\"a\":null}]}");
        json_t *res = NULL;
        char *msg = NULL;
        assert_int_equal(tools_call(reg, "echo", in, &res, &msg), TOOL_OK);
        assert_true(json_equal(in, res));
        json_decref(res);
        json_decref(in);
        expect_fail(reg, "fail", "{}", TOOL_FAIL_RUNTIME, "the database is down");
        expect_fail(reg, "failnomsg", "{}", TOOL_FAIL_RUNTIME, "without a message");
        expect_fail(reg, "garbage", "{}", TOOL_FAIL_RUNTIME, "not one JSON value");
        expect_fail(reg, "none", "{}", TOOL_FAIL_RUNTIME, "returned no result");
        _cleanup_free_ char *out = NULL;
        assert_int_equal(call(reg, "scalar", "{}", &out), TOOL_OK);
        assert_string_equal(out, "42");
        tools_free(reg);
}

/* A typed tool: fails naming a type, or a name that is no identifier. */
static int typed_tool(void *userdata, const char *args, char **ret, char **ret_err, char **ret_type)
{
        const char *mode = userdata;
        if (strcmp(mode, "ok") == 0) {
                *ret = strdup("true");
                *ret_type = strdup("Ignored"); /* set on success: dropped */
                return 0;
        }
        *ret_err = strdup("ValueError: bad value");
        *ret_type = strdup(strcmp(mode, "typed") == 0 ? "ValueError" : "no good\nname");
        return -1;
}

static void test_typed_callbacks(void **state)
{
        tool_registry *reg;
        assert_int_equal(tools_new(&reg, NULL), 0);
        const char *modes[] = {"ok", "typed", "badname"};
        for (size_t i = 0; i < ARRAY_SIZE(modes); i++) {
                airlock_tool_def def = {.size = sizeof(airlock_tool_def),
                                        .name = modes[i],
                                        .userdata = (void *)modes[i]};
                assert_int_equal(tools_add_typed_callback(reg, &def, typed_tool, NULL), 0);
        }
        airlock_tool_def none = {.size = sizeof(airlock_tool_def), .name = "none"};
        assert_int_equal(tools_add_typed_callback(reg, &none, NULL, NULL), -EINVAL);
        json_t *in = parse("{}");
        json_t *res = NULL;
        char *msg = NULL, *type = NULL;
        assert_int_equal(tools_call_typed(reg, "ok", in, NULL, &res, &msg, &type), TOOL_OK);
        assert_null(type);
        json_decref(res);
        res = NULL;
        assert_int_equal(tools_call_typed(reg, "typed", in, NULL, &res, &msg, &type),
                         TOOL_FAIL_RUNTIME);
        assert_string_equal(msg, "ValueError: bad value");
        assert_string_equal(type, "ValueError");
        free(msg);
        free(type);
        msg = type = NULL;
        assert_int_equal(tools_call_typed(reg, "badname", in, NULL, &res, &msg, &type),
                         TOOL_FAIL_RUNTIME);
        assert_null(type);
        free(msg);
        msg = NULL;
        /* Without the out parameter, as tools_call_ex: the name is freed. */
        assert_int_equal(tools_call_ex(reg, "typed", in, NULL, &res, &msg), TOOL_FAIL_RUNTIME);
        free(msg);
        /* The fingerprint tells a typed tool apart by its function too. */
        _cleanup_free_ char *fp = tools_fingerprint_text(reg);
        assert_non_null(fp);
        assert_null(strstr(fp, "\"fn\":\"(nil)\""));
        json_decref(in);
        tools_free(reg);
}

/* ---- registry rules ----------------------------------------------------- */

static void test_registry_rules(void **state)
{
        tool_registry *reg;
        assert_int_equal(tools_new(&reg, NULL), 0);
        airlock_tool_def def = {.size = sizeof(airlock_tool_def), .name = "a", .fn = dummy_fn};
        assert_int_equal(tools_add_callback(reg, &def, NULL), 0);
        def.name = "b";
        assert_int_equal(tools_add_callback(reg, &def, NULL), 0);
        /* The same name replaces the tool and moves it last. */
        def.name = "a";
        def.description = "second";
        def.approval = AIRLOCK_APPROVAL_ALWAYS;
        assert_int_equal(tools_add_callback(reg, &def, NULL), 0);
        assert_int_equal(tools_count(reg), 2);
        assert_string_equal(tools_get(reg, 0)->name, "b");
        assert_string_equal(tools_get(reg, 1)->name, "a");
        assert_string_equal(tools_get(reg, 1)->description, "second");
        assert_true(tools_any_requires_approval(reg));
        /* Parameters default to an object schema. */
        assert_true(json_is_object(tools_get(reg, 1)->parameters));

        airlock_error err = {0};
        def.name = "execute_code";
        assert_int_equal(tools_add_callback(reg, &def, &err), -EINVAL);
        assert_non_null(strstr(err.message, "reserved"));
        const char *bad_names[] = {
            "", "has space", "semi;colon", "ünï",
            "x2345678901234567890123456789012345678901234567890123456789012345"};
        for (size_t i = 0; i < ARRAY_SIZE(bad_names); i++) {
                def.name = bad_names[i];
                assert_int_equal(tools_add_callback(reg, &def, &err), -EINVAL);
        }
        def.name = "ok.name-1_2";
        def.fn = NULL;
        assert_int_equal(tools_add_callback(reg, &def, &err), -EINVAL);
        def.fn = dummy_fn;
        const char *bad_schemas[][2] = {
            {"[1]", "must be a JSON object"},
            {"{", "not valid JSON"},
            {"{\"type\":\"array\"}", "must be \"object\""},
            {"{\"properties\":[]}", "\"properties\" must be an object"},
            {"{\"properties\":{\"x\":{\"type\":\"float\"}}}", "argument 'x' has an unknown"},
            {"{\"properties\":{\"x\":3}}", "schema of argument 'x'"},
            {"{\"required\":[\"y\"],\"additionalProperties\":false}",
             "required argument 'y' is not in"},
            {"{\"properties\":{\"x\":{\"type\":\"array\",\"items\":{\"type\":\"str\"}}}}",
             "the items of argument 'x' have an unknown"},
            {"{\"required\":\"y\"}", "must be an array of names"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad_schemas); i++) {
                def.parameters_json = bad_schemas[i][0];
                int r = tools_add_callback(reg, &def, &err);
                if (r != -EINVAL || !strstr(err.message, bad_schemas[i][1]))
                        fail_msg("schema %s: got %d '%s'", bad_schemas[i][0], r, err.message);
        }
        assert_int_equal(tools_count(reg), 2);

        assert_int_equal(tools_remove(reg, "zzz", &err), -ENOENT);
        assert_non_null(strstr(err.message, "'zzz'"));
        assert_int_equal(tools_remove(reg, "b", NULL), 0);
        assert_int_equal(tools_count(reg), 1);
        assert_false(tools_find(reg, "b"));

        /* The count cap; replacing does not count. */
        char name[32];
        def.parameters_json = NULL;
        for (int i = 0; i < TOOLS_MAX_TOOLS - 1; i++) {
                snprintf(name, sizeof(name), "t%d", i);
                def.name = name;
                assert_int_equal(tools_add_callback(reg, &def, NULL), 0);
        }
        def.name = "one_too_many";
        assert_int_equal(tools_add_callback(reg, &def, &err), -E2BIG);
        def.name = "t5";
        assert_int_equal(tools_add_callback(reg, &def, NULL), 0);
        tools_free(reg);
}

static void test_clone_and_fingerprint(void **state)
{
        tool_registry *reg = load_sample(), *copy;
        int x = 1, y = 2;
        airlock_tool_def def = {
            .size = sizeof(airlock_tool_def), .name = "cb", .fn = dummy_fn, .userdata = &x};
        assert_int_equal(tools_add_callback(reg, &def, NULL), 0);
        assert_int_equal(tools_clone(reg, &copy, NULL), 0);
        _cleanup_free_ char *f1 = tools_fingerprint_text(reg);
        _cleanup_free_ char *f2 = tools_fingerprint_text(copy);
        assert_non_null(f1);
        assert_string_equal(f1, f2);
        assert_non_null(strstr(f1, "\"command\":[\"python3\",\"compute.py\"]"));
        tools_free(reg);
        /* The copy works on its own (its own folder descriptor). */
        _cleanup_free_ char *out = NULL;
        assert_int_equal(
            call(copy, "compute", "{\"operation\":\"subtract\",\"a\":2,\"b\":3}", &out), TOOL_OK);
        assert_string_equal(out, "{\"result\":-1}");
        /* Other userdata is another tool. */
        def.userdata = &y;
        assert_int_equal(tools_add_callback(copy, &def, NULL), 0);
        _cleanup_free_ char *f3 = tools_fingerprint_text(copy);
        assert_string_not_equal(f2, f3);
        tools_free(copy);
}

/* ---- the tools file ----------------------------------------------------- */

typedef struct file_case {
        const char *text;
        int code;
        const char *part;
} file_case;

static const file_case file_cases[] = {
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"./echo.sh\"]}]}", 0, NULL},
    {"{\"tools\":[]}", 0, NULL},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"sh\",\"-c\",\"cat\"],\"timeout\":1.5,"
     "\"approval_mode\":\"always_require\",\"description\":\"d\",\"parameters\":{}}]}",
     0, NULL},
    {"{\"tools\": [", -EINVAL, "not valid JSON"},
    {"", -EINVAL, "not valid JSON"},
    {"[]", -EINVAL, "one key, \"tools\""},
    {"{\"tools\":{}}", -EINVAL, "one key, \"tools\""},
    {"{\"tools\":[],\"extra\":1}", -EINVAL, "one key"},
    {"{\"tools\":[],\"tools\":[]}", -EINVAL, "not valid JSON"},
    {"{\"tools\":[3]}", -EINVAL, "tool #1 is not an object"},
    {"{\"tools\":[{\"command\":[\"sh\"]}]}", -EINVAL, "tool #1 has no \"name\""},
    {"{\"tools\":[{\"name\":\"a b\",\"command\":[\"sh\"]}]}", -EINVAL, "tool #1: tool name"},
    {"{\"tools\":[{\"name\":\"execute_code\",\"command\":[\"sh\"]}]}", -EINVAL, "reserved"},
    {"{\"tools\":[{\"name\":\"t\"}]}", -EINVAL, "tool 't': \"command\" must be a non-empty"},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[]}]}", -EINVAL, "tool 't': \"command\""},
    {"{\"tools\":[{\"name\":\"t\",\"command\":\"sh\"}]}", -EINVAL, "\"command\" must be"},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"sh\",1]}]}", -EINVAL, "element 1"},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"sh\",\"\"]}]}", -EINVAL, "element 1"},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"sh\",\"a\\u0000b\"]}]}", -EINVAL,
     "not valid JSON: \\u0000 is not allowed"},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"./missing.sh\"]}]}", -ENOENT,
     "command './missing.sh' is not an executable file relative to"},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"no-such-command-xyz\"]}]}", -ENOENT,
     "is not an executable file on PATH"},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"sh\"],\"timeout\":0}]}", -EINVAL,
     "tool 't': \"timeout\""},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"sh\"],\"timeout\":\"5\"}]}", -EINVAL,
     "\"timeout\""},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"sh\"],\"approval_mode\":\"sometimes\"}]}", -EINVAL,
     "tool 't': \"approval_mode\""},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"sh\"],\"description\":5}]}", -EINVAL,
     "\"description\" must be a string"},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"sh\"],\"parameters\":[]}]}", -EINVAL,
     "tool 't': \"parameters\" must be a JSON object"},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"sh\"],\"parameters\":{\"properties\":{"
     "\"x\":{\"type\":\"str\"}}}}]}",
     -EINVAL, "tool 't': argument 'x' has an unknown \"type\""},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"sh\"],\"timout\":5}]}", -EINVAL,
     "unknown field \"timout\""},
    {"{\"tools\":[{\"name\":\"t\",\"command\":[\"sh\"]},{\"name\":\"t\",\"command\":[\"sh\"]}]}",
     -EINVAL, "tool 't' is declared twice"},
};

static void test_tools_file_errors(void **state)
{
        char dir[] = "/tmp/airlock-tools-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char file[PATH_MAX], script[PATH_MAX];
        snprintf(file, sizeof(file), "%s/tools.json", dir);
        snprintf(script, sizeof(script), "%s/echo.sh", dir);
        FILE *f = fopen(script, "w");
        fputs("#!/bin/sh\nexec cat\n", f);
        fclose(f);
        chmod(script, 0755);
        for (size_t i = 0; i < ARRAY_SIZE(file_cases); i++) {
                const file_case *c = &file_cases[i];
                f = fopen(file, "w");
                fputs(c->text, f);
                fclose(f);
                tool_registry *reg;
                assert_int_equal(tools_new(&reg, NULL), 0);
                /* An existing tool survives a file that fails (all or nothing). */
                airlock_tool_def def = {
                    .size = sizeof(airlock_tool_def), .name = "keep", .fn = dummy_fn};
                assert_int_equal(tools_add_callback(reg, &def, NULL), 0);
                airlock_error err = {0};
                int r = tools_load_file(reg, file, 7, &err);
                if (r != c->code)
                        fail_msg("file %s: got %d (%s), want %d", c->text, r, err.message, c->code);
                if (r < 0) {
                        if (!strstr(err.message, c->part) || !strstr(err.message, file))
                                fail_msg("file %s: message '%s' lacks '%s' or the file name",
                                         c->text, err.message, c->part);
                        assert_string_equal(err.path, file);
                        assert_int_equal(tools_count(reg), 1);
                }
                tools_free(reg);
        }
        /* The relative command runs in the file's folder, whatever the
         * working directory of the caller. */
        f = fopen(file, "w");
        fputs("{\"tools\":[{\"name\":\"t\",\"command\":[\"./echo.sh\"]}]}", f);
        fclose(f);
        tool_registry *reg;
        assert_int_equal(tools_new(&reg, NULL), 0);
        assert_int_equal(tools_load_file(reg, file, 7, NULL), 0);
        assert_true(tools_find(reg, "t")->timeout_s == 7);
        _cleanup_free_ char *out = NULL;
        char cwd[PATH_MAX];
        assert_non_null(getcwd(cwd, sizeof(cwd)));
        assert_int_equal(chdir("/"), 0);
        assert_int_equal(call(reg, "t", "{}", &out), TOOL_OK);
        assert_int_equal(chdir(cwd), 0);
        assert_string_equal(out, "{}");
        tools_free(reg);

        /* Not a regular file, too big, missing. */
        assert_int_equal(tools_new(&reg, NULL), 0);
        airlock_error err = {0};
        assert_int_equal(tools_load_file(reg, dir, 7, &err), -EINVAL);
        assert_non_null(strstr(err.message, "not a regular file"));
        f = fopen(file, "w");
        for (int i = 0; i < 70000; i++)
                fputs("                ", f);
        fclose(f);
        assert_int_equal(tools_load_file(reg, file, 7, &err), -EFBIG);
        assert_non_null(strstr(err.message, "larger than 1048576"));
        unlink(file);
        assert_int_equal(tools_load_file(reg, file, 7, &err), -ENOENT);
        assert_non_null(strstr(err.message, file));
        tools_free(reg);
        unlink(script);
        rmdir(dir);
}

/* Tools files add up; a name that two files declare is an error naming it
 * and both files, and leaves the registry as it was; the same file loaded
 * again replaces its own tools. */
static void test_tools_files_merge(void **state)
{
        (void)state;
        char dir[] = "/tmp/airlock-tools-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char a[PATH_MAX], b[PATH_MAX], c[PATH_MAX];
        snprintf(a, sizeof(a), "%s/a.json", dir);
        snprintf(b, sizeof(b), "%s/b.json", dir);
        snprintf(c, sizeof(c), "%s/c.json", dir);
        write_text(a, "{\"tools\":[{\"name\":\"one\",\"command\":[\"true\"]}]}");
        write_text(b, "{\"tools\":[{\"name\":\"two\",\"command\":[\"true\"]}]}");
        write_text(c, "{\"tools\":[{\"name\":\"three\",\"command\":[\"true\"]},"
                      "{\"name\":\"one\",\"command\":[\"false\"]}]}");
        tool_registry *reg;
        assert_int_equal(tools_new(&reg, NULL), 0);
        assert_int_equal(tools_load_file(reg, a, 7, NULL), 0);
        assert_int_equal(tools_load_file(reg, b, 7, NULL), 0);
        assert_int_equal(tools_count(reg), 2);
        assert_non_null(tools_find(reg, "one"));
        assert_non_null(tools_find(reg, "two"));
        airlock_error err = {0};
        assert_int_equal(tools_load_file(reg, c, 7, &err), -EEXIST);
        assert_non_null(strstr(err.message, "'one'"));
        assert_non_null(strstr(err.message, "/a.json"));
        assert_non_null(strstr(err.message, "/c.json"));
        assert_int_equal(tools_count(reg), 2);
        assert_null(tools_find(reg, "three"));
        assert_int_equal(tools_load_file(reg, a, 7, NULL), 0);
        assert_int_equal(tools_count(reg), 2);
        tools_free(reg);
        unlink(a);
        unlink(b);
        unlink(c);
        rmdir(dir);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_compute),
            cmocka_unit_test(test_tools_files_merge),
            cmocka_unit_test(test_roundtrip_values),
            cmocka_unit_test(test_misbehaving_commands),
            cmocka_unit_test(test_big_input_not_read),
            cmocka_unit_test(test_call_bounds),
            cmocka_unit_test(test_concurrent_calls),
            cmocka_unit_test(test_no_fd_leak),
            cmocka_unit_test(test_validation),
            cmocka_unit_test(test_callbacks),
            cmocka_unit_test(test_typed_callbacks),
            cmocka_unit_test(test_registry_rules),
            cmocka_unit_test(test_clone_and_fingerprint),
            cmocka_unit_test(test_tools_file_errors),
        };
        return cmocka_run_group_tests(tests, find_data, NULL);
}
