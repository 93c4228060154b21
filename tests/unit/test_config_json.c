/* airlock_config_to_json: the configuration read back, every entry as the
 * library normalised it, and airlock_config_add_typed_tool through the
 * public API. */
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
#include <unistd.h>

#include "airlock.h"

static int typed(void *u, const char *args, char **res, char **err, char **type)
{
        *res = strdup("1");
        return 0;
}

static void test_to_json(void **state)
{
        airlock_error err;
        airlock_config *cfg;
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        char *s = airlock_config_to_json(cfg, &err);
        assert_non_null(s);
        json_t *j = json_loads(s, 0, NULL);
        free(s);
        assert_non_null(j);
        assert_true(json_is_null(json_object_get(j, "workspace")));
        assert_int_equal(json_array_size(json_object_get(j, "mounts")), 0);
        assert_string_equal(json_string_value(json_object_get(j, "approval_mode")),
                            "never_require");
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(j, "limits"), "timeout")), "30");
        json_decref(j);

        assert_int_equal(airlock_config_add_mount(cfg, "/etc/hostname", "/input/./a//b", &err), 0);
        assert_int_equal(
            airlock_config_allow(cfg, " HTTPS://Api.Example.com/v1/ ", "post,get,GET", &err), 0);
        assert_int_equal(airlock_config_allow(cfg, "plain.example.com", NULL, &err), 0);
        /* The same target again replaces its methods. */
        assert_int_equal(airlock_config_allow(cfg, "plain.example.com", "put", &err), 0);
        airlock_tool_def def = {.size = sizeof(airlock_tool_def), .name = "t", .description = "d"};
        assert_int_equal(airlock_config_add_typed_tool(cfg, &def, typed, &err), 0);
        assert_int_equal(airlock_config_add_typed_tool(cfg, &def, NULL, &err), -EINVAL);
        assert_int_equal(airlock_config_add_preload(cfg, "json", &err), 0);
        airlock_config_set_approval(cfg, AIRLOCK_APPROVAL_ALWAYS);
        s = airlock_config_to_json(cfg, &err);
        assert_non_null(s);
        j = json_loads(s, 0, NULL);
        free(s);
        json_t *m = json_array_get(json_object_get(j, "mounts"), 0);
        assert_string_equal(json_string_value(json_object_get(m, "host")), "/etc/hostname");
        assert_string_equal(json_string_value(json_object_get(m, "path")), "/input/a/b");
        json_t *a = json_object_get(j, "allowed_domains");
        assert_int_equal(json_array_size(a), 2);
        assert_string_equal(json_string_value(json_object_get(json_array_get(a, 0), "target")),
                            "https://api.example.com/v1");
        json_t *meth = json_object_get(json_array_get(a, 0), "methods");
        assert_int_equal(json_array_size(meth), 2);
        assert_string_equal(json_string_value(json_array_get(meth, 0)), "GET");
        assert_string_equal(json_string_value(json_array_get(meth, 1)), "POST");
        meth = json_object_get(json_array_get(a, 1), "methods");
        assert_int_equal(json_array_size(meth), 1);
        assert_string_equal(json_string_value(json_array_get(meth, 0)), "PUT");
        json_t *t = json_array_get(json_object_get(j, "tools"), 0);
        assert_string_equal(json_string_value(json_object_get(t, "name")), "t");
        assert_string_equal(json_string_value(json_object_get(t, "kind")), "callback");
        assert_string_equal(json_string_value(json_array_get(json_object_get(j, "preloads"), 0)),
                            "json");
        assert_string_equal(json_string_value(json_object_get(j, "approval_mode")),
                            "always_require");
        json_decref(j);
        airlock_config_free(cfg);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_to_json),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
