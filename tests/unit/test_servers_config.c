/* Upstream MCP servers in a configuration (code mode): the Python names
 * made from server and tool names, airlock_config_add_server's checks and
 * messages, copies of a configuration, and the servers read back by
 * airlock_config_to_json. No server is started here (tests/blackbox/
 * test_servers.py starts real ones). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "airlock.h"
#include "config/config.h"
#include "mcp/mcp.h"

static void test_identifiers(void **state)
{
        (void)state;
        static const char *const cases[][2] = {
            {"get-file", "get_file"}, {"get_file", "get_file"},
            {"class", "class_"},      {"2fa", "_2fa"},
            {"a.b/c d", "a_b_c_d"},   {"", "_"},
            {"search", "search_"},    {"é", "__"},
            {"None", "None_"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char buf[64];
                mcp_identifier(cases[i][0], buf, sizeof(buf));
                assert_string_equal(buf, cases[i][1]);
        }
        /* A small buffer cuts the name; it stays a string. */
        char small[4];
        mcp_identifier("abcdef", small, sizeof(small));
        assert_string_equal(small, "abc");
}

/* airlock_config_add_server(name, json) must fail with code, and its
 * message must hold each of the words. */
static void refused(const char *name, const char *json, int code, const char *w1, const char *w2)
{
        airlock_config *cfg;
        airlock_error err;
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        int r = airlock_config_add_server(cfg, name, json, &err);
        if (r != code || !strstr(err.message, w1) || (w2 && !strstr(err.message, w2)))
                fail_msg("%s %s: %d '%s'", name, json, r, err.message);
        /* Nothing was added. */
        char *s = airlock_config_to_json(cfg, &err);
        json_t *j = json_loads(s, 0, NULL);
        assert_int_equal(json_object_size(json_object_get(j, "servers")), 0);
        json_decref(j);
        free(s);
        airlock_config_free(cfg);
}

static void test_refusals(void **state)
{
        (void)state;
        refused("a", "{\"command\": \"sh\", \"colour\": 1}", -EINVAL, "server 'a'", "\"colour\"");
        refused("a", "{}", -EINVAL, "server 'a'", "exactly one of");
        refused("a", "{\"command\": \"sh\", \"url\": \"https://x/\"}", -EINVAL, "exactly one of",
                NULL);
        refused("a", "{\"command\": \"/no/such/program\"}", -ENOENT, "server 'a'", "\"command\"");
        refused("a", "{\"command\": \"no-such-program-here\"}", -ENOENT, "on PATH", NULL);
        refused("a", "{\"url\": \"file:///etc/passwd\"}", -EINVAL, "\"url\" must be", NULL);
        refused("a", "{\"type\": \"sse\", \"url\": \"https://x/sse\"}", -EOPNOTSUPP, "HTTP+SSE",
                NULL);
        refused("a", "{\"command\": \"sh\", \"args\": [1]}", -EINVAL, "\"args\" element 0", NULL);
        refused("a", "{\"command\": \"sh\", \"env\": {\"K\": \"${secret:bad name}\"}}", -EINVAL,
                "'bad name' is not a secret name", NULL);
        refused("a", "{\"command\": \"sh\", \"env\": {\"K\": \"${secret:X\"}}", -EINVAL,
                "${secret:NAME}", NULL);
        refused("a", "{\"command\": \"sh\", \"timeout\": 0}", -EINVAL, "\"timeout\"", NULL);
        refused("a", "{\"command\": \"sh\", \"maxResultBytes\": 1e9}", -EINVAL,
                "\"maxResultBytes\"", NULL);
        refused("a", "{\"command\": \"sh\", \"allowTools\": \"x\"}", -EINVAL, "\"allowTools\"",
                NULL);
        refused("a", "{\"command\": \"sh\", \"tools\": {\"t\": {\"x\": 1}}}", -EINVAL, "tool 't'",
                "unknown key \"x\"");
        refused("a", "{\"command\": \"sh\", \"cwd\": \"/no/such/folder\"}", -ENOENT, "\"cwd\"",
                NULL);
        refused("a", "{\"url\": \"https://x/\", \"env\": {}}", -EINVAL, "\"env\" is for", NULL);
        refused("", "{\"command\": \"sh\"}", -EINVAL, "1 to 64", NULL);
        refused("a", "not json", -EINVAL, "not JSON", NULL);
}

static void test_names_clone_and_json(void **state)
{
        (void)state;
        airlock_config *cfg;
        airlock_error err;
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        assert_int_equal(airlock_config_add_server(cfg, "my-server",
                                                   "{\"command\": \"sh\", \"args\": [\"-c\", "
                                                   "\"true\"], \"denyTools\": [\"rm*\"]}",
                                                   &err),
                         0);
        /* Two servers whose names make one Python name. */
        assert_int_equal(airlock_config_add_server(cfg, "my_server", "{\"command\": \"sh\"}", &err),
                         -EEXIST);
        assert_non_null(strstr(err.message, "Python name 'my_server'"));
        assert_int_equal(airlock_config_add_server(cfg, "my-server", "{\"command\": \"sh\"}", &err),
                         -EEXIST);
        assert_non_null(strstr(err.message, "declared twice"));
        assert_int_equal(
            airlock_config_add_server(cfg, "web", "{\"url\": \"https://example.com/mcp\"}", &err),
            0);
        airlock_config *copy = NULL;
        assert_int_equal(config_clone(cfg, &copy, &err), 0);
        airlock_config_free(cfg);
        assert_int_equal(copy->servers.n, 2);
        assert_string_equal(copy->servers.v[0].module, "my_server");
        char *s = airlock_config_to_json(copy, &err);
        json_t *j = json_loads(s, 0, NULL);
        free(s);
        json_t *sv = json_object_get(j, "servers");
        assert_int_equal(json_object_size(sv), 2);
        assert_string_equal(json_string_value(json_array_get(
                                json_object_get(json_object_get(sv, "my-server"), "denyTools"), 0)),
                            "rm*");
        json_decref(j);
        airlock_config_free(copy);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_identifiers),
            cmocka_unit_test(test_refusals),
            cmocka_unit_test(test_names_clone_and_json),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
