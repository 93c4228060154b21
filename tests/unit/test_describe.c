/* The execute_code description and agent instructions follow the live
 * configuration: tools with their arguments, files, network and limits. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "config/config.h"
#include "core/util.h"
#include "common/airlock_test.h"

static int cb_tool(void *ud, const char *args, char **ret, char **ret_err)
{
        *ret = strdup("0");
        return 0;
}

static void add_tool(airlock_config *cfg, const char *name, const char *desc, const char *params,
                     airlock_approval ap)
{
        airlock_error err = {0};
        airlock_tool_def def = {.size = sizeof(airlock_tool_def),
                                .name = name,
                                .description = desc,
                                .parameters_json = params,
                                .approval = ap,
                                .fn = cb_tool};
        int r = airlock_config_add_tool(cfg, &def, &err);
        if (r < 0)
                fail_msg("add_tool %s: %s", name, err.message);
}

static void describe(const airlock_config *cfg, char **desc, char **instr)
{
        airlock_error err = {0};
        int r = airlock_describe(cfg, desc, instr, &err);
        if (r < 0)
                fail_msg("airlock_describe: %s", err.message);
}

#define assert_contains(hay, needle)                                                               \
        do {                                                                                       \
                if (!strstr((hay), (needle)))                                                      \
                        fail_msg("'%s' not found in:\n%s", (needle), (hay));                       \
        } while (0)
#define assert_not_contains(hay, needle)                                                           \
        do {                                                                                       \
                if (strstr((hay), (needle)))                                                       \
                        fail_msg("'%s' unexpectedly found in:\n%s", (needle), (hay));              \
        } while (0)

static void test_bare_config(void **state)
{
        airlock_config *cfg = new_config();
        char *d = NULL, *i = NULL;
        describe(cfg, &d, &i);
        assert_contains(d, "print()");
        assert_contains(d, "Host tools: none");
        assert_contains(d, "There is no /input");
        assert_contains(d, "/output");
        assert_contains(d, "Network: none");
        assert_contains(d, "PermissionError");
        assert_contains(d, "30 s wall clock");
        assert_contains(d, "512 MiB of memory");
        assert_contains(i, "one execute_code call");
        assert_contains(i, "last expression");
        assert_contains(i, "/output");
        assert_contains(i, "no network access");
        assert_not_contains(i, "call_tool");
        assert_not_contains(i, "approval");
        free(d);
        free(i);
        airlock_config_free(cfg);
}

static void test_tools_listed_with_arguments(void **state)
{
        airlock_config *cfg = new_config();
        add_tool(cfg, "compute", "Add, subtract, multiply or divide.",
                 "{\"type\":\"object\",\"properties\":{\"operation\":{\"type\":\"string\","
                 "\"description\":\"add, sub, mul or div\"},\"a\":{\"type\":\"number\"},"
                 "\"b\":{\"type\":[\"number\",\"null\"]}},\"required\":[\"operation\",\"a\"]}",
                 AIRLOCK_APPROVAL_NEVER);
        add_tool(cfg, "lookup_user", "Finds a user\nby id.", NULL, AIRLOCK_APPROVAL_NEVER);
        char *d = NULL, *i = NULL;
        describe(cfg, &d, &i);
        assert_contains(d, "call_tool(name, **kwargs)");
        assert_contains(d, "keyword arguments only");
        /* The example uses the first tool's required arguments only. */
        assert_contains(d, "e.g. call_tool(\"compute\", operation=\"...\", a=1.5).");
        assert_contains(d, "- compute: Add, subtract, multiply or divide.");
        assert_contains(d, "operation (string, required): add, sub, mul or div");
        assert_contains(d, "a (number, required)");
        assert_contains(d, "b (number or null, optional)");
        /* A multi-line description stays inside its item. */
        assert_contains(d, "- lookup_user: Finds a user\n    by id.");
        assert_contains(d, "arguments: none");
        assert_contains(i, "compute, lookup_user");
        assert_contains(i, "reachable only");
        assert_contains(i, "call_tool(");
        free(d);
        free(i);
        airlock_config_free(cfg);
}

static void test_network_entries(void **state)
{
        airlock_config *cfg = new_config();
        airlock_error err = {0};
        assert_int_equal(airlock_config_allow(cfg, "api.example.com", "GET,POST", &err), 0);
        assert_int_equal(airlock_config_allow(cfg, "https://data.example.org/v1", "GET", &err), 0);
        assert_int_equal(airlock_config_allow(cfg, "localhost:8080", NULL, &err), 0);
        char *d = NULL, *i = NULL;
        describe(cfg, &d, &i);
        assert_not_contains(d, "Network: none");
        assert_contains(d, "http_get(url, headers=None)");
        assert_contains(d, "http_post(url, body=\"\", content_type=\"application/json\", "
                           "headers=None)");
        assert_contains(d, "http_request(method, url, headers=None, body=None)");
        assert_contains(d, "- api.example.com (http and https, any path): GET, POST");
        assert_contains(d, "- https://data.example.org/v1 (and paths below it): GET");
        assert_contains(d, "- localhost:8080 (http and https, any path): any method but CONNECT "
                           "and TRACE");
        assert_contains(i, "HTTP is allowed only");
        free(d);
        free(i);
        airlock_config_free(cfg);
}

static void test_limits_follow_config(void **state)
{
        airlock_config *cfg = new_config();
        airlock_limits l;
        airlock_error err = {0};
        airlock_config_get_limits(cfg, &l);
        l.timeout_s = 7.5;
        l.memory_bytes = 256ull << 20;
        l.pids = 12;
        l.max_output_files = 9;
        assert_int_equal(airlock_config_set_limits(cfg, &l, &err), 0);
        char *d = NULL;
        describe(cfg, &d, NULL);
        assert_contains(d, "7.5 s wall clock");
        assert_contains(d, "256 MiB of memory");
        assert_contains(d, "12 processes");
        assert_contains(d, "at most 9 files");
        free(d);
        assert_int_equal(airlock_config_add_preload(cfg, "json", &err), 0);
        assert_int_equal(airlock_config_add_preload(cfg, "csv", &err), 0);
        describe(cfg, &d, NULL);
        assert_contains(d, "Already loaded (importing is instant): json, csv.\n");
        free(d);
        airlock_config_free(cfg);
}

static void test_workspace_and_mounts(void **state)
{
        char dir[] = "/tmp/airlock-describe-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char p[512];
        snprintf(p, sizeof(p), "%s/ws", dir);
        assert_int_equal(mkdir(p, 0755), 0);
        snprintf(p, sizeof(p), "%s/ws/data.csv", dir);
        write_text(p, "a,b\n1,2\n");
        snprintf(p, sizeof(p), "%s/ws/reports", dir);
        assert_int_equal(mkdir(p, 0755), 0);
        snprintf(p, sizeof(p), "%s/extra.txt", dir);
        write_text(p, "x");

        airlock_config *cfg = new_config();
        airlock_error err = {0};
        snprintf(p, sizeof(p), "%s/ws", dir);
        assert_int_equal(airlock_config_set_workspace(cfg, p, &err), 0);
        snprintf(p, sizeof(p), "%s/extra.txt", dir);
        assert_int_equal(airlock_config_add_mount(cfg, p, "docs/extra.txt", &err), 0);
        char *d = NULL, *i = NULL;
        describe(cfg, &d, &i);
        assert_contains(d, "/input (read-only)");
        assert_contains(d, "/input/data.csv, /input/reports/");
        assert_contains(d, "Mounted: /input/docs/extra.txt");
        assert_not_contains(d, "There is no /input");
        assert_contains(i, "/input");
        free(d);
        free(i);

        /* A name that is not UTF-8 is shown with U+FFFD, so the texts stay
         * valid UTF-8 and the JSON encodes. */
        snprintf(p, sizeof(p), "%s/ws/bad\xffname.txt", dir);
        write_text(p, "x");
        snprintf(p, sizeof(p), "%s/ws", dir);
        assert_int_equal(airlock_config_set_workspace(cfg, p, &err), 0);
        describe(cfg, &d, NULL);
        assert_contains(d, "/input/bad\xef\xbf\xbdname.txt");
        assert_true(al_utf8_valid(d, strlen(d)));
        free(d);
        char *json = airlock_describe_json(cfg, &err);
        assert_non_null(json);
        free(json);

        /* A workspace that does not exist is an error naming it. */
        snprintf(p, sizeof(p), "%s/missing", dir);
        assert_int_equal(airlock_config_set_workspace(cfg, p, &err), 0);
        d = (char *)0x1;
        assert_true(airlock_describe(cfg, &d, NULL, &err) < 0);
        assert_ptr_equal(d, (char *)0x1);
        assert_contains(err.message, "missing");
        airlock_config_free(cfg);

        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        assert_int_equal(system(cmd), 0);
}

static void test_json_shape(void **state)
{
        airlock_config *cfg = new_config();
        airlock_error err = {0};
        char *text = airlock_describe_json(cfg, &err);
        assert_non_null(text);
        json_error_t je;
        json_t *o = json_loads(text, 0, &je);
        assert_non_null(o);
        assert_string_equal(json_string_value(json_object_get(o, "name")), "execute_code");
        assert_true(json_is_string(json_object_get(o, "description")));
        assert_true(json_is_string(json_object_get(o, "instructions")));
        assert_string_equal(json_string_value(json_object_get(o, "approval_mode")),
                            "never_require");
        json_t *schema = json_object_get(o, "input_schema");
        assert_string_equal(json_string_value(json_object_get(schema, "type")), "object");
        json_t *code = json_object_get(json_object_get(schema, "properties"), "code");
        assert_string_equal(json_string_value(json_object_get(code, "type")), "string");
        assert_true(json_is_string(json_object_get(code, "description")));
        json_t *req = json_object_get(schema, "required");
        assert_int_equal(json_array_size(req), 1);
        assert_string_equal(json_string_value(json_array_get(req, 0)), "code");
        json_decref(o);
        free(text);

        /* One tool that requires approval makes the whole tool require it. */
        add_tool(cfg, "delete_all", "Deletes everything.", NULL, AIRLOCK_APPROVAL_ALWAYS);
        text = airlock_describe_json(cfg, &err);
        o = json_loads(text, 0, &je);
        assert_string_equal(json_string_value(json_object_get(o, "approval_mode")),
                            "always_require");
        assert_non_null(strstr(json_string_value(json_object_get(o, "instructions")), "approval"));
        json_decref(o);
        free(text);

        airlock_config_remove_tool(cfg, "delete_all", &err);
        airlock_config_set_approval(cfg, AIRLOCK_APPROVAL_ALWAYS);
        text = airlock_describe_json(cfg, &err);
        o = json_loads(text, 0, &je);
        assert_string_equal(json_string_value(json_object_get(o, "approval_mode")),
                            "always_require");
        json_decref(o);
        free(text);
        airlock_config_free(cfg);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_bare_config),
            cmocka_unit_test(test_tools_listed_with_arguments),
            cmocka_unit_test(test_network_entries),
            cmocka_unit_test(test_limits_follow_config),
            cmocka_unit_test(test_workspace_and_mounts),
            cmocka_unit_test(test_json_shape),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
